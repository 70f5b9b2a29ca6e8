"""What one seed gives in serial runs of sampled DSI on threads: distinct outputs in 5 runs, per coupling.

A tiny random transformers pair (tests/tiny_transformers.py: no download), prompt [1 .. 5], 32 tokens, temperature 1,
seed 7, sp_degree 2. With rejection sampling (the default) which of a draft's test or the target's own sample decides
a position is a race on threads, so the runs can differ (specpar.core.decoding says what reproduces where); with
coupling="gumbel" they cannot. To compare versions, run it with each checkout's code first on the path, interleaved:

    PYTHONPATH=$PWD/src .venv/bin/python benchmarks/seed_serial_runs.py [--processes 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4, help="processes per coupling (default 4)")
    n = parser.parse_args().processes
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    for coupling in ("rejection", "gumbel"):
        counts = [
            subprocess.run(
                [sys.executable, "-W", "ignore", "-c", ONE_PROCESS.format(tests=tests, coupling=coupling)],
                capture_output=True, text=True, check=True,
            ).stdout.split()[-1]
            for _ in range(n)
        ]  # fmt: skip
        print(f"{coupling:<10} distinct outputs in 5 serial runs of one seed, per process: {', '.join(counts)}")


if __name__ == "__main__":
    main()
