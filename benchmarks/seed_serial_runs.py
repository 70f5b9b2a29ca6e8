"""What one seed gives in serial runs of sampled DSI on threads: distinct outputs in 5 runs, per coupling.

A tiny random transformers pair (tests/tiny_transformers.py: no download), prompt [1 .. 5], 32 tokens, temperature 1,
seed 7, sp_degree 2; each round is a fresh process per arm (coupling). With rejection sampling (the default) which
of a draft's test or the target's own sample decides a position is a race on threads, so the runs can differ
(specpar.core.decoding says what reproduces where); with coupling="gumbel" they cannot. To compare versions, run it
with each checkout's code first on the path, interleaved:

    PYTHONPATH=$PWD/src python -m benchmarks seed_serial_runs [--rounds 4]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.runner import Arm, Benchmark

ONE_PROCESS = """
import sys
sys.path.insert(0, {tests!r})
from tiny_transformers import tiny_pair
from specpar import generate

target, drafter = tiny_pair(vocab=64, seed=0, noise=0.3)
kw = {{}} if {coupling!r} == "rejection" else {{"coupling": {coupling!r}}}
outs = {{
    tuple(generate([1, 2, 3, 4, 5], target, drafter, algorithm="dsi", max_tokens=32, temperature=1.0, seed=7,
                   runtime="threads", sp_degree=2, **kw).tokens)
    for _ in range(5)
}}
print(len(outs))
"""
TESTS = str(Path(__file__).resolve().parent.parent / "tests")


def arms(args) -> list[Arm]:
    return [Arm(coupling, {"coupling": coupling}) for coupling in ("rejection", "gumbel")]


def measure(arm: Arm, args, r: int) -> dict:
    """One process (it inherits PYTHONPATH): distinct outputs of its 5 serial runs."""
    code = ONE_PROCESS.format(tests=TESTS, coupling=arm.settings["coupling"])
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    return {"distinct_outputs_in_5_runs": int(done.stdout.split()[-1])}


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"distinct_outputs_in_5_runs": "distinct outputs of 5 serial runs of one seed in one process"},
    arms=arms,
    measure=measure,
    rounds=4,
)
