"""``specpar simulate``: non-SI vs SI vs DSI with simulated models, on the virtual clock or on threads."""

from __future__ import annotations

import warnings

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.results import fmt
from specpar.core.trees import BestFirst, shape_text
from specpar.entrypoints.cli import arguments
from specpar.planning.lookahead import sp_degree_needed, verification_servers

DESCRIPTION = """\
Simulate lossless speculative inference with a simulated target and drafter.
Each forward pass takes the time its latency profile says: TTFT for the first
pass over the prompt (prefill), TPOT for each later pass. On the virtual clock
nothing sleeps (the paper's offline simulation); on threads the servers sleep
for their latency in real time (the paper's online simulation).
Acceptance is iid with rate a, as in the paper's analysis, or drifts between
regimes (--acceptance-regimes).
"""


def register(sub) -> None:
    what = "non-SI vs SI vs DSI with simulated models (MODE: under load, HSD)"
    p = arguments.command_parser(sub, "simulate", what, DESCRIPTION)
    arguments.add_pair_arguments(p, fields=PAIR_FIELDS, defaults={"vocab_size": 8})
    arguments.add_profile_arguments(p)
    defaults = {"lookahead": arguments.AUTO_LOOKAHEAD, "sp_degree": arguments.PAPER_SP_DEGREE}
    helps = {"tree": "{help}; SI and DSI run over it beside the chains"}
    arguments.ConfigOptions(
        SpeculativeConfig, "spec", fields=(*defaults, "tree"), defaults=defaults, helps=helps
    ).add_to(p)
    defaults = {"max_tokens": 100, "temperature": 0.0, "coupling": arguments.Default(None, COUPLING_DEFAULT)}
    arguments.add_sampling_arguments(p, ("max_tokens", "temperature", "coupling"), defaults)
    arguments.add_runtime_arguments(p)
    arguments.add_repeats(p, 5, "runs per algorithm, interleaved")
    arguments.add_json(p)
    what = "also draw the first repeat of each algorithm as a Gantt chart of its tasks per server"
    arguments.add_output(p, f"{what} (drafts, verifications, cancelled work) to this image file", metavar="PNG",
                         old=("--timeline",))  # fmt: skip
    p.set_defaults(func=run)
    from specpar.entrypoints.cli import simulate_hsd, simulate_load

    modes = p.add_subparsers(
        dest="mode", metavar="MODE", parser_class=type(p), title="modes (without one: the comparison)"
    )
    simulate_load.register(modes)
    simulate_hsd.register(modes)


PAIR_FIELDS = (
    *arguments.LATENCY_FIELDS,
    "acceptance_rate",
    "acceptance_regimes",
    "vocab_size",
    "seed",
    "prompt_length",
)
MODE_FLAGS = {"--load": "load", "--clients": "load"}  # simulate's former spellings of its modes


def legacy_modes(argv: list[str]) -> tuple[list[str], str | None]:
    """``specpar simulate`` as spelled before its modes were subcommands (``simulate --load R`` is ``simulate load
    --load R``, ``--algorithm hsd`` is ``simulate hsd``, ``--algorithm dsi|compare`` the comparison): the argv to
    parse and a warning line (None: nothing to rewrite)."""
    if not argv or argv[0] != "simulate" or (len(argv) > 1 and argv[1] in ("load", "hsd")):
        return argv, None
    rest, mode, old = list(argv[1:]), None, []
    for i, word in enumerate(rest):
        name, eq, value = word.partition("=")
        if name in ("--algorithm", "--algo") and (eq or i + 1 < len(rest)):
            value = value if eq else rest[i + 1]
            if value in ("hsd", "dsi", "compare"):
                del rest[i : i + (1 if eq else 2)]
                old.append(f"{name} {value}")
                mode = "hsd" if value == "hsd" else mode
                break
    for name in (word.partition("=")[0] for word in rest):
        if name in MODE_FLAGS:
            mode = MODE_FLAGS[name]
            old.append(name)
    if not old:
        return argv, None
    line = arguments.deprecation(
        f"specpar simulate {' '.join(old)}", f"specpar simulate {mode}" if mode else "specpar simulate"
    )
    return ["simulate", *([mode] if mode else []), *rest], line


