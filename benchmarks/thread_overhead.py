"""Orchestration overhead of the thread runtime: wall time over the virtual clock's prediction.

DSI with sleep-based simulated servers (drafter 1 ms/token, target 20 ms,
a = 0.8, lookahead 5, SP = 4, N = 200). For each seed the same generation runs
on the virtual clock (exact prediction, nothing sleeps) and on threads (real
sleeps, real queues); both must return the same tokens. Goal: median ratio <= 1.05.

    .venv/bin/python benchmarks/thread_overhead.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import time

from specpar import LatencyProfile, SimulatedModel, generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("-N", type=int, default=200)
    args = ap.parse_args()
    ratios = []
    print(f"{'seed':>4} {'virtual ms':>11} {'threads ms':>11} {'ratio':>7} {'tasks':>6} {'overhead/task us':>17}")
    for seed in range(args.repeats):
        target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(20.0))
        drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=seed + 1)
        kw = dict(algorithm="dsi", max_tokens=args.N, lookahead=5, sp_degree=4)
        virtual = generate([1, 2, 3], target, drafter, runtime="virtual", **kw)
        threads = generate([1, 2, 3], target, drafter, runtime="threads", **kw)
        assert threads.tokens == virtual.tokens == target.greedy_tokens([1, 2, 3], args.N)
        ratio = threads.time_ms / virtual.time_ms
        ratios.append(ratio)
        tasks = len(threads.timeline)
        per_task = (threads.time_ms - virtual.time_ms) * 1000 / max(1, tasks)
        print(f"{seed:>4} {virtual.time_ms:>11.1f} {threads.time_ms:>11.1f} {ratio:>7.3f} {tasks:>6} {per_task:>17.0f}")
    med = statistics.median(ratios)
    print(f"median wall / virtual = {med:.3f} (goal <= 1.05): {'MET' if med <= 1.05 else 'NOT MET'}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.1f} s)")
