"""Adaptive lookahead vs every fixed lookahead under a drifting acceptance rate (simulated models, virtual clock).

The drafter agrees with the target at a = 0.9 for 50 tokens, then 0.4 for 50, and so on (``Regimes``); target TPOT
1 ms, drafter c = 0.1 (uniform latencies, the paper's time-unit model), greedy. The arms: SI at every k in 1..16, DSI
at every k in 1..16 that satisfies Eq. 1 on --sp target servers, and each with ``lookahead="adaptive"``; each arm's
figure is the mean time per token over --seeds generations of N tokens (the same seeds for every arm). Goals (issue
25): adaptive >= 1.0x the best fixed k and >= 1.15x the worst valid fixed k, for SI and for DSI (ratios are fixed
time / adaptive time).

    python -m benchmarks adaptive_lookahead [--sp 4] [-N 1000] [--seeds 8]
"""

from __future__ import annotations

import statistics

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.backends import Regimes
from specpar.planning.lookahead import satisfies_eq1


def options(p) -> None:
    p.add_argument("--sp", type=int, default=4, help="DSI's target servers (default 4)")
    p.add_argument("-N", type=int, default=1000, help="tokens per generation (default 1000)")
    p.add_argument("--seeds", type=int, default=8, help="generations per arm (default 8)")
    p.add_argument("-c", type=float, default=0.1, help="drafter latency / target latency (default 0.1)")
    p.add_argument("--regimes", default="0.9,0.4:50", help="the drifting acceptance rate (default 0.9,0.4:50)")


def arms(args) -> list[Arm]:
    out = []
    for algorithm, sp in (("si", 1), ("dsi", args.sp)):
        ks = [k for k in range(1, 17) if algorithm == "si" or satisfies_eq1(1.0, args.c, k, sp)]
        for k in [*ks, "adaptive"]:
            out.append(Arm(f"{algorithm} k={k}", {"algorithm": algorithm, "lookahead": k, "sp_degree": sp}))
    return out


def measure(arm: Arm, args, r: int) -> dict:
    regimes = Regimes.parse(args.regimes)
    times = []
    for seed in range(args.seeds):
        target = SimulatedModel(16, seed=seed, latency=LatencyProfile.uniform(1.0))
        drafter = target.drafter(regimes, LatencyProfile.uniform(args.c), seed=seed + 101)
        out = generate([seed % 16, 3], target, drafter, max_tokens=args.N, **arm.settings)
        if out.tokens != target.greedy_tokens([seed % 16, 3], args.N):
            raise AssertionError(f"{arm.name}, seed {seed}: not the target's greedy tokens")
        times.append(out.time_ms)
    return {"ms_per_token": statistics.fmean(times) / args.N}


def summarize(results, args) -> dict:
    out, met = {}, True
    for algorithm in ("si", "dsi"):
        fixed = {a.arm.settings["lookahead"]: a.figures["ms_per_token"] for a in results
                 if a.arm.settings["algorithm"] == algorithm and a.arm.settings["lookahead"] != "adaptive"}  # fmt: skip
        adaptive = next(a.figures["ms_per_token"] for a in results if a.arm.name == f"{algorithm} k=adaptive")
        best, worst = min(fixed, key=fixed.get), max(fixed, key=fixed.get)
        vs_best, vs_worst = fixed[best] / adaptive, fixed[worst] / adaptive
        met &= vs_best >= 1.0 and vs_worst >= 1.15
        out[f"{algorithm}: adaptive vs the best fixed k = {best}"] = vs_best
        out[f"{algorithm}: adaptive vs the worst valid fixed k = {worst}"] = vs_worst
    out["goals (>= 1.0x best fixed, >= 1.15x worst valid, SI and DSI)"] = "met" if met else "not met"
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"ms_per_token": "mean time per output token over the seeds, ms (virtual clock)"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
)
