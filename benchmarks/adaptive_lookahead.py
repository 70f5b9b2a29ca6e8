"""Adaptive lookahead vs every fixed lookahead under a drifting acceptance rate (simulated models, virtual clock).

The drafter agrees with the target at a = 0.9 for 50 tokens, then 0.4 for 50, and so on (``Regimes``); target TPOT
1 ms, drafter c = 0.1 (uniform latencies, the paper's time-unit model), greedy. For SI every k in 1..16 and for DSI
every k in 1..16 that satisfies Eq. 1 on SP target servers, the mean latency over SEEDS generations of N tokens,
beside ``lookahead="adaptive"`` on the same seeds. Goals (issue 25): adaptive >= 1.0x the best fixed k and >= 1.15x
the worst valid fixed k, for SI and for DSI (ratios are fixed time / adaptive time).

    .venv/bin/python benchmarks/adaptive_lookahead.py [--sp 4] [-N 1000] [--seeds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.backends import Regimes
from specpar.planning.lookahead import satisfies_eq1


def mean_ms(algorithm: str, lookahead, sp: int, n: int, seeds: int, regimes: Regimes, c: float) -> float:
    times = []
    for seed in range(seeds):
        target = SimulatedModel(16, seed=seed, latency=LatencyProfile.uniform(1.0))
        drafter = target.drafter(regimes, LatencyProfile.uniform(c), seed=seed + 101)
        out = generate([seed % 16, 3], target, drafter, algorithm=algorithm, lookahead=lookahead, sp_degree=sp,
                       max_tokens=n)  # fmt: skip
        assert out.tokens == target.greedy_tokens([seed % 16, 3], n)
        times.append(out.time_ms)
    return statistics.fmean(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sp", type=int, default=4, help="DSI's target servers (default 4)")
    ap.add_argument("-N", type=int, default=1000, help="tokens per generation (default 1000)")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("-c", type=float, default=0.1, help="drafter latency / target latency (default 0.1)")
    ap.add_argument("--regimes", default="0.9,0.4:50")
    args = ap.parse_args()
    regimes = Regimes.parse(args.regimes)
    t0 = time.time()
    print(f"regimes {args.regimes}, c = {args.c}, N = {args.N}, {args.seeds} seeds, virtual clock, greedy; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (the virtual clock's times do not depend "
          "on it)")  # fmt: skip
    met = True
    for algorithm, sp in (("si", 1), ("dsi", args.sp)):
        ks = [k for k in range(1, 17) if algorithm == "si" or satisfies_eq1(1.0, args.c, k, sp)]
        fixed = {k: mean_ms(algorithm, k, sp, args.N, args.seeds, regimes, args.c) for k in ks}
        adaptive = mean_ms(algorithm, "adaptive", sp, args.N, args.seeds, regimes, args.c)
        best, worst = min(fixed, key=fixed.get), max(fixed, key=fixed.get)
        vs_best, vs_worst = fixed[best] / adaptive, fixed[worst] / adaptive
        ok = vs_best >= 1.0 and vs_worst >= 1.15
        met &= ok
        print(
            f"\n{algorithm.upper()} (SP {sp}): fixed k {ks[0]}..{ks[-1]}" + (" (Eq. 1)" if algorithm == "dsi" else "")
        )
        print("  " + "  ".join(f"k={k}: {ms / args.N:.4f}" for k, ms in fixed.items()) + "   (ms per token)")
        print(f"  adaptive {adaptive / args.N:.4f} ms/token; best fixed k = {best} ({vs_best:.3f}x), worst valid "
              f"k = {worst} ({vs_worst:.3f}x): {'MET' if ok else 'NOT MET'}")  # fmt: skip
    print(f"\ngoals (>= 1.0x best fixed, >= 1.15x worst valid, SI and DSI): {'MET' if met else 'NOT MET'}; "
          f"{time.time() - t0:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
