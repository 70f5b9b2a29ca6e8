"""DSI against non-SI and SI run by run over a grid, with and without prefilling the target replicas.

For TTFT / TPOT in {1, 3, 10}: c in {0.01, ..., 1} x a in {0, ..., 1} x lookahead in
{Eq. 1's for SP = 7, 1, 5} on the servers Eq. 1 asks for, 3 seeds, N = 60, virtual
clock. Prints how many runs DSI is slower than non-SI (Theorem 1 says none) and
than SI (Theorem 2 holds only in expectation), cold replicas against replicas
prefilled together, and the total DSI time of prefilling over not.

    .venv/bin/python benchmarks/theorem_grid.py
"""

from __future__ import annotations

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.planning import min_lookahead, sp_degree_needed

C = [0.01, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0]
A = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0]
N = 60


def main() -> None:
    print(
        f"{'TTFT/TPOT':>9} {'runs':>5} {'slower than non-SI (cold / prefilled)':>38} "
        f"{'slower than SI (cold / prefilled)':>34} {'DSI time prefilled / cold':>26}"
    )
    for ratio in (1.0, 3.0, 10.0):
        runs = 0
        slower_nonsi = {False: 0, True: 0}
        slower_si = {False: 0, True: 0}
        total = {False: 0.0, True: 0.0}
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
                        for prefill in (False, True):
                            dsi = generate(
                                prompt,
                                target,
                                drafter,
                                algorithm="dsi",
                                max_tokens=N,
                                lookahead=k,
                                sp_degree=sp,
                                prefill_replicas=prefill,
                            ).time_ms
                            slower_nonsi[prefill] += dsi > nonsi + 1e-9
                            slower_si[prefill] += dsi > si + 1e-9
                            total[prefill] += dsi
                        runs += 1
        print(
            f"{ratio:>9g} {runs:>5} {slower_nonsi[False]:>30} / {slower_nonsi[True]:<5} "
            f"{slower_si[False]:>26} / {slower_si[True]:<5} {total[True] / total[False]:>26.4f}"
        )


if __name__ == "__main__":
    main()
