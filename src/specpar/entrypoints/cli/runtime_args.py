"""The runtime options every command that runs generations shares: --runtime and Ray's placement flags."""

from __future__ import annotations

RUNTIME_HELP = {
    "virtual": "virtual: discrete-event clock, exact and fast (offline)",
    "threads": "threads: real wall time, one thread per server in this process (online)",
    "ray": "ray: real wall time, each server a Ray actor in its own process (pip install 'specpar[ray]')",
}

CLOCKS = {  # how a table names the clock its times were read on
    "virtual": "virtual clock (offline)",
    "threads": "threads, wall time (online)",
    "ray": "Ray actors, wall time (online)",
}


def add_runtime_arguments(
    p, choices=("virtual", "threads", "ray"), default: str = "virtual", link: bool = False
) -> None:
    """--runtime among ``choices``, the Ray flags (used with --runtime ray only), and --link-ms if ``link``."""
    p.add_argument(
        "--runtime",
        choices=choices,
        default=default,
        help="; ".join(RUNTIME_HELP[c] for c in choices) + f" (default {default})",
    )
    if link:
        p.add_argument(
            "--link-ms",
            type=float,
            default=0.0,
            metavar="MS",
            help="one-way latency between the driver and the target servers, as on other nodes (default 0; the "
            "drafter stays beside the driver, as on Ray by default): the virtual clock adds 2 x MS to every target "
            "call; on Ray each actor injects the delay (to check the prediction)",
        )
    g = p.add_argument_group("Ray (with --runtime ray)")
    g.add_argument(
        "--ray-address",
        metavar="auto|HOST:PORT",
        default=None,
        help="join a running Ray cluster (`ray start --head` on one node, `ray start --address HOST:PORT` on the "
        "others); default: start a local Ray for this run (no dashboard, loopback only) and stop it at the end",
    )
    g.add_argument(
        "--cpus-per-server",
        type=float,
        default=1.0,
        metavar="CPUS",
        help="CPUs reserved for each server's actor, and its torch threads (default 1); target replicas also "
        "get one GPU each when the cluster has GPUs",
    )
    g.add_argument(
        "--drafter-placement",
        choices=("driver", "actor"),
        default="driver",
        help="driver (default): the drafter runs on a thread of this process, no round trip per draft call; "
        "actor: in its own actor like the targets (the README's Ray section measures both)",
    )
    g.add_argument(
        "--placement",
        choices=("PACK", "SPREAD"),
        default="PACK",
        help="Ray placement group strategy for the servers: PACK on as few nodes as fit (default) or SPREAD "
        "across nodes",
    )


def runtime_options(args) -> dict | None:
    """The keyword arguments of the chosen runtime (generate's runtime_options), from the flags."""
    from specpar.core.errors import ConfigError

    runtime, link = getattr(args, "runtime", None), getattr(args, "link_ms", 0.0)
    if not link >= 0 or link == float("inf"):
        raise ConfigError(f"--link-ms must be a finite number of ms >= 0, got {link:g}")
    if runtime == "ray":
        return {
            "cpus_per_server": args.cpus_per_server,
            "placement": args.placement,
            "inject_link_ms": link,
            "local_pools": ("drafter",) if args.drafter_placement == "driver" else (),
        }
    if link and runtime != "virtual":
        raise ConfigError("--link-ms is modelled on the virtual clock and injected on Ray, not on threads")
    return {"link_ms": {"target": link}} if link else None