def _lookaheads(args, target_lat, drafter_lat, a) -> tuple[dict[str, int], str]:
    """Each algorithm's lookahead ({"si": k, "dsi": k}) and a line saying how it was chosen."""
    k = args.lookahead
    if k == "adaptive":
        return {"si": k, "dsi": k}, "adaptive: re-chosen at each window from the acceptance seen so far"
    if k != "auto":
        t, d, pt = target_lat.tpot_ms, drafter_lat.tpot_ms, target_lat.per_token_ms
        if d > 0 and verification_servers(t, d, k, pt) is None:
            why = "given; no SP degree satisfies Eq. 1 with this per-token cost"
        else:
            need = sp_degree_needed(t, d, k, pt) if d > 0 else 0
            why = "given" + (f"; Eq. 1 needs SP >= {need}" if need > args.sp_degree else "")
        return {"si": k, "dsi": k}, why
    from specpar.entrypoints.cli.plan import choose_lookaheads

    dsi, si = choose_lookaheads(args, target_lat, drafter_lat, a, "-k auto has nothing to weigh; give -k K")
    si_why = si.why.removeprefix("SI's ")
    return {"si": si.lookahead, "dsi": dsi.lookahead}, f"auto: DSI {dsi.why}; SI {si_why}"


def run(args) -> int:
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    from specpar.core.json_output import print_json
    from specpar.entrypoints.cli.progress import status

    if args.output:
        from specpar.core.paths import check_output_file, image_suffixes

        args.output = check_output_file(args.output, "-o", image_suffixes())
    pair = arguments.pair_from_args(args)
    (target_lat, drafter_lat), a = pair.latencies(), pair.mean_acceptance_rate
    with status("choosing each algorithm's lookahead (-k auto)", args.lookahead == "auto" and not args.json):
        k, why = _lookaheads(args, target_lat, drafter_lat, a)
    summary, messages = _compare(args, pair, k)
    closed = _closed_forms(args, target_lat, drafter_lat, a, k)
    if args.output:
        from specpar.experiments.plots import plot_timelines

        c = _drafter_fraction(target_lat, drafter_lat)
        title = f"c = {fmt(c, '.3g')}, a = {a:g}, N = {args.max_tokens}, seed {args.seed}"
        plot_timelines([s.first_run for s in summary.values()], args.output, title=title)
    if args.json:
        print_json(
            {
                "config": _config_json(args, pair, k, why),
                "results": {name: s.to_dict() for name, s in summary.items()},
                "closed_forms": closed,
                "warnings": messages,
            },
        )
        return 0
    _print_table(args, summary, target_lat, drafter_lat, k, why, closed, messages)
    if args.output:
        print(f"timeline of the first repeat written to {args.output}")
    return 0


def _drafter_fraction(target_lat, drafter_lat) -> float | None:
    """c, the drafter's per-token latency over the target's (None when the target's is 0: printed "-")."""
    return drafter_lat.tpot_ms / target_lat.tpot_ms if target_lat.tpot_ms > 0 else None


def _compare(args, pair, k) -> tuple[dict, list[str]]:
    """The comparison's summaries ({arm: summary}, a progress bar over its runs) and the specpar warnings it raised
    (sorted, once each)."""
    from specpar.entrypoints.cli.progress import TokenProgress
    from specpar.experiments.comparison import compare

    runs = (3 if args.tree is None else 5) * args.repeats
    kw = dict(
        max_tokens=args.max_tokens,
        lookahead=k,
        sp_degree=args.sp_degree,
        repeats=args.repeats,
        seed=args.seed,
        temperature=args.temperature,
        coupling=coupling_of(args),
        tree=args.tree,
        **arguments.experiment_runtime(args),
    )
    with (
        warnings.catch_warnings(record=True) as caught,
        TokenProgress(runs * args.max_tokens, f"simulating {runs} runs", not args.json) as bar,
    ):
        warnings.simplefilter("always", SpecparWarning)
        done = iter(range(1, runs + 1))
        progress = lambda algo: bar.describe(f"simulated {next(done)} of {runs} runs")  # noqa: E731
        summary = compare(pair.models, pair.prompt, progress=progress, stream=bar.callback, **kw)
    return summary, sorted({str(w.message) for w in caught if issubclass(w.category, SpecparWarning)})


