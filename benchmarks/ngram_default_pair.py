"""The n-gram (prompt lookup) proposer on the default pair, beside the drafter model and non-SI.

Qwen2.5-Coder 1.5B (target) and 0.5B (drafter), on llama.cpp (``--backend llama``, the GGUF files, the default)
or float32 transformers on this machine's CPU, greedy, every arm generating N tokens (ignore_eos), from a cold
cache, interleaved per prompt (the arms' order rotates from one prompt to the next). Every arm runs on one engine
(``units=1``: the same servers, the same cores and thread settings, each request's own configuration on all of them)
after one warm-up generation of each arm on a prompt that is not measured; each arm's tokens are checked equal to
non-SI's on every prompt. Prompts: the first n HumanEval prompts, and the prompts of
benchmarks/prompts/edit_function.jsonl, which ask to edit a function they give (the answer repeats most of it).

Arms: non-SI; SI with the drafter model (k = 5); SI and DSI with the n-gram proposer alone; DSI with the n-gram
proposer in front of the drafter model. Per arm: wall time, tokens per target pass (output tokens / target forward
passes, the cursor's passes included), acceptance rate; per prompt, each arm's speedup over non-SI. Goal (issue 25):
DSI with the n-gram proposer >= 0.98x non-SI on every prompt.

    .venv/bin/python benchmarks/ngram_default_pair.py [-n 10] [-N 64] [--ngram-k 8] [--backend llama] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specpar.core.params import SamplingParams
from specpar.entrypoints.engine import Engine
from specpar.experiments import prompts

EDITS = Path(__file__).parent / "prompts" / "edit_function.jsonl"


def arms(args) -> dict[str, dict]:
    lookup = f"ngram:{args.min_n}:{args.max_n}"
    return {
        "nonsi": dict(algorithm="nonsi"),
        "si-model": dict(algorithm="si", lookahead=args.k),
        "si-ngram": dict(algorithm="si", proposer=lookup, lookahead=args.ngram_k),
        "dsi-ngram": dict(algorithm="dsi", proposer=lookup, lookahead=args.ngram_k, sp_degree=args.sp_degree),
        "dsi-ngram+model": dict(
            algorithm="dsi", proposer=lookup + "+drafter", lookahead=args.k, sp_degree=args.sp_degree
        ),  # fmt: skip
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="HumanEval prompts (default 10)")
    ap.add_argument("--edits", type=int, default=5, help="edit prompts (default 5)")
    ap.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    ap.add_argument("-k", type=int, default=5, help="the drafter model's lookahead (default 5)")
    ap.add_argument("--ngram-k", type=int, default=8, help="the n-gram proposer's lookahead (default 8)")
    ap.add_argument("--min-n", type=int, default=2)
    ap.add_argument("--max-n", type=int, default=4)
    ap.add_argument("--sp-degree", type=int, default=2)
    ap.add_argument("--backend", default="llama", choices=("llama", "transformers"))
    ap.add_argument("--arms", default=None, help="comma-separated subset of the arms")
    ap.add_argument("--out", default="benchmarks/results/ngram_default_pair.jsonl")
    ap.add_argument("--report", metavar="JSONL", help="print the tables of a run's rows (one cut short: its prompts "
                    "with every arm) and exit")  # fmt: skip
    args = ap.parse_args()
    chosen = arms(args)
    if args.arms:
        chosen = {a: chosen[a] for a in args.arms.split(",")}
    names = list(chosen)
    if args.report:
        report_file(args.report, names, args)
        return
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    print(f"command: {' '.join(sys.argv)}\nuptime: {_uptime()}", flush=True)
    t0 = time.time()
    engine = Engine(sp_degree=args.sp_degree, runtime="threads", units=1, backend=args.backend)
    print(f"loaded {engine.target_model.name} and {engine.drafter_model.name} ({args.backend}) in "
          f"{time.time() - t0:.0f} s", flush=True)  # fmt: skip
    todo = interleave(prompts.load("humaneval", args.n), prompts.load(str(EDITS), args.edits))
    params = SamplingParams(temperature=0, max_tokens=args.N, ignore_eos=True)
    warm = prompts.load("humaneval", args.n + 1)[-1].token_ids(engine.target_model)  # not among the measured
    for arm in names:  # every arm once before any is timed: the same warm caches, pages and threads for all
        engine.reset()
        engine.generate(warm, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), **chosen[arm])
    rows: dict[str, dict[str, dict]] = {}
    loads = []
    with open(args.out, "w") as out:
        for i, prompt in enumerate(todo):
            ids = prompt.token_ids(engine.target_model)
            order = names[i % len(names) :] + names[: i % len(names)]
            for arm in order:
                engine.reset()
                loads.append(os.getloadavg()[0])
                t = time.perf_counter()
                res = engine.generate(ids, params, **chosen[arm])
                wall = time.perf_counter() - t
                if res.algorithm != chosen[arm]["algorithm"]:
                    raise SystemExit(f"{arm} ran {res.algorithm}")
                row = {
                    "prompt": prompt.id, "arm": arm, "wall_s": wall, "tokens": len(res.tokens),
                    "target_passes": res.target_forwards, "tokens_per_target_pass": len(res.tokens) / res.target_forwards,
                    "drafter_passes": res.drafter_forwards, "drafted": res.drafted, "accepted": res.accepted,
                    "output": res.tokens, "load": loads[-1],
                }  # fmt: skip
                rows.setdefault(prompt.id, {})[arm] = row
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"{prompt.id:14s} {arm:16s} {wall:6.1f} s  {row['tokens_per_target_pass']:.2f} tokens/pass  "
                      f"accepted {res.accepted}/{res.drafted}", flush=True)  # fmt: skip
    engine.close()
    print(f"uptime: {_uptime()}", flush=True)
    report(rows, names, args, loads, time.time() - t0)


def interleave(first: list, second: list) -> list:
    """Both lists in one, the second's items spread evenly among the first's (a run cut short still has both)."""
    step = max(1, round(len(first) / max(1, len(second))))
    out, rest = [], list(second)
    for i, item in enumerate(first):
        out.append(item)
        if (i + 1) % step == 0 and rest:
            out.append(rest.pop(0))
    return out + rest


def report_file(path: str, names: list[str], args) -> None:
    """The tables of the rows in ``path``, for the prompts every arm of ``names`` ran on."""
    rows: dict[str, dict[str, dict]] = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["prompt"], {})[row["arm"]] = row
    rows = {p: r for p, r in rows.items() if all(a in r for a in names)}
    loads = [r[a]["load"] for r in rows.values() for a in names]
    report(rows, names, args, loads, None)


def report(rows: dict, names: list[str], args, loads: list[float], elapsed: float | None) -> None:
    took = f"; {elapsed / 60:.0f} min" if elapsed is not None else ""
    print(f"\ndefault pair, {len(rows)} prompts x {args.N} tokens, greedy, threads, SP {args.sp_degree}; model k = "
          f"{args.k}, n-gram {args.min_n}..{args.max_n} k = {args.ngram_k}; load average {min(loads):.1f}..{max(loads):.1f} "
          f"(median {statistics.median(loads):.1f}) on {os.cpu_count()} cores{took}")  # fmt: skip
    for group, keep in (("HumanEval", lambda p: p.startswith("HumanEval")), ("edit", lambda p: p.startswith("edit"))):
        ids = [p for p in rows if keep(p)]
        if not ids:
            continue
        print(
            f"\n{group} ({len(ids)} prompts)      wall s   tokens/pass   accept   vs non-SI (mean, min)  same as non-SI"
        )
        for arm in names:
            rs = [rows[p][arm] for p in ids if arm in rows[p]]
            wall = sum(r["wall_s"] for r in rs)
            per_pass = sum(r["tokens"] for r in rs) / sum(r["target_passes"] for r in rs)
            drafted = sum(r["drafted"] for r in rs)
            accept = sum(r["accepted"] for r in rs) / drafted if drafted else float("nan")
            if "nonsi" in names:
                ratios = [rows[p]["nonsi"]["wall_s"] / rows[p][arm]["wall_s"] for p in ids]
                base = sum(rows[p]["nonsi"]["wall_s"] for p in ids) / wall
                same = all(rows[p][arm]["output"] == rows[p]["nonsi"]["output"] for p in ids)
                vs = f"{base:5.2f}x  {min(ratios):5.2f}x         {'yes' if same else 'NO'}"
            else:
                vs = "-"
            print(f"  {arm:18s} {wall:8.1f}   {per_pass:8.2f}   {accept:6.2f}   {vs}")
    if "nonsi" in names:
        shown = [a for a in names if a != "nonsi"]
        print("\nper prompt: non-SI s, then each arm's speedup over non-SI (tokens per target pass); * = tokens differ")
        print(f"  {'prompt':14s} {'non-SI s':>8s}  " + "  ".join(f"{a:>18s}" for a in shown))
        for p, r in rows.items():
            base = r["nonsi"]["wall_s"]
            cells = [
                f"{base / r[a]['wall_s']:5.2f}x ({r[a]['tokens_per_target_pass']:4.2f})"
                + ("*" if r[a]["output"] != r["nonsi"]["output"] else " ")
                for a in shown
            ]
            print(f"  {p:14s} {base:8.1f}  " + "  ".join(f"{c:>18s}" for c in cells))
        differ = [(p, a) for p, r in rows.items() for a in shown if r[a]["output"] != r["nonsi"]["output"]]
        print(f"tokens equal to non-SI's: {'every arm on every prompt' if not differ else f'NO: {differ}'}")
    if "nonsi" in names and "dsi-ngram" in names:
        worst = min(rows[p]["nonsi"]["wall_s"] / rows[p]["dsi-ngram"]["wall_s"] for p in rows)
        print(f"\nDSI with the n-gram proposer vs non-SI, worst prompt: {worst:.3f}x (goal >= 0.98x on every prompt): "
              f"{'MET' if worst >= 0.98 else 'NOT MET'}")  # fmt: skip


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
