"""The Ray runtime's costs, side by side with threads in one run (a shared machine drifts: compare within a run).

The arms, interleaved per round:
1. Per-task orchestration overhead (threads, Ray): non-SI with a zero-latency simulated target, so that the wall
   time is all orchestration (submit, hand-off to the server, result back, wait).
2. Cancel latency on Ray: a call that would sleep 10 s is cancelled while it runs; the time until its actor has
   returned and run the next (zero-latency) call.
3. DSI with simulated servers that sleep for their latency (target 50 ms, drafter 5 ms, a = 0.8, k = 5, SP = 4,
   N = 200) on threads, on Ray (the drafter an actor) and on Ray with the drafter in the driver: wall time over the
   virtual clock's prediction for the same seed (round r: seed r). Goal: median Ray / virtual <= 1.10. All runs
   must give the target's own tokens.

Actors are made once (ready-made pools, kept between generations, as an engine keeps them) and a local Ray is
started with no dashboard (the session); the figures exclude both.

    python -m benchmarks ray_runtime [--rounds 5] [-N 200] [--cpus-per-server 0.5]
"""

from __future__ import annotations

import contextlib
import random
import time
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.core.calls import Score, as_context
from specpar.core.decoding import GREEDY
from specpar.runtimes import Pool, RayRuntime
from specpar.runtimes.ray_actors import release_kept
from specpar.runtimes.ray_cluster import connect, shutdown

OVERHEAD_TASKS = 300


def options(p) -> None:
    p.add_argument("-N", type=int, default=200, help="DSI's tokens per generation (default 200)")
    p.add_argument("--cpus-per-server", type=float, default=0.5, help="logical CPUs per actor (default 0.5)")


def arms(args) -> list[Arm]:
    return [
        Arm("per-task overhead, threads", {"measure": "overhead", "runtime": "threads"}),
        Arm("per-task overhead, Ray", {"measure": "overhead", "runtime": "ray"}),
        Arm("cancel latency, Ray", {"measure": "cancel"}),
        Arm("DSI, threads", {"measure": "dsi", "runtime": "threads"}),
        Arm("DSI, Ray", {"measure": "dsi", "runtime": "ray", "local_pools": ()}),
        Arm("DSI, Ray, drafter in the driver", {"measure": "dsi", "runtime": "ray", "local_pools": ("drafter",)}),
    ]


@contextlib.contextmanager
def session(args):
    """A local Ray and the pools every round reuses (their actors kept between generations)."""
    t0 = time.perf_counter()
    connect(cpus=5 * args.cpus_per_server)
    zero = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(0.0))
    target = SimulatedModel(32, seed=3, latency=LatencyProfile.uniform(50.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(5.0), seed=4)
    s = SimpleNamespace(
        ray_start_s=time.perf_counter() - t0,
        options={"cpus_per_server": args.cpus_per_server},
        zero=Pool([zero.server("target0")], "target"),
        target=target,
        drafter=drafter,
        targets=Pool([target.server(f"target{i}") for i in range(4)], "target"),
        drafters=Pool([drafter.server("drafter")], "drafter"),
    )
    try:
        yield s
    finally:
        release_kept(s.zero.servers + s.targets.servers + s.drafters.servers)
        shutdown()


def measure(arm: Arm, args, r: int) -> dict:
    s, kind = args.session, arm.settings["measure"]
    if kind == "overhead":
        ray = arm.settings["runtime"] == "ray"
        out = generate([1, 2, 3], s.zero, algorithm="nonsi", max_tokens=OVERHEAD_TASKS,
                       runtime=arm.settings["runtime"], runtime_options=s.options if ray else None)  # fmt: skip
        return {"us_per_task": out.time_ms * 1000 / OVERHEAD_TASKS}
    if kind == "cancel":
        return {"cancel_ms": cancel_latency(s.options, r)}
    prompt = [random.Random(r).randrange(32) for _ in range(8)]
    kw = dict(algorithm="dsi", max_tokens=args.N, lookahead=5, sp_degree=4)
    virtual = generate(prompt, s.target, s.drafter, runtime="virtual", **kw)
    if arm.settings["runtime"] == "threads":
        out = generate(prompt, s.target, s.drafter, runtime="threads", **kw)
    else:
        options = {**s.options, "local_pools": arm.settings["local_pools"]}
        out = generate(prompt, s.targets, s.drafters, runtime="ray", runtime_options=options, **kw)
    if not out.tokens == virtual.tokens == s.target.greedy_tokens(prompt, args.N):
        raise AssertionError(f"{arm.name}, seed {r}: not the target's own tokens")
    return {"virtual_ms": virtual.time_ms, "wall_over_virtual": out.time_ms / virtual.time_ms}


def cancel_latency(options: dict, i: int) -> float:
    """A prefill costs 0 ms, a pass with anything cached 10 s: a pass after a prefill is the long call to cancel,
    a prefill of a new prompt the short one that follows it on the same actor. ms from cancel() until the actor
    has stopped it and answered the next call."""
    server = SimulatedModel(256, seed=1, latency=LatencyProfile(0.0, 10_000.0)).server("target0")
    pool = Pool([server], "target")
    with RayRuntime([pool], **options) as rt:
        rt.run(pool, Score(as_context([2 * i, 1]), 0, GREEDY))  # prefill: cached
        long = rt.submit(pool, Score(as_context([2 * i, 1, 1]), 0, GREEDY))  # 10 s
        time.sleep(0.1)
        t0 = rt.now()
        rt.cancel(long)
        short = rt.submit(pool, Score(as_context([2 * i + 1]), 0, GREEDY))  # queued until the actor is free
        if rt.wait() is not short:
            raise AssertionError("the call after the cancelled one did not come back first")
        return rt.now() - t0


def summarize(results, args) -> dict:
    by = {a.arm.name: a.figures for a in results}
    ray = min(by["DSI, Ray"]["wall_over_virtual"], by["DSI, Ray, drafter in the driver"]["wall_over_virtual"])
    return {
        "Ray - threads per task, us": by["per-task overhead, Ray"]["us_per_task"]
        - by["per-task overhead, threads"]["us_per_task"],
        "local Ray started in, s": args.session.ray_start_s,
        "goal": f"median Ray / virtual <= 1.10: {'met' if ray <= 1.10 else 'not met'}",
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "us_per_task": "orchestration per task, us (median over the rounds)",
        "cancel_ms": "from cancel() to the next call's answer, ms",
        "virtual_ms": "DSI's time predicted by the virtual clock, ms",
        "wall_over_virtual": "DSI's wall time / the prediction (median over the rounds)",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
    rounds=5,
)
