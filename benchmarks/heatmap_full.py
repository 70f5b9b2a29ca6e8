"""Benchmark: the paper's full offline heatmaps (100 x 101 cells, SI's lookahead 1..200, DSI every lookahead
satisfying Eq. 1 on 7 servers, 5 repeats, N = 100).

Prints the fast path's wall time for Fig. 2 and Fig. 7, and, side by side in the
same run, the event-driven simulator's time on a few sampled cells extrapolated
to the whole grid (what the heatmap would cost without the fast path).
Goal (issue 4): the full Fig. 2 grid in at most 120 s on 2 cores.

    .venv/bin/python benchmarks/heatmap_full.py [--event-cells 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.experiments.heatmap import compute_heatmap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--event-cells", type=int, default=3, help="cells to time on the event-driven simulator")
    args = ap.parse_args()

    t = time.perf_counter()
    fig2 = compute_heatmap(100, n=100, repeats=5, sp_degree=7, lookaheads=(1, 200))
    fig2_s = time.perf_counter() - t
    t = time.perf_counter()
    compute_heatmap(100, n=100, repeats=5, sp_degree=7, fixed_lookahead=5)
    fig7_s = time.perf_counter() - t
    cells = fig2.si.size
    print(
        f"fast path, Fig. 2 ({len(fig2.c)} x {len(fig2.a)} cells, SI lookahead 1..200, 5 repeats, N = 100): "
        f"{fig2_s:.2f} s  (goal <= 120 s: {'met' if fig2_s <= 120 else 'MISSED'})"
    )
    print(f"fast path, Fig. 7 (lookahead 5): {fig7_s:.2f} s")

    rng = np.random.default_rng(0)
    per_cell = []
    for _ in range(args.event_cells):
        i, j = int(rng.integers(len(fig2.c))), int(rng.integers(len(fig2.a)))
        c, a = float(fig2.c[i]), float(fig2.a[j])
        t = time.perf_counter()
        # one cell as the paper computes it: SI at every lookahead 1..200, DSI and non-SI, 5 repeats each
        for seed in range(5):
            target = SimulatedModel(16, seed=seed, latency=LatencyProfile.uniform(1.0))
            drafter = target.drafter(a, LatencyProfile.uniform(c), seed=seed + 1)
            generate([1, 2], target, algorithm="nonsi", max_tokens=100)
            generate(
                [1, 2],
                target,
                drafter,
                algorithm="dsi",
                max_tokens=100,
                lookahead=int(fig2.dsi_lookahead[i, j]),
                sp_degree=7,
            )
            for k in range(1, 201):
                generate([1, 2], target, drafter, algorithm="si", max_tokens=100, lookahead=k)
        per_cell.append(time.perf_counter() - t)
    est = float(np.mean(per_cell)) * cells
    print(
        f"event-driven simulator: {np.mean(per_cell):.2f} s per cell -> about {est / 3600:.1f} h for the grid "
        f"({est / fig2_s:.0f}x the fast path)"
    )


if __name__ == "__main__":
    main()
