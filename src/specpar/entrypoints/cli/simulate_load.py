"""``specpar simulate load --load RATE`` / ``--clients N``: many requests on a fixed number of processing units, per
policy (adaptive, fixed DSI, fixed SI, non-SI), on one virtual clock (:mod:`specpar.experiments.load`)."""

from __future__ import annotations

import argparse

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.entrypoints.cli import arguments
from specpar.planning.load import POLICIES

MAX_RATE = 1e9  # requests/s, or times the non-SI capacity
MAX_UNITS = 1024  # a share of all the units runs DSI on them: at most 1024 target servers (sp_degree's bound)
MAX_REQUESTS = 100_000


def load_rates(text: str) -> list[str]:
    """--load: comma-separated rates, requests per second ("2.5") or times the non-SI capacity ("0.5x")."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            x = float(part[:-1] if part.endswith("x") else part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"a rate is a number of requests/s or a multiple like 0.5x: {part!r}"
            ) from None
        if not 0 < x < MAX_RATE:
            raise argparse.ArgumentTypeError(f"a rate must be > 0 and below {MAX_RATE:g}, got {part!r}")
        out.append(part)
    return out


DESCRIPTION = """\
Many requests on a fixed number of processing units (GPUs, cores), per policy:
adaptive (each request its fastest option on its share of the units, shares for
the most tokens per second), fixed DSI, fixed SI, non-SI; on one virtual clock,
the same arrivals, prompts and models for every policy. Requests arrive as a
Poisson process (--load) or from closed-loop clients (--clients).
"""


def register(modes) -> None:
    p = arguments.command_parser(modes, "load", "many requests on shared processing units, per policy", DESCRIPTION)
    arguments.add_pair_arguments(p, fields=PAIR_FIELDS, defaults={"vocab_size": 8})
    arguments.add_profile_arguments(p)
    lookahead = {"lookahead": arguments.AUTO_LOOKAHEAD}
    arguments.ConfigOptions(SpeculativeConfig, "spec", fields=("lookahead",), defaults=lookahead).add_to(p)
    arguments.add_sampling_arguments(p, ("max_tokens", "temperature"), {"max_tokens": 100, "temperature": 0.0})
    g = p.add_argument_group("load")
    g.add_argument("--load", type=load_rates, default=None, metavar="RATE[,RATE...]",
                   help="Poisson arrivals at RATE requests/s, or at a multiple of the non-SI capacity (0.5x: half of "
                        "what non-SI serves on the units); one row per rate and policy")  # fmt: skip
    g.add_argument("--clients", type=arguments.integers, default=None, metavar="N[,N...]",
                   help="closed-loop clients instead: each sends its next request when the last one ends")  # fmt: skip
    integer = arguments.integer
    g.add_argument("--units", type=integer, default=8, help="processing units (GPUs, cores) the requests share (8)")
    g.add_argument("--requests", type=integer, default=100, help="requests per rate and policy (default 100)")
    g.add_argument("--policies", default=",".join(POLICIES), metavar="P,...",
                   help=f"policies to compare (default all: {', '.join(POLICIES)})")  # fmt: skip
    arguments.add_json(p)
    what = "also draw throughput and latency per load to this image file"
    arguments.add_output(p, what, metavar="PNG", old=("--plot",))
    p.set_defaults(func=run)


PAIR_FIELDS = (*arguments.LATENCY_FIELDS, "acceptance_rate", "vocab_size", "seed", "prompt_length")


def run(args) -> int:
    from specpar.core.json_output import print_json
    from specpar.entrypoints.cli.progress import status
    from specpar.experiments.load import PERCENTILES, LoadSetting, LoadSimulation

    policies = check(args)
    pair = arguments.pair_from_args(args)
    if args.output:
        from specpar.core.paths import check_output_file, image_suffixes

        args.output = check_output_file(args.output, "-o", image_suffixes())
    (target, drafter), a = pair.latencies(), pair.acceptance_rate
    setting = LoadSetting(
        units=args.units, target=target, drafter=drafter, acceptance_rate=a, max_tokens=args.max_tokens,
        prompt_length=pair.prompt_length, vocab_size=pair.vocab_size, lookahead=args.lookahead,
        temperature=args.temperature,
    )  # fmt: skip
    sim = LoadSimulation(setting, seed=pair.seed)
    if args.load is not None:
        rates = [float(t[:-1]) * setting.nonsi_capacity if t.endswith("x") else float(t) for t in args.load]
        points = [({"rate": rate}, rate / setting.nonsi_capacity) for rate in rates]
    else:
        points = [({"clients": n}, None) for n in args.clients]
    rows = []
    with status(f"simulating {len(points) * len(policies)} runs of {args.requests} requests", not args.json):
        for kw, x in points:
            for policy in policies:
                rows.append(
                    {**sim.run(policy, requests=args.requests, **kw).to_dict(), "load_x_nonsi_capacity": x, **kw}
                )
    config = {
        "units": args.units,
        "target": {"ttft_ms": target.ttft_ms, "tpot_ms": target.tpot_ms, "per_token_ms": target.per_token_ms},
        "drafter": {"ttft_ms": drafter.ttft_ms, "tpot_ms": drafter.tpot_ms},
        "acceptance_rate": a,
        "max_new_tokens": args.max_tokens,
        "requests": args.requests,
        "nonsi_capacity_requests_per_s": setting.nonsi_capacity,
        "seed": pair.seed,
        "options": {p: [o.__dict__ for o in sim.curve(p).options] for p in policies},
    }
    if args.output:
        from specpar.experiments.plots import plot_load

        title = f"{args.units} units, target {target.tpot_ms:g} ms, drafter {drafter.tpot_ms:g} ms, a = {a:g}"
        plot_load(rows, args.output, title)
    if args.json:
        print_json({"config": config, "results": rows})
        return 0
    _print(rows, config, PERCENTILES, args)
    if args.output:
        print(f"curves written to {args.output}")
    return 0


def check(args) -> list[str]:
    """The flags' values, checked before anything runs; returns the policies to compare."""
    if (args.load is None) == (args.clients is None):
        raise ConfigError("give either --load or --clients (not both)")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise ConfigError(f"--policies needs at least one of {', '.join(POLICIES)}")
    for p in policies:
        if p not in POLICIES:
            raise ConfigError(f"--policies: each must be one of {', '.join(POLICIES)}, got {p!r}")
    for flag, value, most in (("--units", args.units, MAX_UNITS), ("--requests", args.requests, MAX_REQUESTS)):
        if not 1 <= value <= most:
            raise ConfigError(f"{flag} must be in [1, {most}], got {value}")
    if args.load is not None and not args.load:
        raise ConfigError("--load needs at least one rate")
    if args.clients is not None and not args.clients:
        raise ConfigError("--clients needs at least one number of clients")
    if args.clients is not None and any(n < 1 for n in args.clients):
        raise ConfigError(f"--clients must be >= 1, got {args.clients}")
    return policies


