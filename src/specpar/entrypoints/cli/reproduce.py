"""``specpar reproduce``: the DSI paper's claims, each with the measured figure, PASS or FAIL, and its command."""

from __future__ import annotations

import os
import time

from specpar.core.json_output import print_json
from specpar.entrypoints.cli import arguments

DESCRIPTION = """\
Check the DSI paper's claims by simulation and print each with the measured
figure, PASS / FAIL (or MISSING where an input is not in our copy of the
paper; NOTE for a stricter comparison reported beside a claim, never a
FAIL), and the command that reproduces it. Grid claims use the offline
heatmaps at --resolution (default 50: a reduced grid; 100 is the paper's).
Exit status 1 if any claim FAILs.
"""


TABLE2_INPUTS = (  # (flag, metavar, what it is, its former spelling): the figures Table 2 needs that our copy lacks
    ("--starcoder-latency-ratio", "C", "StarCoder-168M's latency over StarCoder-15B's", "--starcoder-drafter-latency"),
    ("--phi3-acceptance-rate", "A", "Phi3-4B's acceptance rate against Phi3-14B", "--phi3-acceptance"),
)


def register(subparsers) -> None:
    from specpar.entrypoints.cli.heatmap import add_grid_arguments
    from specpar.experiments.claims import CLAIM_KEYS

    what = "check the DSI paper's claims (PASS/FAIL with figures)"
    p = arguments.command_parser(subparsers, "reproduce", what, DESCRIPTION)
    add_grid_arguments(p, resolution=50)
    p.add_argument("--only", nargs="+", choices=CLAIM_KEYS, default=None, metavar="CLAIM",
                   help=f"check only these claims: {', '.join(CLAIM_KEYS)}")  # fmt: skip
    for name, metavar, what, old in TABLE2_INPUTS:
        action = p.add_argument(name, type=arguments.number, default=None, metavar=metavar,
                                help=f"Table 2: {what} (not in our copy)")  # fmt: skip
        arguments.add_deprecated(p, action, old)
        arguments.advanced_flag(action)
    what = "another Table 2 configuration: drafter latency fraction C and acceptance rate A"
    row = p.add_argument("--table2-row", nargs=3, action="append", default=[], metavar=("NAME", "C", "A"), help=what)
    arguments.advanced_flag(row)
    what = "also write the Fig. 2 and Fig. 7 heatmaps (PNG + CSV) measured for the report into DIR"
    arguments.add_output(p, what, metavar="DIR", old=("--output-dir",))
    arguments.add_json(p, "print the claims as JSON")
    p.set_defaults(func=run)


def _table2_rows(args):
    from specpar.core.errors import ConfigError
    from specpar.experiments.claims import TABLE2_KNOWN, Table2Row, check_table2_inputs

    star, phi = TABLE2_KNOWN
    c, a = args.starcoder_latency_ratio, args.phi3_acceptance_rate
    rows = [
        Table2Row(star.name, c, star.a, star.source, f"--starcoder-latency-ratio {c:g}" if c is not None else ""),
        Table2Row(phi.name, phi.c, a, phi.source, f"--phi3-acceptance-rate {a:g}" if a is not None else ""),
    ]
    for name, c, a in args.table2_row:
        try:
            rows.append(Table2Row(name, float(c), float(a), "given on the command line"))
        except ValueError:
            raise ConfigError(f"--table2-row {name} {c} {a}: C and A must be numbers") from None
    for row in rows:  # checked now, not after the grid claims have run
        if row.c is not None and row.a is not None:
            check_table2_inputs(row.c, row.a)
    return rows


def run(args) -> int:
    from specpar.entrypoints.cli.comparison import table_console
    from specpar.entrypoints.cli.progress import TokenProgress
    from specpar.experiments.claims import FAIL, reproduce

    if args.output:
        from specpar.core.paths import check_output_dir

        check_output_dir(args.output, "-o")
    console = table_console(wide=120, highlight=False)
    figures: dict = {}
    t0 = time.perf_counter()
    grid = dict(resolution=args.resolution, lookaheads=arguments.lookahead_range(args),
                **arguments.experiment_settings(args))  # fmt: skip
    table2 = _table2_rows(args)
    with TokenProgress(None, "measuring", not args.json, unit="steps") as bar:
        progress = lambda what: bar.advance(f"measured {what}")  # noqa: E731
        claims = reproduce(args.only, table2_rows=table2, progress=progress, figures=figures, **grid)
    seconds = time.perf_counter() - t0
    if args.output and "grid" in figures:
        from specpar.experiments.plots import plot_heatmap

        os.makedirs(args.output, exist_ok=True)
        for name, h in (("dsi-fig2", figures["grid"].fig2), ("dsi-fig7-k5", figures["grid"].fig7)):
            h.write_csv(os.path.join(args.output, name + ".csv"))
            plot_heatmap(h, os.path.join(args.output, name + ".png"))
    if args.json:
        print_json({"seconds": seconds, "claims": [c.__dict__ for c in claims]})
    else:
        colours = {"PASS": "green", "FAIL": "red", "MISSING": "yellow", "PARTIAL": "yellow", "NOTE": "cyan"}
        console.print(
            f"grid claims on {args.resolution} x {args.resolution + 1} cells (c x a), N = "
            f"{args.max_tokens}, {args.repeats} repeats per cell, SP = {args.sp_degree}; virtual clock"
        )
        for c in claims:
            console.print(f"[bold {colours[c.status]}]{c.status:7}[/] [bold]{c.source}[/]: {c.statement}")
            console.print(f"        measured: {c.measured}", highlight=False)
            console.print(f"        reproduce: [cyan]{c.command}[/]", highlight=False)
        counts = {s: sum(c.status == s for c in claims) for s in colours}
        console.print(", ".join(f"{v} {k}" for k, v in counts.items() if v) + f" in {seconds:.1f} s")
        if args.output and "grid" in figures:
            console.print(f"heatmaps written to {args.output}/")
    return 1 if any(c.status == FAIL for c in claims) else 0
