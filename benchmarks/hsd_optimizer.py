"""How long HSD's optimizer takes, and how it grows with the number of models K (T_max = 15).

The paper (generalized shortest path, O(T^4 K^4 log(TK))) quotes hours of CPU for
K = 80, T_max = 15. specpar's dynamic program over (model, buffer) pairs is
O(K^2 T^3) for the gamma table plus O(K^2 T^2) for the program. The exhaustive search,
(1 + T_max)^K hierarchies, is timed for small K beside it, on the same instances.

Instances: costs c_i = (i + 1) / (K + 1) (an early-exit ladder, the target at 1) and a
random acceptance matrix alpha[i][j] in [0.3, 1], seeded.

    .venv/bin/python benchmarks/hsd_optimizer.py [--k 5 10 20 40 80 160] [--t-max 15] [--repeats 5] [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from specpar.core.errors import ConfigError
from specpar.planning.hsd_optimizer import exhaustive, optimize


def instance(k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    costs = [(i + 1) / (k + 1) for i in range(k + 1)]
    return costs, rng.uniform(0.3, 1.0, (k + 1, k + 1))


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, nargs="+", default=[5, 10, 20, 40, 80, 160], help="numbers of drafters K")
    p.add_argument("--t-max", type=int, default=15)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--exhaustive-k",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4],
        help="K for which the exhaustive search is timed too ((1 + T_max)^K hierarchies)",
    )
    p.add_argument("--plot", default=None, metavar="FILE.png", help="also draw seconds vs K (log-log) into FILE.png")
    args = p.parse_args()
    if args.plot:  # before the timings, not after
        from specpar.core.paths import check_output_file, image_suffixes

        try:
            args.plot = check_output_file(args.plot, "--plot", image_suffixes())
        except ConfigError as exc:
            p.error(str(exc))

    print(f"HSD optimizer, T_max = {args.t_max}, median of {args.repeats} runs")
    print(f"{'K':>4} {'DP seconds':>11} {'exhaustive s':>13} {'hierarchy':>22} {'T':>16} {'L':>8}")
    rows = []
    for k in sorted(set(args.k) | set(args.exhaustive_k)):
        costs, alpha = instance(k)
        dp_s, plan = timed(lambda: optimize(costs, alpha, args.t_max), args.repeats)
        ex = "-"
        if k in args.exhaustive_k:
            ex_s, ref = timed(lambda: exhaustive(costs, alpha, args.t_max), 1)
            assert math.isclose(ref.latency, plan.latency, rel_tol=1e-9), (ref, plan)
            ex = f"{ex_s:.3f}"
        rows.append((k, dp_s, ex_s if k in args.exhaustive_k else None))
        print(
            f"{k:>4} {dp_s:>11.4f} {ex:>13} {str(list(plan.levels)):>22} {str(list(plan.buffers)):>16} {plan.latency:>8.4f}"
        )
    big = [(k, s) for k, s, _ in rows if k >= 10]
    if len(big) >= 2:
        slope = np.polyfit(np.log([k for k, _ in big]), np.log([s for _, s in big]), 1)[0]
        print(f"growth: time ~ K^{slope:.2f} for K >= 10 (the program is O(K^2 T^3))")
    if args.plot:
        plot(rows, args.t_max, args.plot)
        print(f"wrote {args.plot}")


def plot(rows, t_max: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog([k for k, _, _ in rows], [s for _, s, _ in rows], "o-", label="dynamic program")
    ex = [(k, e) for k, _, e in rows if e]
    if ex:
        ax.loglog([k for k, _ in ex], [e for _, e in ex], "s--", label="exhaustive search")
    ax.set_xlabel("models K")
    ax.set_ylabel("seconds")
    ax.set_title(f"HSD optimizer, T_max = {t_max}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
