"""The default pair on the llama backend: non-SI, SI and DSI (Ray, a process per target server, SP 1 and 2) beside
llama.cpp's own draft-model speculative decoding, on the same HumanEval prompts, arms interleaved per prompt.

Per prompt every arm runs once from a cold cache, in an order that rotates from prompt to prompt (a drift of a
shared machine does not favour one arm): specpar's arms on one Ray engine whose actors are built once (the target
servers in actors, the drafter in the driver: Ray's default here), and llama.cpp's own tools, built from the
source vendored in the llama-cpp-python sdist (benchmarks/llama_cpp_tools.py): ``llama-speculative-simple`` (the
draft-model speculative decoding of llama-server) and ``llama-completion`` (its plain decoding), both greedy with
``-t`` threads. Times: specpar's generation wall time (prefill included); llama.cpp's own encode + decode timings
(model load excluded). Tokens: each specpar arm against non-SI's; llama.cpp's speculative text against its plain
decoding's and against specpar's non-SI text.

    .venv/bin/python benchmarks/llama_speed.py [-n 10] [-N 64] [-k 4] [--threads 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama_cpp_tools import tools  # noqa: E402
from specpar.core.params import SamplingParams  # noqa: E402

SPECPAR_ARMS = ("nonsi", "si", "dsi sp=1", "dsi sp=2")
LLAMA_ARMS = ("llama.cpp speculative", "llama.cpp plain")
TIMING = re.compile(r"(encoded|decoded)\s+(\d+) tokens in\s+([\d.]+) seconds")
EVAL = re.compile(r"(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+)")


def run_llama_cpp(arm: str, bindir: Path, target: Path, drafter: Path, prompt: str, args) -> dict:
    """One llama.cpp run: its generated text and time (ms, encode + decode as it reports them)."""
    threads = str(args.threads)
    common = ["-p", prompt, "-n", str(args.N), "--temp", "0", "--top-k", "1", "-t", threads, "-tb", threads,
              "-c", "2048", "--seed", "0"]  # fmt: skip
    if arm == "llama.cpp speculative":
        cmd = [str(bindir / "llama-speculative-simple"), "-m", str(target), "-md", str(drafter),
               "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0",
               "-td", threads, "-tbd", threads, *common]  # fmt: skip
    else:
        cmd = [str(bindir / "llama-completion"), "-m", str(target), "-no-cnv", "--no-display-prompt", *common]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{arm} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    text = proc.stdout
    if arm == "llama.cpp speculative":
        ms = sum(float(m[2]) * 1000 for m in TIMING.findall(proc.stderr))
        text = text[2:] if text.startswith("\n\n") else text  # the tool writes two newlines, the prompt, the output
        text = text[len(prompt) :] if text.startswith(prompt) else text
        accept = re.search(r"accept\s+=\s+([\d.]+)%", proc.stderr + proc.stdout)
        extra = {"acceptance_rate": float(accept.group(1)) / 100 if accept else None}
    else:
        ms = sum(float(m[1]) for m in EVAL.findall(proc.stderr))
        extra = {}
    return {"text": text, "time_ms": ms, "process_s": wall, **extra}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="HumanEval prompts (default 10)")
    ap.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    ap.add_argument("-k", type=int, default=4, help="lookahead, and llama.cpp's --draft-max (default 4)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="llama.cpp's -t, -tb, -td, -tbd (default 1: a thread per process, as specpar's servers; OpenMP's spinning "
        "threads slow it down 10x when other work shares the cores)",
    )
    ap.add_argument("--out", default="benchmarks/results/llama_speed.jsonl")
    args = ap.parse_args()

    from specpar.backends import weights
    from specpar.entrypoints.engine import Engine, load_pair
    from specpar.experiments import prompts

    print(f"command: {' '.join(sys.argv)}\nuptime: {_uptime()}", flush=True)
    bindir = tools()
    target, drafter = load_pair(backend="llama", progress=False)
    paths = weights.joined_path(weights.TARGET), weights.joined_path(weights.DRAFTER)
    engine = Engine(target, drafter, sp_degree=2, runtime="ray", max_tokens=2048)
    params = SamplingParams(temperature=0, max_tokens=args.N)
    arms = SPECPAR_ARMS + LLAMA_ARMS
    rows = []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as out:
        for i, prompt in enumerate(prompts.load("humaneval", args.n)):
            ids = prompt.token_ids(target)
            row = {"prompt": i, "prompt_tokens": len(ids)}
            for arm in arms[i % len(arms) :] + arms[: i % len(arms)]:
                if arm in LLAMA_ARMS:
                    row[arm] = run_llama_cpp(arm, bindir, *paths, prompt.text, args)
                    continue
                algorithm = arm.split()[0]
                engine.reset()
                sp = 2 if arm.endswith("sp=2") else 1
                res = engine.generate(ids, params, algorithm=algorithm, lookahead=args.k, sp_degree=sp)
                row[arm] = {
                    "tokens": res.tokens,
                    "text": res.text,
                    "time_ms": res.time_ms,
                    "acceptance_rate": res.acceptance_rate if algorithm != "nonsi" else None,
                }
            row["load_avg"] = os.getloadavg()[0]
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            base = row["nonsi"]["time_ms"]
            print(
                f"prompt {i} ({len(ids)} tokens, load {row['load_avg']:.1f}): "
                + ", ".join(f"{a} {row[a]['time_ms'] / 1000:.2f} s ({base / row[a]['time_ms']:.2f}x)" for a in arms),
                flush=True,
            )
    engine.close()
    print(f"uptime: {_uptime()}")
    report(rows, arms)


def report(rows: list[dict], arms) -> None:
    print("\n| arm | mean s | vs non-SI (mean) | per-prompt vs non-SI | acceptance | same output |")
    print("|---|---|---|---|---|---|")
    base = [r["nonsi"]["time_ms"] for r in rows]
    for arm in arms:
        times = [r[arm]["time_ms"] for r in rows]
        per = [b / t for b, t in zip(base, times)]
        if arm in SPECPAR_ARMS:
            same = all(r[arm]["tokens"] == r["nonsi"]["tokens"] for r in rows)
            same_text = f"{'yes' if same else 'NO'} (tokens = non-SI's)"
        elif arm == "llama.cpp speculative":
            equal = sum(_same_text(r[arm]["text"], r["llama.cpp plain"]["text"]) for r in rows)
            specpar = sum(_same_text(r[arm]["text"], r["nonsi"]["text"]) for r in rows)
            same_text = f"{equal}/{len(rows)} = llama.cpp plain, {specpar}/{len(rows)} = specpar non-SI"
        else:
            specpar = sum(_same_text(r[arm]["text"], r["nonsi"]["text"]) for r in rows)
            same_text = f"{specpar}/{len(rows)} = specpar non-SI"
        acc = [r[arm].get("acceptance_rate") for r in rows if r[arm].get("acceptance_rate") is not None]
        print(
            f"| {arm} | {statistics.mean(times) / 1000:.2f} | {statistics.mean(base) / statistics.mean(times):.2f}x "
            f"| {min(per):.2f}-{max(per):.2f} | {statistics.mean(acc):.2f} | {same_text} |"
            if acc
            else f"| {arm} | {statistics.mean(times) / 1000:.2f} | "
            f"{statistics.mean(base) / statistics.mean(times):.2f}x | {min(per):.2f}-{max(per):.2f} | - | {same_text} |"
        )


def _same_text(a: str, b: str) -> bool:
    """The same text up to the shorter one's end (llama.cpp's speculative run may go a few tokens past -n; its
    tools end their output with newlines of their own)."""
    a, b = a.rstrip("\n"), b.rstrip("\n")
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
