"""How long HSD's optimizer takes, and how it grows with the number of models K (T_max = 15).

The paper (generalized shortest path, O(T^4 K^4 log(TK))) quotes hours of CPU for K = 80, T_max = 15. specpar's
dynamic program over (model, buffer) pairs is O(K^2 T^3) for the gamma table plus O(K^2 T^2) for the program. Each
arm is a K; the exhaustive search, (1 + T_max)^K hierarchies, is timed beside the program for small K on the same
instances (and must find the same latency). Instances: costs c_i = (i + 1) / (K + 1) (an early-exit ladder, the
target at 1) and a random acceptance matrix alpha[i][j] in [0.3, 1], seeded.

    python -m benchmarks hsd_optimizer [--k 5,10,20,40,80,160] [--t-max 15] [--repeats 5] [--plot FILE.png]
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np

from benchmarks.runner import Arm, Benchmark
from specpar.planning.hsd_optimizer import exhaustive, optimize


def options(p) -> None:
    p.add_argument("--k", default="5,10,20,40,80,160", help="numbers of drafters K (default 5,10,20,40,80,160)")
    p.add_argument("--t-max", type=int, default=15, help="largest buffer size (default 15)")
    p.add_argument("--repeats", type=int, default=5, help="timings of the program per K, median (default 5)")
    p.add_argument("--exhaustive-k", default="1,2,3,4", help="K for which the exhaustive search is timed too")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="also draw seconds vs K (log-log) into FILE.png")


def arms(args) -> list[Arm]:
    exhaustive_k = {int(k) for k in args.exhaustive_k.split(",")}
    ks = sorted({int(k) for k in args.k.split(",")} | exhaustive_k)
    return [Arm(f"K={k}", {"k": k, "exhaustive": k in exhaustive_k}) for k in ks]


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


def measure(arm: Arm, args, r: int) -> dict:
    costs, alpha = instance(arm.settings["k"])
    dp_s, plan = timed(lambda: optimize(costs, alpha, args.t_max), args.repeats)
    out = {"dp_seconds": dp_s, "hierarchy": list(plan.levels), "buffers": list(plan.buffers), "latency": plan.latency}
    if arm.settings["exhaustive"]:
        out["exhaustive_seconds"], ref = timed(lambda: exhaustive(costs, alpha, args.t_max), 1)
        if not math.isclose(ref.latency, plan.latency, rel_tol=1e-9):
            raise AssertionError(f"{arm.name}: the program's latency {plan.latency} is not the search's {ref.latency}")
    return out


def summarize(results, args) -> dict:
    big = [(a.arm.settings["k"], a.figures["dp_seconds"]) for a in results if a.arm.settings["k"] >= 10]
    out = {}
    if len(big) >= 2:
        out["growth: time ~ K^x for K >= 10, x"] = float(np.polyfit(np.log([k for k, _ in big]),
                                                                     np.log([s for _, s in big]), 1)[0])  # fmt: skip
    if args.plot:
        plot(results, args.t_max, args.plot)
        out["plot"] = args.plot
    return out


def plot(results, t_max: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ks = [a.arm.settings["k"] for a in results]
    ax.loglog(ks, [a.figures["dp_seconds"] for a in results], "o-", label="dynamic program")
    ex = [(a.arm.settings["k"], a.figures["exhaustive_seconds"]) for a in results if "exhaustive_seconds" in a.figures]
    if ex:
        ax.loglog([k for k, _ in ex], [e for _, e in ex], "s--", label="exhaustive search")
    ax.set_xlabel("models K")
    ax.set_ylabel("seconds")
    ax.set_title(f"HSD optimizer, T_max = {t_max}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "dp_seconds": "the dynamic program's wall time, median, s",
        "exhaustive_seconds": "the exhaustive search's wall time, s",
        "hierarchy": "the models the plan uses, the target last",
        "buffers": "the plan's buffer sizes",
        "latency": "the plan's expected latency per token, the costs' unit",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
)
