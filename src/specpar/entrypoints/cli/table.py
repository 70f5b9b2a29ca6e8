"""``specpar table``: the paper's online experiment (Table 2 style) on threads, with virtual-clock predictions."""

from __future__ import annotations

import statistics

from specpar.backends.simulated_pair import SimulatedPair
from specpar.entrypoints.cli import arguments

DESCRIPTION = """\
Non-SI, SI and DSI on real threads in wall time, with servers that sleep for a
pair's measured latencies (TTFT, then TPOT) and a drafter right at its
acceptance rate, as in the DSI paper's Table 2: N = 50 tokens, lookahead in
{1, 5, 10} where Eq. 1 holds with SP <= 7. Prints DSI's speedup over SI and
over non-SI (ratio of mean times +- standard deviation of the per-repeat ratios) beside the virtual
clock's prediction for the same runs.

Pairs come from profile JSON files (--profile, as written by `specpar profile`),
from numbers on the command line (--target-tpot ... -a ...), and the default
model pair's profile measured on this machine when it exists.
"""


def register(subparsers) -> None:
    what = "the online experiment (Table 2 style): threads vs virtual clock"
    p = arguments.command_parser(subparsers, "table", what, DESCRIPTION)
    arguments.add_profile_arguments(p, repeated=True)
    numbers = arguments.ConfigOptions(
        SimulatedPair, "pair", fields=NUMBERS, optional="a pair given by numbers", required=REQUIRED
    )
    numbers.add_to(p, "a pair given by numbers (ms per forward pass)")
    name = p.add_argument("--name", default="command line", help="label for the pair given by numbers")
    arguments.advanced_flag(name)
    p.add_argument("--no-default-pair", action="store_true", help="leave out the default pair's measured profile")
    arguments.add_sampling_arguments(p, ("max_tokens",), {"max_tokens": 50}, {"max_tokens": "tokens per run"})
    arguments.add_repeats(p, 3, "runs per algorithm and lookahead")
    arguments.add_lookaheads(p, "1,5,10", "lookaheads to try; those Eq. 1 rules out on --sp-degree servers are skipped")
    arguments.add_sp_degree(p)
    arguments.ConfigOptions(SimulatedPair, "models", fields=("seed",)).add_to(p)
    arguments.add_json(p, "print one JSON object")
    arguments.add_runtime_arguments(p, choices=("threads", "ray"), default="threads", fields=arguments.REAL_TIME_FIELDS)
    p.set_defaults(func=run)


NUMBERS = ("target_tpot_ms", "target_ttft_ms", "drafter_tpot_ms", "drafter_ttft_ms", "acceptance_rate")
REQUIRED = ("target_tpot_ms", "drafter_tpot_ms", "acceptance_rate")


def _profiles(args):
    from specpar.core.errors import ConfigError
    from specpar.prediction.pair_profile import PairProfile, default_profile_path, load_default_profile

    pairs = [PairProfile.load(path, args.acceptance_estimate) for path in args.profile]
    if args.pair is not None:
        target, drafter = args.pair.latencies()
        pairs.append(PairProfile(args.name, "", target, drafter, args.pair.acceptance_rate, {"source": "command line"}))
    note = None
    if not args.no_default_pair:
        default = load_default_profile(args.acceptance_estimate)
        if default is not None:
            pairs.append(default)
        else:
            note = (
                f"the default model pair's profile is not available on this machine ({default_profile_path()} "
                f"does not exist; `specpar profile -o {default_profile_path()}` measures it)"
            )
    if not pairs:
        hint = f"; {note}" if note else ""
        raise ConfigError(f"no pair to measure: give --profile JSON or --target-tpot, --drafter-tpot and -a{hint}")
    return pairs, note


def run(args) -> int:
    from specpar.core.json_output import print_json
    from specpar.entrypoints.cli import real_models
    from specpar.entrypoints.cli.comparison import table_console

    console = table_console(stderr=args.json, highlight=False)
    pairs, note = _profiles(args)
    if args.runtime != "virtual":
        real_models.warn_load()
    if note:
        console.print(f"[yellow]note:[/yellow] {note}")
    tables = [_measure(args, pair) for pair in pairs]
    if args.json:
        print_json({"tables": [t.to_dict() for t in tables], "note": note})
        return 0
    for t in tables:
        _print_online(console, t, args.runtime)
    return 0


def _measure(args, pair):
    """One pair's online table (:func:`~specpar.experiments.online.run_online`), with a progress bar over its runs."""
    from specpar.entrypoints.cli.progress import TokenProgress
    from specpar.experiments.online import feasible_lookaheads, run_online

    kwargs = dict(
        lookaheads=args.lookaheads, **arguments.experiment_settings(args), **arguments.experiment_runtime(args)
    )
    runs = args.repeats * (1 + 2 * len(feasible_lookaheads(pair, args.lookaheads, args.sp_degree)))
    with TokenProgress(runs * args.max_tokens, f"{pair.label}: {args.runtime}", not args.json) as bar:
        done = iter(range(1, runs + 1))
        progress = lambda arm: bar.describe(f"{pair.label}: {arm}, run {next(done)} of {runs}")  # noqa: E731
        return run_online(pair, progress=progress, stream=bar.callback, **kwargs)


COLUMNS = ("lookahead", "SP (Eq. 1)", "DSI vs SI", "predicted", "DSI vs non-SI", "predicted", "SI ms", "DSI ms",
           "non-SI ms")  # fmt: skip


def _print_online(console, t, runtime: str) -> None:
    """One pair's table: a line of its pair, a row per lookahead (measured speedups +- their spread beside the
    virtual clock's), then notes on inconclusive ratios and the lookaheads Eq. 1 left out."""
    from specpar.entrypoints.cli.comparison import print_table
    from specpar.experiments.loop import inconclusive_line

    p = t.profile
    console.print(
        f"[bold]{p.label}[/]: target TPOT {p.target.tpot_ms:g} ms (TTFT {p.target.ttft_ms:g}), drafter TPOT "
        f"{p.drafter.tpot_ms:g} ms (TTFT {p.drafter.ttft_ms:g}, c = {p.drafter_fraction:.3g}), a = "
        f"{p.acceptance_rate:g}; N = {t.n}, {t.repeats} repeats on {runtime}, DSI on up to {t.sp_degree} "
        "target servers",
        highlight=False,
    )
    rows = []
    for row in t.rows:
        m, v = t.speedups(row), t.speedups(row, virtual=True)
        cells = [str(row.lookahead), str(row.sp_needed)]
        for key in ("dsi_vs_si", "dsi_vs_nonsi"):
            cells += [f"{m[key].value:.2f}x ± {m[key].std:.2f}", f"{v[key].value:.2f}x"]
        rows.append(cells + [f"{statistics.fmean(ms):.1f}" for ms in (row.si_ms, row.dsi_ms, t.nonsi_ms)])
    print_table(console, COLUMNS, rows, left=())
    for row in t.rows:
        for key, s in t.speedups(row).items():
            line = inconclusive_line(f"k = {row.lookahead}: DSI", "SI" if key == "dsi_vs_si" else "non-SI", s.to_dict())
            if line:
                console.print(f"  [yellow]note:[/yellow] {line}")
    if t.infeasible:
        console.print(
            f"  lookahead {', '.join(map(str, t.infeasible))} left out: Eq. 1 needs more than "
            f"{t.sp_degree} target servers"
        )
