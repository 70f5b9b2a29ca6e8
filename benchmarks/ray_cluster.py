"""DSI on a 3-raylet Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and two worker nodes, each
its own raylet): greedy non-SI, SI and DSI must give the target's own tokens with the servers SPREAD across the
nodes, and the table says where each actor ran and the wall time beside the virtual clock's prediction.

The tests check the same on the session's 3 raylets (tests/conftest.py's ``ray_local``,
``test_servers_spread_over_three_raylets_give_the_targets_own_tokens`` in tests/runtimes/test_ray_runtime.py), with shorter
latencies; this script adds the wall time beside the prediction, at latencies where it means something. The cluster
(:func:`specpar.runtimes.ray_cluster.local_cluster`) is started and shut down by handle (no `ray stop`).

    .venv/bin/python benchmarks/ray_cluster.py [-N 60] [--placement SPREAD]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import time

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.runtimes import Pool, RayRuntime
from specpar.runtimes.ray_actors import release_kept
from specpar.runtimes.ray_cluster import local_cluster


@contextlib.contextmanager
def three_raylets():
    """A head and two worker nodes of 2 CPUs each on this machine, joined by this process; shut down by handle."""
    import ray

    t0 = time.perf_counter()
    with local_cluster(cpus_per_node=(2, 2, 2)) as cluster:
        cpus = ray.cluster_resources()["CPU"]
        print(f"3 raylets up in {time.perf_counter() - t0:.1f} s: {len(ray.nodes())} nodes, {cpus:g} CPUs")
        yield cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-N", type=int, default=60)
    ap.add_argument("--placement", choices=("PACK", "SPREAD"), default="SPREAD")
    args = ap.parse_args()
    import ray

    with three_raylets():
        target = SimulatedModel(32, seed=3, latency=LatencyProfile.uniform(20.0))
        drafter = target.drafter(0.8, LatencyProfile.uniform(2.0), seed=4)
        targets = Pool([target.server(f"target{i}") for i in range(4)], "target")
        drafters = Pool([drafter.server("drafter")], "drafter")
        options = {"cpus_per_server": 1, "placement": args.placement, "local_pools": ()}  # the drafter an actor too
        rt = RayRuntime([targets, drafters], reuse_actors=True, **options)
        where = {r.name: ray.get(r.actor.stats.remote())["node"][:8] for r in rt._remote.values()}
        rt.close()
        print(f"placement {args.placement}: " + ", ".join(f"{n} on {w}" for n, w in where.items()))
        print(f"actors per node: {dict(collections.Counter(where.values()))}")
        prompt = [1, 2, 3, 4]
        for algo, k, sp in (("nonsi", None, 1), ("si", 5, 1), ("dsi", 5, 4)):
            kw = dict(algorithm=algo, max_tokens=args.N, lookahead=k, sp_degree=sp)
            out = generate(prompt, targets, drafters, runtime="ray", runtime_options=options, **kw)
            virtual = generate(prompt, target, drafter, **kw)
            same = out.tokens == target.greedy_tokens(prompt, args.N)
            print(
                f"{algo:>6}: {out.time_ms:8.1f} ms on 3 raylets, virtual {virtual.time_ms:8.1f} ms, "
                f"ratio {out.time_ms / virtual.time_ms:.3f}, target's own tokens: {same}"
            )
            assert same
        release_kept(targets.servers + drafters.servers)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.1f} s)")