def _closed_forms(args, target_lat, drafter_lat, a: float, k) -> dict[str, float]:
    """The paper's closed forms (ms) beside the simulation, where they hold: constant pass latencies (TTFT = TPOT, no
    per-token cost) and a fixed lookahead; else {}."""
    from specpar.planning import analytic

    constant = target_lat.ttft_ms == target_lat.tpot_ms and drafter_lat.ttft_ms == drafter_lat.tpot_ms
    if not (constant and target_lat.per_token_ms == 0 and isinstance(k["si"], int)):  # not "adaptive"
        return {}
    n, t, d = args.max_tokens, target_lat.tpot_ms, drafter_lat.tpot_ms
    return {
        "nonsi_ms": analytic.nonsi_latency(t, n),
        "si_expected_ms": analytic.si_expected_latency(t, d, a, k["si"], n),
        "dsi_prop1_bound_ms_lookahead1": analytic.dsi_latency_bound(t, d, a, n),
    }


def latency_json(lat) -> dict:
    """A latency profile as the commands' JSON writes it (ms)."""
    return {"ttft_ms": lat.ttft_ms, "tpot_ms": lat.tpot_ms, "per_token_ms": lat.per_token_ms}


def _config_json(args, pair, k, why) -> dict:
    """The comparison's settings, as --json prints them under "config"."""
    target_lat, drafter_lat = pair.latencies()
    return {
        "target": latency_json(target_lat),
        "drafter": latency_json(drafter_lat),
        "drafter_latency_fraction": _drafter_fraction(target_lat, drafter_lat),
        "acceptance_rate": pair.mean_acceptance_rate,
        "acceptance_regimes": pair.acceptance_regimes,
        "lookahead": k,
        "lookahead_choice": why,
        "sp_degree": args.sp_degree,
        "max_new_tokens": args.max_tokens,
        "runtime": args.runtime,
        "link_ms": args.link_ms,
        "temperature": args.temperature,
        "seed": args.seed,
        "repeats": args.repeats,
        "tree": str(args.tree) if isinstance(args.tree, BestFirst) else args.tree,
    }


COUPLING_DEFAULT = (
    "rejection on the virtual clock (the papers'; a seed reproduces there with either), gumbel on threads and Ray "
    "(so that the seed reproduces there too)"
)


def coupling_of(args) -> str:
    """--coupling, or its default for the runtime (COUPLING_DEFAULT): simulate's runs always have a seed."""
    if args.coupling is not None:
        return args.coupling
    return "rejection" if args.runtime_config.name in (None, "virtual") else "gumbel"


def _print_table(args, summary, target_lat, drafter_lat, k, why, closed, messages) -> None:
    """The comparison as a table, under a line of its settings and one of its lookaheads."""
    from specpar.entrypoints.cli.comparison import print_comparison, table_console

    console = table_console()
    clock = arguments.CLOCKS[args.runtime] + (f", {args.link_ms:g} ms links" if args.link_ms else "")
    mode = "greedy" if args.temperature == 0 else f"sampling at temperature {args.temperature:g}"
    a = f"{args.acceptance_regimes} (regimes)" if args.acceptance_regimes else f"{args.acceptance_rate:g}"
    console.print(
        f"target {target_lat.tpot_ms:g} ms/token (TTFT {target_lat.ttft_ms:g} ms), "
        f"drafter {drafter_lat.tpot_ms:g} ms/token (c = {fmt(_drafter_fraction(target_lat, drafter_lat), '.3g')}), "
        f"a = {a}, N = {args.max_tokens}, {args.repeats} repeats, {clock}, {mode}"
    )
    ks = f"k = {k['dsi']}" if k["si"] == k["dsi"] else f"SI k = {k['si']}, DSI k = {k['dsi']}"
    console.print(f"lookahead {ks} ({why})")
    tree = "<" + shape_text(args.tree) + ">" if args.tree else ""
    names = {"si-tree": f"SI {tree}", "dsi-tree": f"DSI {tree}"}
    rows = {arm: {**s.to_dict(), "name": names.get(arm)} for arm, s in summary.items()}
    columns = ("k", "SP", "latency ms", "vs non-SI", "vs SI", "accept rate", "run len", "tokens/pass", "target fwd",
               "drafter fwd", "same as non-SI")  # fmt: skip
    print_comparison(console, rows, columns)
    if closed:
        console.print(
            f"closed forms (iid acceptance): non-SI {closed['nonsi_ms']:.1f} ms; "
            f"SI expected {closed['si_expected_ms']:.1f} ms; "
            f"DSI bound of Proposition 1 (lookahead 1, enough servers) {closed['dsi_prop1_bound_ms_lookahead1']:.1f} ms"
        )
    for m in messages:
        console.print(f"[yellow]warning:[/yellow] {m}")
