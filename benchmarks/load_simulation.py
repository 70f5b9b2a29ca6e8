"""Speculation under load on the virtual clock: the adaptive policy against every fixed one (issue 24's goals).

8 processing units, target 30 ms/token, drafter c = 0.1 (3 ms), a = 0.8, N = 100 tokens, lookahead "auto" for
every option; Poisson arrivals from 0.1x to 2x the non-SI capacity (8 units x 1 / 30 ms / N = 2.67 requests/s);
``--requests`` requests per load, the same arrivals, prompts and models for every policy, over ``--seeds`` seeds.

Goals: at every load the adaptive policy's throughput >= every fixed policy's (fixed DSI: each request waits for
8 units; fixed SI: one unit each, drafter beside the target; non-SI: one unit each); its p50 latency at 0.1x
within 5% of single-request DSI (the same requests one at a time, DSI on all 8 units: one closed-loop client).

Also the simulator's cost: events handled and microseconds per simulated token per policy, and the shared
clock's cost for one generation against the VirtualRuntime's (the single-request path is the VirtualRuntime,
unchanged: benchmarks/virtual_instructions.py counts its instructions).

    .venv/bin/python benchmarks/load_simulation.py [--requests 200] [--seeds 3] [--plot load.png]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from specpar.experiments.load import LoadSetting, LoadSimulation
from specpar.planning.load import POLICIES

LOADS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def shared_clock_cost(repeats: int = 10) -> tuple[float, float]:
    """(us per token on a VirtualRuntime, on a SharedClock) for one DSI generation of 200 tokens."""
    from specpar import LatencyProfile, SimulatedModel
    from specpar.algorithms.registry import run_generation
    from specpar.core.config import RuntimeConfig, SpeculativeConfig
    from specpar.core.query import Query
    from specpar.runtimes.shared_clock import SharedClock

    spec = SpeculativeConfig(algorithm="dsi", lookahead=2, sp_degree=7)

    def one(runtime, seed):
        target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(30.0))
        drafter = target.drafter(0.8, LatencyProfile.uniform(3.0), seed=seed + 1)
        return run_generation(Query([seed % 32], 200), target, drafter, spec, runtime)

    times = {"plain": [], "shared": []}
    for seed in range(repeats):
        for arm in times:
            t0 = time.thread_time()
            if arm == "plain":
                one(RuntimeConfig(name="virtual"), seed)
            else:
                clock = SharedClock()
                clock.spawn(one, RuntimeConfig(name="virtual", options={"clock": clock}), seed)
                clock.run()
            times[arm].append(time.thread_time() - t0)
    return tuple(statistics.median(times[a]) / 200 * 1e6 for a in ("plain", "shared"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    setting = LoadSetting()
    cap = setting.nonsi_capacity
    print(f"8 units, target 30 ms, drafter 3 ms (c = 0.1), a = 0.8, N = 100, lookahead auto; non-SI capacity "
          f"{cap:.3g} req/s; {args.requests} requests per load and policy; seeds 0..{args.seeds - 1}")  # fmt: skip
    rows, ok, cost = [], True, {p: [0.0, 0, 0] for p in POLICIES}  # seconds, events, tokens
    single_p50, adaptive_p50 = [], []
    for seed in range(args.seeds):
        sim = LoadSimulation(setting, seed=seed)
        single = sim.run("dsi", clients=1, requests=args.requests)
        single_p50.append(single.latency(50))
        for x in LOADS:
            runs = {}
            for policy in POLICIES:
                t0 = time.thread_time()
                runs[policy] = sim.run(policy, rate=x * cap, requests=args.requests)
                c = cost[policy]
                c[0] += time.thread_time() - t0
                c[1] += runs[policy].events
                c[2] += sum(r.tokens for r in runs[policy].records)
            best_fixed = max(runs[p].throughput for p in POLICIES if p != "adaptive")
            ratio = runs["adaptive"].throughput / best_fixed
            ok &= ratio >= 1.0
            if x == LOADS[0]:
                adaptive_p50.append(runs["adaptive"].latency(50))
            rows.append((seed, x, {p: r.to_dict() for p, r in runs.items()}, ratio))
    print(f"\n{'seed':>4} {'load':>5} " + " ".join(f"{p + ' tok/s':>15}" for p in POLICIES)
          + f" {'adaptive/best fixed':>20} " + " ".join(f"{p + ' p50 ms':>16}" for p in POLICIES))  # fmt: skip
    for seed, x, d, ratio in rows:
        print(f"{seed:>4} {x:>4}x " + " ".join(f"{d[p]['throughput_tokens_per_s']:>15.1f}" for p in POLICIES)
              + f" {ratio:>20.4f} " + " ".join(f"{d[p]['latency_p50_ms']:>16.0f}" for p in POLICIES))  # fmt: skip
    worst = min(r[3] for r in rows)
    p50_ratio = statistics.fmean(a / s for a, s in zip(adaptive_p50, single_p50))
    print(f"\nadaptive throughput / best fixed policy's: min {worst:.4f} over every load and seed "
          f"(goal >= 1: {'met' if ok else 'NOT met'})")  # fmt: skip
    print(f"adaptive p50 at 0.1x / single-request DSI p50: {p50_ratio:.4f} (per seed: "
          + ", ".join(f"{a:.0f}/{s:.0f} ms" for a, s in zip(adaptive_p50, single_p50))
          + f"; goal <= 1.05: {'met' if p50_ratio <= 1.05 else 'NOT met'})")  # fmt: skip
    print("\nsimulator cost (CPU time of this thread): " + "; ".join(
        f"{p} {c[0] / c[2] * 1e6:.1f} us/token, {c[0] / c[1] * 1e6:.1f} us/event" for p, c in cost.items()))  # fmt: skip
    plain, shared = shared_clock_cost()
    print(f"one DSI generation (N = 200, SP 7): VirtualRuntime {plain:.1f} us/token, SharedClock {shared:.1f} "
          f"us/token ({shared / plain:.3f}x)")  # fmt: skip
    if args.plot:
        from specpar.experiments.load_plot import plot_load

        plot_rows = [{**d[p], "rate": x * cap} for seed, x, d, _ in rows if seed == 0 for p in POLICIES]
        plot_load(plot_rows, args.plot, "8 units, target 30 ms, c = 0.1, a = 0.8, N = 100 (seed 0)")
        print(f"curves written to {args.plot}")
    print("after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