def _option(o: dict) -> str:
    """One option of a policy's share curve: "3u dsi SP 2 k 3"."""
    sp = f" SP {o['sp_degree']}" if o["algorithm"] == "dsi" else ""
    return f"{o['units']}u {o['algorithm']}{sp}" + (f" k {o['lookahead']}" if o["lookahead"] else "")


def _print(rows, config, percentiles, args) -> None:
    from specpar.entrypoints.cli.comparison import print_table, table_console

    console = table_console(wide=140)
    console.print(
        f"{config['units']} processing units; target {config['target']['tpot_ms']:g} ms/token, drafter "
        f"{config['drafter']['tpot_ms']:g} ms/token, a = {config['acceptance_rate']:g}; N = {args.max_tokens}; "
        f"{args.requests} requests per row; non-SI capacity {config['nonsi_capacity_requests_per_s']:.3g} req/s; "
        "virtual clock"
    )
    best = {}
    for r in rows:
        best[r["load"]] = max(best.get(r["load"], 0.0), r["throughput_tokens_per_s"])
    cells = []
    for r in rows:
        load = r["load"] + (f" ({r['load_x_nonsi_capacity']:.2g}x)" if r.get("load_x_nonsi_capacity") else "")
        thr = f"{r['throughput_tokens_per_s']:.1f}"
        top = r["throughput_tokens_per_s"] >= best[r["load"]] * (1 - 1e-9)
        latencies = [f"{r[f'latency_p{q}_ms']:.0f}" for q in percentiles]
        cells.append([load, r["policy"], f"[bold]{thr}[/]" if top else thr, *latencies, f"{r['ttft_p50_ms']:.0f}",
                      f"{r['switches_per_request']:.2f}"])  # fmt: skip
    columns = ("load", "policy", "tokens/s", *(f"p{q} ms" for q in percentiles), "TTFT p50 ms", "switches/req")
    print_table(console, columns, cells, left=("load", "policy"))
    options = (f"{p}: " + ", ".join(map(_option, opts)) for p, opts in config["options"].items())
    console.print("options per share: " + "; ".join(options))
    console.print(
        "tokens/s: output tokens / (last completion - first arrival); latency: completion - arrival (queueing "
        "included); bold: the highest at that load"
    )
