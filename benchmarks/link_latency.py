"""DSI across nodes, by simulation: speedups against the one-way link latency between the driver and the servers.

1. The link arms: the virtual clock with ``link_ms`` between the driver and the target servers (every target call
   pays 2 x link_ms: the request and the result cross the link; the drafter stays beside the driver, as on Ray by
   default): DSI / SI and DSI / non-SI speedups for links of 0-50 ms, at target 50 ms, drafter 5 ms, a = 0.8, k = 5,
   SP = 4, N = 200 (means over --seeds seeds), and a plot of both (--plot).
2. Validation (--validate LINK_MS, one more arm): the same DSI on Ray with each target actor injecting the delay
   (``inject_link_ms``), on a 3-raylet ``ray.cluster_utils.Cluster`` (--cluster) or a local Ray; wall time over the
   virtual clock's prediction for the same seed and link. Goal: within 10%.

    python -m benchmarks link_latency [--plot benchmarks/results/link_latency.png] [--validate 10 [--cluster]]
"""

from __future__ import annotations

import contextlib
import random
import statistics

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.runtimes import Pool

LINKS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)


def options(p) -> None:
    p.add_argument("--seeds", type=int, default=3, help="generations per link and algorithm (default 3)")
    p.add_argument("-N", type=int, default=200, help="tokens per generation (default 200)")
    p.add_argument("--plot", metavar="PNG", default=None, help="also draw both speedups against the link")
    p.add_argument("--validate", type=float, metavar="LINK_MS", default=None, help="also run DSI on Ray at this link")
    p.add_argument("--cluster", action="store_true", help="validate on a 3-raylet cluster (else a local Ray)")


def arms(args) -> list[Arm]:
    out = [Arm(f"link {link:g} ms", {"link_ms": link}) for link in LINKS]
    if args.validate is not None:
        where = "3 raylets" if args.cluster else "a local Ray"
        out.append(Arm(f"Ray, link {args.validate:g} ms, on {where}", {"validate": args.validate}))
    return out


def setting(seed: int):
    target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(50.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(5.0), seed=seed + 1)
    prompt = [random.Random(seed).randrange(32) for _ in range(8)]
    return target, drafter, prompt


def measure(arm: Arm, args, r: int) -> dict:
    if "validate" in arm.settings:
        return validate(arm.settings["validate"], args)
    link = arm.settings["link_ms"]
    times = {"nonsi": [], "si": [], "dsi": []}
    for seed in range(args.seeds):
        target, drafter, prompt = setting(seed)
        for algo in times:
            out = generate(prompt, target, drafter, algorithm=algo, max_tokens=args.N, lookahead=5, sp_degree=4,
                           runtime_options={"link_ms": {"target": link}})  # fmt: skip
            times[algo].append(out.time_ms)
    m = {a: statistics.mean(t) for a, t in times.items()}
    return {**{f"{a}_ms": ms for a, ms in m.items()}, "dsi_vs_si": m["si"] / m["dsi"],
            "dsi_vs_nonsi": m["nonsi"] / m["dsi"]}  # fmt: skip


@contextlib.contextmanager
def session(args):
    """A 3-raylet cluster or a local Ray when validating (nothing otherwise); stopped by handle."""
    if args.validate is None:
        yield None
        return
    if args.cluster:
        from benchmarks.ray_cluster import three_raylets

        with three_raylets():
            yield None
        return
    from specpar.runtimes.ray_cluster import connect, shutdown

    connect(cpus=5)
    try:
        yield None
    finally:
        shutdown()


def validate(link: float, args) -> dict:
    """DSI on Ray, the target actors injecting the delay (the drafter in the driver), per seed over the virtual
    clock's prediction."""
    from specpar.runtimes.ray_actors import release_kept

    options = {"cpus_per_server": 1 if args.cluster else 0.5, "inject_link_ms": link, "placement": "SPREAD"}
    ratios = []
    for seed in range(args.seeds):
        target, drafter, prompt = setting(seed)
        targets = Pool([target.server(f"target{i}") for i in range(4)], "target")
        drafters = Pool([drafter.server("drafter")], "drafter")
        kw = dict(algorithm="dsi", max_tokens=args.N, lookahead=5, sp_degree=4)
        ray = generate(prompt, targets, drafters, runtime="ray", runtime_options=options, **kw)
        virtual = generate(prompt, target, drafter, runtime_options={"link_ms": {"target": link}}, **kw)
        if ray.tokens != virtual.tokens:
            raise AssertionError(f"seed {seed}: Ray's tokens are not the virtual clock's")
        release_kept(targets.servers + drafters.servers)
        ratios.append(ray.time_ms / virtual.time_ms)
    return {"ray_over_virtual_per_seed": [round(x, 4) for x in ratios], "ray_over_virtual": statistics.median(ratios)}


def summarize(results, args) -> dict:
    out = {}
    if args.validate is not None:
        med = results[-1].figures["ray_over_virtual"]
        out["goal"] = f"Ray within 10% of the virtual clock: {'met' if abs(med - 1) <= 0.10 else 'not met'}"
    if args.plot:
        plot([a for a in results if "link_ms" in a.arm.settings], args.plot, args.N)
        out["plot"] = args.plot
    return out


def plot(results, path: str, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    links = [a.arm.settings["link_ms"] for a in results]
    ax.plot(links, [a.figures["dsi_vs_si"] for a in results], "o-", label="DSI / SI")
    ax.plot(links, [a.figures["dsi_vs_nonsi"] for a in results], "s-", label="DSI / non-SI")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, links[-1] * 1.1)
    ax.set_xlabel("one-way link latency driver <-> target servers (ms)")
    ax.set_ylabel("speedup")
    ax.set_title(f"target 50 ms, drafter 5 ms, a = 0.8, k = 5, SP = 4, N = {n} (virtual clock)", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "nonsi_ms": "non-SI's mean time, ms (virtual clock)",
        "si_ms": "SI's",
        "dsi_ms": "DSI's",
        "dsi_vs_si": "SI time / DSI time",
        "dsi_vs_nonsi": "non-SI time / DSI time",
        "ray_over_virtual": "validation: Ray's wall time / the virtual clock's prediction, median over the seeds",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
