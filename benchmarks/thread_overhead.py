"""The thread runtime's orchestration overhead: its wall time over the virtual clock's prediction, per seed.

DSI with simulated servers that sleep for their latency (drafter 1 ms/token, target 20 ms, a = 0.8, lookahead 5,
SP = 4, N = 200). Each round r runs the same generation (seed r) on the virtual clock (the exact prediction:
nothing sleeps) and on threads (real sleeps, real queues); both must give the target's greedy tokens. Goal: the
median over the rounds of threads / virtual <= 1.05.

    python -m benchmarks thread_overhead --rounds 9
"""

from __future__ import annotations

import statistics

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate

PROMPT = [1, 2, 3]
GOAL = 1.05


def options(p) -> None:
    p.add_argument("-N", type=int, default=200, help="tokens per generation (default 200)")


def arms(args) -> list[Arm]:
    return [Arm(runtime, {"runtime": runtime}) for runtime in ("virtual", "threads")]


def measure(arm: Arm, args, r: int) -> dict:
    target = SimulatedModel(32, seed=r, latency=LatencyProfile.uniform(20.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=r + 1)
    out = generate(PROMPT, target, drafter, algorithm="dsi", max_tokens=args.N, lookahead=5, sp_degree=4,
                   runtime=arm.settings["runtime"])  # fmt: skip
    if out.tokens != target.greedy_tokens(PROMPT, args.N):
        raise AssertionError(f"seed {r}: the {arm.name} runtime's tokens are not the target's")
    return {"time_ms": out.time_ms, "tasks": len(out.timeline)}


def summarize(results, args) -> dict:
    virtual, threads = (a for a in results)
    ratios = [t / v for t, v in zip(threads.values("time_ms"), virtual.values("time_ms"))]
    extra_us = [
        (t - v) * 1000 / max(1, n) for t, v, n in zip(threads.values("time_ms"), virtual.values("time_ms"),
                                                      threads.values("tasks"))
    ]  # fmt: skip
    median = statistics.median(ratios)
    return {
        "threads_over_virtual_per_seed": [round(x, 4) for x in ratios],
        "median_threads_over_virtual": median,
        "overhead_per_task_us": [round(x) for x in extra_us],
        "goal": f"median <= {GOAL}: {'met' if median <= GOAL else 'not met'}",
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"time_ms": "generation time, ms (virtual: predicted; threads: wall)", "tasks": "server calls"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    rounds=9,
)
