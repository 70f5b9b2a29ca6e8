"""The Ray runtime's costs, side by side with threads in one run (a shared machine drifts: compare within a run).

1. Per-task orchestration overhead: non-SI with a zero-latency simulated target, so that the wall time is all
   orchestration (submit, hand-off to the server, result back, wait); threads and Ray interleaved.
2. Cancel latency on Ray: a call that would sleep 10 s is cancelled while it runs; the time until its actor
   has returned and run the next (zero-latency) call.
3. DSI on Ray with simulated servers that sleep for their latency (target 50 ms, drafter 5 ms, a = 0.8, k = 5,
   SP = 4, N = 200): wall time over the virtual clock's prediction for the same seed, threads beside it.
   Goal: median Ray / virtual <= 1.10. All runs must give the target's own tokens.

Actors are made once (ready-made pools, kept between generations, as an engine keeps them) and a local Ray
is started with no dashboard; the figures exclude both.

    .venv/bin/python benchmarks/ray_runtime.py [--repeats 5] [-N 200] [--cpus-per-server 0.5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.core.calls import Score, as_context
from specpar.core.decoding import GREEDY
from specpar.runtimes import Pool, RayRuntime
from specpar.runtimes.ray_actors import release_kept
from specpar.runtimes.ray_cluster import connect, shutdown


def per_task_overhead(repeats: int, n: int, options: dict) -> None:
    target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(0.0))
    pool = Pool([target.server("target0")], "target")
    per = {"threads": [], "ray": []}
    for _ in range(repeats):
        for runtime in per:
            out = generate(
                [1, 2, 3],
                pool,
                algorithm="nonsi",
                max_tokens=n,
                runtime=runtime,
                runtime_options=options if runtime == "ray" else None,
            )
            per[runtime].append(out.time_ms * 1000 / n)
    release_kept(pool.servers)
    t, r = statistics.median(per["threads"]), statistics.median(per["ray"])
    print(f"1. per-task overhead (non-SI, zero-latency target, {n} tasks x {repeats} runs, medians):")
    print(f"   threads {t:8.0f} us/task   ray {r:8.0f} us/task   ray - threads {r - t:8.0f} us")


def cancel_latency(repeats: int, options: dict) -> None:
    """A prefill costs 0 ms, a pass with anything cached 10 s: a pass after a prefill is the long call to cancel,
    a prefill of a new prompt the short one that follows it on the same actor."""
    server = SimulatedModel(256, seed=1, latency=LatencyProfile(0.0, 10_000.0)).server("target0")
    pool, times = Pool([server], "target"), []
    with RayRuntime([pool], **options) as rt:
        for i in range(repeats):
            rt.run(pool, Score(as_context([2 * i, 1]), 0, GREEDY))  # prefill: cached
            long = rt.submit(pool, Score(as_context([2 * i, 1, 1]), 0, GREEDY))  # 10 s
            time.sleep(0.1)
            t0 = rt.now()
            rt.cancel(long)
            short = rt.submit(pool, Score(as_context([2 * i + 1]), 0, GREEDY))  # queued until the actor is free
            assert rt.wait() is short
            times.append(rt.now() - t0)
    print(
        f"2. cancel latency on Ray (a running 10 s call, {repeats} runs): median {statistics.median(times):.1f} ms, "
        f"max {max(times):.1f} ms from cancel() until the actor has stopped it and answered the next call"
    )


def dsi_vs_virtual(repeats: int, n: int, options: dict) -> None:
    target = SimulatedModel(32, seed=3, latency=LatencyProfile.uniform(50.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(5.0), seed=4)
    targets = Pool([target.server(f"target{i}") for i in range(4)], "target")
    drafters = Pool([drafter.server("drafter")], "drafter")
    local, actor = {**options, "local_pools": ("drafter",)}, {**options, "local_pools": ()}
    kw = dict(algorithm="dsi", max_tokens=n, lookahead=5, sp_degree=4)
    print(f"3. DSI, target 50 ms, drafter 5 ms, a = 0.8, k = 5, SP = 4, N = {n}: wall / virtual-clock prediction")
    print(f"   {'seed':>4} {'virtual ms':>11} {'threads/v':>10} {'ray/v':>7} {'ray, drafter in driver/v':>25}")
    ratios = {"threads": [], "ray": [], "ray-local": []}
    for seed in range(repeats):
        prompt = [random.Random(seed).randrange(32) for _ in range(8)]
        virtual = generate(prompt, target, drafter, runtime="virtual", **kw)
        runs = {
            "threads": generate(prompt, target, drafter, runtime="threads", **kw),
            "ray": generate(prompt, targets, drafters, runtime="ray", runtime_options=actor, **kw),
            "ray-local": generate(prompt, targets, drafters, runtime="ray", runtime_options=local, **kw),
        }
        for name, out in runs.items():
            assert out.tokens == virtual.tokens == target.greedy_tokens(prompt, n), name
            ratios[name].append(out.time_ms / virtual.time_ms)
        print(
            f"   {seed:>4} {virtual.time_ms:>11.1f} {ratios['threads'][-1]:>10.3f} {ratios['ray'][-1]:>7.3f} "
            f"{ratios['ray-local'][-1]:>25.3f}"
        )
    release_kept(targets.servers + drafters.servers)
    med = {name: statistics.median(r) for name, r in ratios.items()}
    print(
        f"   medians: threads {med['threads']:.3f}, ray {med['ray']:.3f}, ray with the drafter in the driver "
        f"{med['ray-local']:.3f} (goal <= 1.10: {'MET' if min(med['ray'], med['ray-local']) <= 1.10 else 'NOT MET'})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("-N", type=int, default=200)
    ap.add_argument("--cpus-per-server", type=float, default=0.5, help="logical CPUs per actor (default 0.5)")
    args = ap.parse_args()
    options = {"cpus_per_server": args.cpus_per_server}
    t0 = time.perf_counter()
    connect(cpus=5 * args.cpus_per_server)
    print(f"(local Ray started in {time.perf_counter() - t0:.1f} s)")
    try:
        per_task_overhead(args.repeats, 300, options)
        cancel_latency(args.repeats, options)
        dsi_vs_virtual(args.repeats, args.N, options)
    finally:
        shutdown()


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.1f} s)")
