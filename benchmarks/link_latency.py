"""DSI across nodes, by simulation: speedups against the one-way link latency between the driver and the servers.

1. The virtual clock with ``link_ms`` between the driver and the target servers (every target call pays
   2 x link_ms: the request and the result cross the link; the drafter stays beside the driver, as on Ray by
   default): DSI / SI and DSI / non-SI speedups for links of 0-50 ms, at target 50 ms, drafter 5 ms, a = 0.8, k = 5,
   SP = 4, N = 200 (means over seeds), and a plot of both.
2. Validation (``--validate``): the same DSI on Ray with each target actor injecting the delay (``inject_link_ms``),
   on a 3-raylet ``ray.cluster_utils.Cluster`` (``--cluster``) or a local Ray; wall time over the virtual
   clock's prediction for the same seed and link. Goal: within 10%.

    .venv/bin/python benchmarks/link_latency.py [--plot benchmarks/results/link_latency.png] [--validate 10]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.runtimes import Pool
from specpar.runtimes.ray_actors import release_kept

LINKS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)


def setting(seed: int):
    target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(50.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(5.0), seed=seed + 1)
    prompt = [random.Random(seed).randrange(32) for _ in range(8)]
    return target, drafter, prompt


def sweep(seeds: int, n: int) -> list[tuple[float, float, float]]:
    """(link_ms, DSI/SI, DSI/non-SI) for each link, mean times over ``seeds`` seeds."""
    rows = []
    print(f"{'link ms':>8} {'non-SI ms':>10} {'SI ms':>9} {'DSI ms':>9} {'DSI/SI':>7} {'DSI/non-SI':>11}")
    for link in LINKS:
        times = {"nonsi": [], "si": [], "dsi": []}
        for seed in range(seeds):
            target, drafter, prompt = setting(seed)
            for algo in times:
                out = generate(
                    prompt,
                    target,
                    drafter,
                    algorithm=algo,
                    max_tokens=n,
                    lookahead=5,
                    sp_degree=4,
                    runtime_options={"link_ms": {"target": link}},
                )
                times[algo].append(out.time_ms)
        m = {a: statistics.mean(t) for a, t in times.items()}
        rows.append((link, m["si"] / m["dsi"], m["nonsi"] / m["dsi"]))
        print(
            f"{link:>8g} {m['nonsi']:>10.0f} {m['si']:>9.0f} {m['dsi']:>9.0f} {rows[-1][1]:>7.2f} {rows[-1][2]:>11.2f}"
        )
    return rows


def plot(rows, path: str, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    links = [r[0] for r in rows]
    ax.plot(links, [r[1] for r in rows], "o-", label="DSI / SI")
    ax.plot(links, [r[2] for r in rows], "s-", label="DSI / non-SI")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, links[-1] * 1.1)
    ax.set_xlabel("one-way link latency driver <-> target servers (ms)")
    ax.set_ylabel("speedup")
    ax.set_title(f"target 50 ms, drafter 5 ms, a = 0.8, k = 5, SP = 4, N = {n} (virtual clock)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


def validate(link: float, seeds: int, n: int, cluster: bool) -> None:
    from specpar.runtimes.ray_cluster import connect, shutdown

    if cluster:
        from ray_cluster import three_raylets

        where = three_raylets()
    else:
        where = contextlib.nullcontext()
        connect(cpus=5)
    # the target actors inject the delay; the drafter runs in the driver (the default)
    options = {"cpus_per_server": 1 if cluster else 0.5, "inject_link_ms": link, "placement": "SPREAD"}
    ratios = []
    try:
        with where:
            for seed in range(seeds):
                target, drafter, prompt = setting(seed)
                targets = Pool([target.server(f"target{i}") for i in range(4)], "target")
                drafters = Pool([drafter.server("drafter")], "drafter")
                kw = dict(algorithm="dsi", max_tokens=n, lookahead=5, sp_degree=4)
                ray = generate(prompt, targets, drafters, runtime="ray", runtime_options=options, **kw)
                virtual = generate(prompt, target, drafter, runtime_options={"link_ms": {"target": link}}, **kw)
                assert ray.tokens == virtual.tokens
                release_kept(targets.servers + drafters.servers)
                ratios.append(ray.time_ms / virtual.time_ms)
                print(
                    f"seed {seed}: Ray {ray.time_ms:.0f} ms, virtual {virtual.time_ms:.0f} ms, ratio {ratios[-1]:.3f}"
                )
    finally:
        if not cluster:
            shutdown()
    med = statistics.median(ratios)
    where_name = "3 raylets" if cluster else "a local Ray"
    print(
        f"link {link:g} ms on {where_name}: median Ray / virtual = {med:.3f} (goal within 10%): "
        f"{'MET' if abs(med - 1) <= 0.10 else 'NOT MET'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("-N", type=int, default=200)
    ap.add_argument("--plot", metavar="PNG", default=None)
    ap.add_argument("--validate", type=float, metavar="LINK_MS", default=None)
    ap.add_argument("--cluster", action="store_true", help="validate on a 3-raylet cluster (else a local Ray)")
    args = ap.parse_args()
    rows = sweep(args.seeds, args.N)
    if args.plot:
        plot(rows, args.plot, args.N)
    if args.validate is not None:
        validate(args.validate, args.seeds, args.N, args.cluster)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.1f} s)")
