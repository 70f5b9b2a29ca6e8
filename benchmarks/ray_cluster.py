"""DSI on a 3-raylet Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and two worker nodes, each its
own raylet): greedy non-SI, SI and DSI (the arms) must give the target's own tokens with the servers SPREAD across
the nodes; each arm's wall time is set beside the virtual clock's prediction, and the summary says where each actor
ran.

The tests check the same on the session's 3 raylets (tests/conftest.py's ``ray_local``,
``test_servers_spread_over_three_raylets_give_the_targets_own_tokens`` in tests/runtimes/test_ray_runtime.py), with
shorter latencies; this benchmark adds the wall time beside the prediction, at latencies where it means something.
The cluster (:func:`specpar.runtimes.ray_cluster.local_cluster`) is started and shut down by handle (no `ray stop`).

    python -m benchmarks ray_cluster [-N 60] [--placement SPREAD]
"""

from __future__ import annotations

import collections
import contextlib
import time
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.runtimes import Pool, RayRuntime
from specpar.runtimes.ray_actors import release_kept
from specpar.runtimes.ray_cluster import local_cluster

PROMPT = [1, 2, 3, 4]


def options(p) -> None:
    p.add_argument("-N", type=int, default=60, help="tokens per generation (default 60)")
    p.add_argument("--placement", choices=("PACK", "SPREAD"), default="SPREAD", help="the servers' placement")


def arms(args) -> list[Arm]:
    return [Arm(a, {"algorithm": a, "lookahead": k, "sp_degree": sp}) for a, k, sp in (("nonsi", None, 1),
                                                                                      ("si", 5, 1), ("dsi", 5, 4))]  # fmt: skip


@contextlib.contextmanager
def three_raylets():
    """A head and two worker nodes of 2 CPUs each on this machine, joined by this process; shut down by handle.
    Yields how long they took to start and what they offer."""
    import ray

    t0 = time.perf_counter()
    with local_cluster(cpus_per_node=(2, 2, 2)) as cluster:
        yield SimpleNamespace(cluster=cluster, start_s=time.perf_counter() - t0, nodes=len(ray.nodes()),
                              cpus=ray.cluster_resources()["CPU"])  # fmt: skip


@contextlib.contextmanager
def session(args):
    """The cluster, the pools (kept between generations, the drafter an actor too) and where each actor runs."""
    import ray

    with three_raylets() as up:
        target = SimulatedModel(32, seed=3, latency=LatencyProfile.uniform(20.0))
        drafter = target.drafter(0.8, LatencyProfile.uniform(2.0), seed=4)
        targets = Pool([target.server(f"target{i}") for i in range(4)], "target")
        drafters = Pool([drafter.server("drafter")], "drafter")
        options = {"cpus_per_server": 1, "placement": args.placement, "local_pools": ()}
        rt = RayRuntime([targets, drafters], reuse_actors=True, **options)
        where = {r.name: ray.get(r.actor.stats.remote())["node"][:8] for r in rt._remote.values()}
        rt.close()
        try:
            yield SimpleNamespace(up=up, target=target, drafter=drafter, targets=targets, drafters=drafters,
                                  options=options, where=where)  # fmt: skip
        finally:
            release_kept(targets.servers + drafters.servers)


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    kw = dict(max_tokens=args.N, **arm.settings)
    out = generate(PROMPT, s.targets, s.drafters, runtime="ray", runtime_options=s.options, **kw)
    virtual = generate(PROMPT, s.target, s.drafter, **kw)
    same = out.tokens == s.target.greedy_tokens(PROMPT, args.N)
    if not same:
        raise AssertionError(f"{arm.name} on 3 raylets did not give the target's own tokens")
    return {"ray_ms": out.time_ms, "virtual_ms": virtual.time_ms, "ray_over_virtual": out.time_ms / virtual.time_ms}


def summarize(results, args) -> dict:
    s = args.session
    return {
        "cluster": f"{s.up.nodes} nodes, {s.up.cpus:g} CPUs, up in {s.up.start_s:.1f} s",
        "actors": ", ".join(f"{name} on {node}" for name, node in s.where.items()),
        "actors per node": dict(collections.Counter(s.where.values())),
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "ray_ms": "wall time on the 3 raylets, ms",
        "virtual_ms": "the virtual clock's prediction, ms",
        "ray_over_virtual": "wall / predicted",
    },  # fmt: skip
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
