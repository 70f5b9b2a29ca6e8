"""The default pair on the llama backend: non-SI, SI and DSI (Ray, a process per target server, SP 1 and 2) beside
llama.cpp's own draft-model speculative decoding and plain decoding, on the same HumanEval prompts, arms interleaved
per prompt, every arm on the same threads and cores.

Per prompt every arm runs once from a cold cache, in an order that rotates from prompt to prompt (a drift of a
shared machine does not favour one arm): specpar's arms on one Ray engine whose actors are built once (the target
servers in actors, the drafter in the driver: Ray's default here), and llama.cpp's own tools, built from the
source vendored in the llama-cpp-python sdist (benchmarks/llama_cpp_tools.py): ``llama-speculative-simple`` (the
draft-model speculative decoding of llama-server) and ``llama-completion`` (its plain decoding), both greedy (with
``--no-repack`` on a CPU with AMX, where their repacked AMX matmul faults: ggml-org/llama.cpp#20824).

Equal resources: every model computation of every arm runs ``--threads`` threads (default 1: specpar's exact
setting for one-token passes, one per server; llama.cpp's -t, -tb, -td, -tbd get the same number), and every arm
runs on the same cores (``--cores``, default all of the machine's, through ``taskset`` for llama.cpp's tools and
the CPU affinity of this process, which Ray's actors inherit, for specpar's). Times: specpar's generation wall time
(prefill included); llama.cpp's own encode + decode timings (model load excluded). Tokens: each specpar arm against
non-SI's; llama.cpp's texts against specpar's non-SI text (and its speculative text against its plain text).

Writes the per-prompt rows (jsonl) and a text table (--txt) with the command, ``uptime`` before and after, the
threads and cores, per-prompt and overall ratios to non-SI and whether each arm's output equals non-SI's.
Wrap it in ``flock /tmp/specpar-measure.lock`` where others measure on the same machine.

    .venv/bin/python benchmarks/llama_speed.py [-n 10] [-N 64] [-k 4] [--threads 1] [--cores 0,1] [--out FILE]
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
    from specpar.backends.llama.library import build_has

    common = ["-p", prompt, "-n", str(args.N), "--temp", "0", "--top-k", "1", "-t", threads, "-tb", threads,
              "-c", "2048", "--seed", "0"]  # fmt: skip
    if build_has("AMX_INT8"):  # its repacked AMX matmul faults on AMX CPUs (ggml-org/llama.cpp#20824)
        common.append("--no-repack")
    if arm == "llama.cpp speculative":
        cmd = [str(bindir / "llama-speculative-simple"), "-m", str(target), "-md", str(drafter),
               "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0",
               "-td", threads, "-tbd", threads, *common]  # fmt: skip
    else:
        cmd = [str(bindir / "llama-completion"), "-m", str(target), "-no-cnv", "--no-display-prompt", *common]
    cmd = ["taskset", "-c", args.cores, *cmd]
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


def load_models(threads: int, exact: bool = True):
    """The default pair on llama.cpp in the exact or the fast mode, every forward pass on ``threads`` threads."""
    from specpar.backends import weights
    from specpar.backends.llama.model import LlamaModel
    from specpar.backends.llama.settings import LlamaSettings
    from specpar.backends.loading import load_pair

    target, drafter = load_pair(backend="llama", progress=False, exact=exact)
    paths = weights.joined_path(weights.TARGET), weights.joined_path(weights.DRAFTER)
    if threads != 1 or not exact:  # equal threads: the same count in one-token passes (exact here: contexts < 257)
        settings = LlamaSettings(exact=exact, threads=threads, batch_threads=threads)
        target = LlamaModel(paths[0], name=target.name, settings=settings)
        drafter = LlamaModel(paths[1], name=drafter.name, settings=settings)
    return target, drafter, paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="HumanEval prompts (default 10)")
    ap.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    ap.add_argument("-k", type=int, default=4, help="lookahead, and llama.cpp's --draft-max (default 4)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads of every model computation in every arm: llama.cpp's -t, -tb, -td, -tbd and specpar's servers' "
        "(default 1: specpar's exact setting, a thread per process)",
    )
    ap.add_argument(
        "--cores",
        default=",".join(str(c) for c in sorted(os.sched_getaffinity(0))),
        help="the CPUs every arm runs on (taskset list; default all this process may use)",
    )
    ap.add_argument("--no-exact", dest="exact", action="store_false", help="specpar's arms in the fast mode")
    ap.add_argument("--out", default="benchmarks/results/llama_speed.jsonl")
    ap.add_argument("--txt", default=None, help="the text table (default: --out with .txt)")
    args = ap.parse_args()
    txt = Path(args.txt or str(Path(args.out).with_suffix(".txt")))
    cores = {int(c) for part in args.cores.split(",") for c in _cpu_range(part)}
    os.sched_setaffinity(0, cores)  # specpar's arms: this process, and Ray's actors (they inherit it)

    from specpar.entrypoints.engine import Engine
    from specpar.experiments import prompts

    lines = [
        f"command: {' '.join(sys.argv)}",
        f"uptime before: {_uptime()}",
        f"resources, every arm: {args.threads} thread(s) per model computation (specpar: per server process, "
        f"one-token and batched passes; llama.cpp: -t/-tb/-td/-tbd {args.threads}), cores {args.cores} "
        f"({len(cores)} of {os.cpu_count()}; specpar by this process's affinity, llama.cpp by taskset); "
        f"k = {args.k}, {args.N} tokens, greedy, specpar in the {'exact' if args.exact else 'fast'} mode",
    ]
    for line in lines:
        print(line, flush=True)
    bindir = tools()
    target, drafter, paths = load_models(args.threads, args.exact)
    # units=1: the two target servers and the drafter are one unit, each request on all of them (the default of
    # sp_degree + 1 units would make a third target actor, more than 2 cores can place)
    engine = Engine(target, drafter, sp_degree=2, runtime="ray", max_tokens=2048, cpus_per_server=args.threads, units=1)
    params = SamplingParams(temperature=0, max_tokens=args.N)
    arms = SPECPAR_ARMS + LLAMA_ARMS
    rows = []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as out:
        for i, prompt in enumerate(prompts.load("humaneval", args.n)):
            ids = prompt.token_ids(target)
            row = {"prompt": i, "prompt_tokens": len(ids), "threads": args.threads, "cores": args.cores}
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
                    "algorithm": res.algorithm,
                    "acceptance_rate": res.acceptance_rate if algorithm != "nonsi" else None,
                }
            row["load_avg"] = os.getloadavg()[0]
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(prompt_line(row, arms), flush=True)
    engine.close()
    lines.append(f"uptime after: {_uptime()}")
    lines += ["", "per prompt: seconds (speed vs non-SI: non-SI time / arm time; * = output differs from non-SI's)"]
    lines += [prompt_line(r, arms) for r in rows]
    lines += report(rows, arms)
    txt.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(arms) - 3 :]))
    print(f"wrote {args.out} and {txt}")


def same_as_nonsi(row: dict, arm: str) -> bool:
    """Whether an arm's output equals non-SI's: its tokens (specpar's arms) or its text (llama.cpp's tools)."""
    if arm in SPECPAR_ARMS:
        return row[arm]["tokens"] == row["nonsi"]["tokens"]
    return _same_text(row[arm]["text"], row["nonsi"]["text"])


def prompt_line(row: dict, arms) -> str:
    base = row["nonsi"]["time_ms"]
    return f"prompt {row['prompt']} ({row['prompt_tokens']} tokens, load {row['load_avg']:.1f}): " + ", ".join(
        f"{a} {row[a]['time_ms'] / 1000:.2f} s ({base / row[a]['time_ms']:.2f}x){'' if same_as_nonsi(row, a) else '*'}"
        for a in arms
    )


def report(rows: list[dict], arms) -> list[str]:
    """The overall table: mean time, ratio of means and per-prompt ratios to non-SI, outputs equal to non-SI's."""
    out = [
        "",
        "| arm | mean s | vs non-SI (ratio of means) | per prompt vs non-SI (min-max) | prompts >= 0.98x | acceptance "
        "| output = non-SI's |",
        "|---|---|---|---|---|---|---|",
    ]
    base = [r["nonsi"]["time_ms"] for r in rows]
    for arm in arms:
        times = [r[arm]["time_ms"] for r in rows]
        per = [b / t for b, t in zip(base, times)]
        same = sum(same_as_nonsi(r, arm) for r in rows)
        same_text = f"{same}/{len(rows)} ({'tokens' if arm in SPECPAR_ARMS else 'text'})"
        if arm == "llama.cpp speculative":
            plain = sum(_same_text(r[arm]["text"], r["llama.cpp plain"]["text"]) for r in rows)
            same_text += f"; {plain}/{len(rows)} = llama.cpp plain's text"
        acc = [r[arm].get("acceptance_rate") for r in rows if r[arm].get("acceptance_rate") is not None]
        out.append(
            f"| {arm} | {statistics.mean(times) / 1000:.2f} | {statistics.mean(base) / statistics.mean(times):.2f}x "
            f"| {min(per):.2f}-{max(per):.2f} | {sum(p >= 0.98 for p in per)}/{len(rows)} "
            f"| {f'{statistics.mean(acc):.2f}' if acc else '-'} | {same_text} |"
        )
    return out


def _same_text(a: str, b: str) -> bool:
    """The same text up to the shorter one's end (llama.cpp's speculative run may go a few tokens past -n; its
    tools end their output with newlines of their own)."""
    a, b = a.rstrip("\n"), b.rstrip("\n")
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def _cpu_range(part: str) -> range:
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
