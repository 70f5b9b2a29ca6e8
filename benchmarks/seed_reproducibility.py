"""How often sampled DSI on threads gives other tokens than the virtual clock for the same seed, 8 runs at once.

The audit's tight latencies (target TTFT 6 ms / TPOT 2 ms, drafter 0.2 ms, a = 0.8, V = 8, SP = 3, k = 2,
N = 24, temperature 1): with rejection sampling a position is decided by a draft's test or by the target's
own sample, whichever reaches it first, so threads differ; with coupling="gumbel" they must not.

    .venv/bin/python benchmarks/seed_reproducibility.py [--seeds 40]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

from specpar import LatencyProfile, SimulatedModel, generate


def run(seed: int, runtime: str, coupling: str) -> list[int]:
    target = SimulatedModel(8, seed=5, latency=LatencyProfile(ttft_ms=6.0, tpot_ms=2.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(0.2), seed=6)
    kw = dict(algorithm="dsi", max_tokens=24, lookahead=2, sp_degree=3, temperature=1.0, coupling=coupling)
    return generate([1, 2], target, drafter, seed=seed, runtime=runtime, **kw).tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40, help="runs per coupling (default 40)")
    n = parser.parse_args().seeds
    for coupling in ("rejection", "gumbel"):
        with ThreadPoolExecutor(8) as pool:
            threads = list(pool.map(lambda s: run(s, "threads", coupling), range(n)))
        differ = sum(t != run(s, "virtual", coupling) for s, t in enumerate(threads))
        print(f"{coupling:<10} DSI on threads, 8 at once, differs from the virtual clock in {differ} of {n} seeds")


if __name__ == "__main__":
    main()
