"""DSI against non-SI and SI run by run over a grid, with and without prefilling the target replicas.

Each arm is a TTFT / TPOT ratio in {1, 3, 10}; over c in {0.01, ..., 1} x a in {0, ..., 1} x lookahead in {Eq. 1's
for SP = 7, 1, 5} on the servers Eq. 1 asks for, 3 seeds, N = 60, virtual clock, it counts the runs where DSI is
slower than non-SI (Theorem 1 says none) and than SI (Theorem 2 holds only in expectation), cold replicas against
replicas prefilled together, and the total DSI time of prefilling over not.

    python -m benchmarks theorem_grid
"""

from __future__ import annotations

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.planning import min_lookahead, sp_degree_needed

C = [0.01, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0]
A = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0]
N = 60


def arms(args) -> list[Arm]:
    return [Arm(f"TTFT/TPOT {ratio:g}", {"ttft_over_tpot": ratio}) for ratio in (1.0, 3.0, 10.0)]


def measure(arm: Arm, args, r: int) -> dict:
    ratio = arm.settings["ttft_over_tpot"]
    runs, slower_nonsi, slower_si, total = 0, [0, 0], [0, 0], [0.0, 0.0]
    for c in C:
        for a in A:
            for k in sorted({min_lookahead(1.0, c, 7), 1, 5}):
                sp = sp_degree_needed(1.0, c, k)
                for seed in range(3):
                    target = SimulatedModel(8, seed=seed, latency=LatencyProfile(ratio, 1.0))
                    drafter = target.drafter(a, LatencyProfile(ratio * c, c), seed=seed + 5)
                    prompt = [seed, 3]
                    nonsi = generate(prompt, target, algorithm="nonsi", max_tokens=N).time_ms
                    si = generate(prompt, target, drafter, algorithm="si", max_tokens=N, lookahead=k).time_ms
                    for prefill in (0, 1):
                        dsi = generate(prompt, target, drafter, algorithm="dsi", max_tokens=N, lookahead=k,
                                       sp_degree=sp, prefill_replicas=bool(prefill)).time_ms  # fmt: skip
                        slower_nonsi[prefill] += dsi > nonsi + 1e-9
                        slower_si[prefill] += dsi > si + 1e-9
                        total[prefill] += dsi
                    runs += 1
    return {
        "runs": runs,
        "slower_than_nonsi_cold": slower_nonsi[0],
        "slower_than_nonsi_prefilled": slower_nonsi[1],
        "slower_than_si_cold": slower_si[0],
        "slower_than_si_prefilled": slower_si[1],
        "dsi_time_prefilled_over_cold": total[1] / total[0],
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "runs": "grid points x seeds",
        "slower_than_nonsi_cold": "runs where DSI (cold replicas) is slower than non-SI",
        "slower_than_nonsi_prefilled": "the same, replicas prefilled together",
        "slower_than_si_cold": "runs where DSI (cold replicas) is slower than SI",
        "slower_than_si_prefilled": "the same, replicas prefilled together",
        "dsi_time_prefilled_over_cold": "DSI's total time prefilled / cold",
    },
    arms=arms,
    measure=measure,
)
