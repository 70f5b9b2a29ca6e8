"""Speculation under load on the virtual clock: the adaptive policy against every fixed one (issue 24's goals).

8 processing units, target 30 ms/token, drafter c = 0.1 (3 ms), a = 0.8, N = 100 tokens, lookahead "auto" for
every option; Poisson arrivals from 0.1x to 2x the non-SI capacity (8 units x 1 / 30 ms / N = 2.67 requests/s). An
arm is a load and a policy; round r runs --requests requests with seed r, the same arrivals, prompts and models for
every policy. The "single-request DSI" arm runs the same requests one at a time, DSI on all 8 units (one
closed-loop client).

Goals: at every load the adaptive policy's throughput >= every fixed policy's (fixed DSI: each request waits for
8 units; fixed SI: one unit each, drafter beside the target; non-SI: one unit each); its p50 latency at 0.1x
within 5% of single-request DSI.

Also the simulator's cost: microseconds (CPU time of this thread) per simulated token and per event of each arm,
and the shared clock's cost for one DSI generation (N = 200, SP 7) against the VirtualRuntime's (the two "one
generation" arms; the single-request path is the VirtualRuntime: `python -m benchmarks virtual_instructions` counts
its instructions).

    python -m benchmarks load_simulation [--requests 200] [--rounds 3] [--plot load.png]
"""

from __future__ import annotations

import functools
import statistics
import time

from benchmarks.runner import Arm, Benchmark
from specpar.experiments.load import LoadSetting, LoadSimulation
from specpar.planning.load import POLICIES

LOADS = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def options(p) -> None:
    p.add_argument("--requests", type=int, default=200, help="requests per load and policy (default 200)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="also draw round 0's curves into FILE.png")


def arms(args) -> list[Arm]:
    out = [Arm(f"{x:g}x {policy}", {"load": x, "policy": policy}) for x in LOADS for policy in POLICIES]
    out.append(Arm("single-request DSI", {"policy": "dsi", "clients": 1}))
    out += [Arm(f"one generation, {clock}", {"clock": clock}) for clock in ("VirtualRuntime", "SharedClock")]
    return out


@functools.cache
def simulation(seed: int) -> LoadSimulation:
    return LoadSimulation(LoadSetting(), seed=seed)


def measure(arm: Arm, args, r: int) -> dict:
    if "clock" in arm.settings:
        return {"us_per_token": one_generation_us_per_token(arm.settings["clock"], r)}
    sim = simulation(r)
    kw = {"clients": 1} if "clients" in arm.settings else {"rate": arm.settings["load"] * sim.setting.nonsi_capacity}
    t0 = time.thread_time()
    run = sim.run(arm.settings["policy"], requests=args.requests, **kw)
    cpu = time.thread_time() - t0
    tokens = sum(rec.tokens for rec in run.records)
    d = run.to_dict()
    return {"tokens_per_s": d["throughput_tokens_per_s"], "p50_ms": d["latency_p50_ms"], "us_per_token":
            cpu / tokens * 1e6, "us_per_event": cpu / run.events * 1e6, "run": d}  # fmt: skip


def one_generation_us_per_token(clock_name: str, seed: int) -> float:
    """CPU us per token of one DSI generation of 200 tokens on a VirtualRuntime or on a SharedClock."""
    from specpar import LatencyProfile, SimulatedModel
    from specpar.algorithms.registry import run_generation
    from specpar.core.config import RuntimeConfig, SpeculativeConfig
    from specpar.core.query import Query
    from specpar.runtimes.shared_clock import SharedClock

    spec = SpeculativeConfig(algorithm="dsi", lookahead=2, sp_degree=7)

    def one(runtime):
        target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(30.0))
        drafter = target.drafter(0.8, LatencyProfile.uniform(3.0), seed=seed + 1)
        return run_generation(Query([seed % 32], 200), target, drafter, spec, runtime)

    t0 = time.thread_time()
    if clock_name == "VirtualRuntime":
        one(RuntimeConfig(name="virtual"))
    else:
        clock = SharedClock()
        clock.spawn(one, RuntimeConfig(name="virtual", options={"clock": clock}))
        clock.run()
    return (time.thread_time() - t0) / 200 * 1e6


def summarize(results, args) -> dict:
    by = {a.arm.name: a for a in results}
    ratios = []  # adaptive / best fixed, per load and round
    for x in LOADS:
        for r in range(args.rounds):
            best = max(by[f"{x:g}x {p}"].runs[r]["tokens_per_s"] for p in POLICIES if p != "adaptive")
            ratios.append(by[f"{x:g}x adaptive"].runs[r]["tokens_per_s"] / best)
    p50 = statistics.fmean(a / s for a, s in zip(by[f"{LOADS[0]:g}x adaptive"].values("p50_ms"),
                                                  by["single-request DSI"].values("p50_ms")))  # fmt: skip
    plain, shared = (by[f"one generation, {c}"].figures["us_per_token"] for c in ("VirtualRuntime", "SharedClock"))
    out = {
        "adaptive throughput / best fixed policy's, min over loads and rounds (goal >= 1)": min(ratios),
        f"adaptive p50 at {LOADS[0]:g}x / single-request DSI p50 (goal <= 1.05)": p50,
        "one generation: SharedClock / VirtualRuntime, CPU per token": shared / plain,
    }
    if args.plot:
        from specpar.experiments.plots import plot_load

        rows = [{**by[f"{x:g}x {p}"].runs[0]["run"], "rate": x * LoadSetting().nonsi_capacity} for x in LOADS
                for p in POLICIES]  # fmt: skip
        plot_load(rows, args.plot, "8 units, target 30 ms, c = 0.1, a = 0.8, N = 100 (round 0)")
        out["plot"] = args.plot
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "tokens_per_s": "output tokens / (last completion - first arrival), virtual clock",
        "p50_ms": "median latency (completion - arrival, queueing included), ms",
        "us_per_token": "the simulator's CPU time per simulated token, us",
        "us_per_event": "the simulator's CPU time per event, us",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    rounds=3,
)
