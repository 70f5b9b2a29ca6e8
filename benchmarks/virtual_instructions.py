"""Virtual-clock cost in CPU instructions per simulated DSI output token: a figure that noise cannot move.

Wall and CPU times on a shared machine swing by 20% from run to run, which hides
the 1-5% steps that speed work is made of. Instructions counted by valgrind's
callgrind are the same on every run (hash seed fixed, address randomization and
BLAS threads off), so two versions of the code compare exactly:

    .venv/bin/python -m benchmarks virtual_instructions                  # this checkout
    git worktree add /tmp/before HEAD~3
    .venv/bin/python -m benchmarks virtual_instructions --src /tmp/before --src .   # side by side

Each arm is a checkout and a setting. Each figure is (instructions of a run of `seeds` generations - instructions of the same
process generating nothing) / output tokens, so imports and setup cancel out. callgrind
runs the code about 50x slower; a setting takes ~15 s. Needs valgrind (Debian: valgrind).

Exact is not the same as smooth. One process's count moves by up to about 3 million
instructions with what the first call imports and what the exit frees (1.5k per token over
the 2,000 tokens of a setting); --slope measures a second batch of generations against the
first instead of against none, which leaves those out. The cyclic collector runs between
generations, when its allocation counters cross a threshold, so one extra list per
generation once moved the issue figure by 4% (a full collection more or less); --no-gc
shows the code's own count. Check a surprising step by
bisecting, and prefer changes that allocate nothing per generation or per token.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.runner import Arm, Benchmark

SETTINGS = {
    # name: (target ms, drafter ms, a, lookahead, SP, N, seeds); the first three are virtual_throughput's
    "issue": (20.0, 1.0, 0.8, 5, 4, 200, 10),
    "paper": (1.0, 0.1, 0.8, 2, 7, 200, 10),
    "n1000": (1.0, 0.05, 0.8, 3, 7, 1000, 2),
}

WORKLOAD = """
import gc, sys
sys.path.insert(0, {src!r})
if {no_gc!r}:
    gc.disable()
from specpar import LatencyProfile, SimulatedModel, generate
t_ms, d_ms, a, k, sp, n, seeds = {setting!r}
for seed in range({runs}):
    target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(t_ms))
    drafter = target.drafter(a, LatencyProfile.uniform(d_ms), seed=seed + 1)
    out = generate([seed % 32], target, drafter, algorithm="dsi", max_tokens=n, lookahead=k, sp_degree=sp)
    assert len(out.tokens) == n
"""


def callgrind_instructions(code: str, label: str) -> int:
    """Instructions callgrind counts for one ``python -c code`` process (one thread for BLAS and OpenMP, fixed hash
    seed, no address randomization where ``setarch`` exists: dict and set layouts repeat)."""
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code]
    if shutil.which("setarch"):
        cmd = ["setarch", "-R", *cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run failed for {label}:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def instructions(src: Path, setting: tuple, runs: int, no_gc: bool = False) -> int:
    """Instructions callgrind counts for one process that runs ``runs`` generations at ``setting``."""
    return callgrind_instructions(WORKLOAD.format(src=str(src / "src"), setting=setting, runs=runs, no_gc=no_gc), src)


def options(p) -> None:
    p.add_argument("--src", action="append", type=Path,
                   help="a checkout to measure (repeat to compare side by side; default: this one)")  # fmt: skip
    p.add_argument("--setting", action="append", choices=sorted(SETTINGS),
                   help="default: all (issue = 20 ms / 1 ms, a = 0.8, k = 5, SP = 4, N = 200)")  # fmt: skip
    p.add_argument("--slope", action="store_true", help="per token of the generations a second batch adds (runs "
                   "seeds..2 seeds-1 minus runs 0..seeds-1): the steady state, without first-call and exit costs")  # fmt: skip
    p.add_argument("--no-gc", action="store_true", help="with the cyclic collector off in every process: the "
                   "code's own instructions, without the collector's phase")  # fmt: skip


def checkouts(args) -> list[Path]:
    trees = [p.resolve() for p in (args.src or [Path(__file__).resolve().parent.parent])]
    for tree in trees:
        if not (tree / "src" / "specpar").is_dir():
            raise SystemExit(f"{tree} is not a specpar checkout (no src/specpar)")
    return trees


def arms(args) -> list[Arm]:
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    return [Arm(f"{name}, {tree}", {"setting": name, "src": str(tree)}) for name in args.setting or list(SETTINGS)
            for tree in checkouts(args)]  # fmt: skip


def measure(arm: Arm, args, r: int) -> dict:
    setting = SETTINGS[arm.settings["setting"]]
    n, seeds = setting[5], setting[6]
    low, high = (seeds, 2 * seeds) if args.slope else (0, seeds)
    tree = Path(arm.settings["src"])
    count = instructions(tree, setting, high, args.no_gc) - instructions(tree, setting, low, args.no_gc)
    return {"instructions_per_token": count / (n * seeds)}


def summarize(results, args) -> dict:
    out = {}
    for name in args.setting or list(SETTINGS):
        row = [a.figures["instructions_per_token"] for a in results if a.arm.settings["setting"] == name]
        if len(row) > 1:
            out[f"{name}: last checkout / first"] = row[-1] / row[0]
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"instructions_per_token": "CPU instructions per DSI output token (callgrind)"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
)
