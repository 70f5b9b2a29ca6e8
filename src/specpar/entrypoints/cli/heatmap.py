"""``specpar heatmap``: the DSI paper's offline heatmaps (Fig. 2; Fig. 7 with --lookahead 5) as PNG and CSV."""

from __future__ import annotations

import os
import time

from specpar.entrypoints.cli import arguments

DESCRIPTION = """\
Offline simulation on the virtual clock, as in the DSI paper's Fig. 2: speedups
of (a) SI over non-SI, (b) DSI over SI, (c) DSI over non-SI and (d) DSI over the
faster of SI and non-SI, for every drafter latency c (fraction of the target's
forward time) and acceptance rate a. SI takes its fastest lookahead in the range
for each cell; DSI its fastest among those in the range that satisfy the paper's
Eq. 1 for --sp-degree target servers (k >= target / (SP x drafter); the smallest
such k even beyond the range). With --lookahead K both use K (the paper's Fig. 7
uses 5) and DSI runs on --sp-degree servers, queueing where Eq. 1 fails.
Cells where the first algorithm is slower appear pink.
"""


MAX_CHECK_CELLS = 10_000  # cells run again through the event-driven simulator (each one a full simulation)


def register(subparsers) -> None:
    p = arguments.command_parser(
        subparsers, "heatmap", "the paper's offline heatmaps (Fig. 2 / Fig. 7) as PNG and CSV", DESCRIPTION
    )
    add_grid_arguments(p)
    p.add_argument("-k", "--lookahead", type=arguments.integer, default=None, metavar="K",
                   help="fixed lookahead for SI and DSI (Fig. 7: 5). Default: each cell's fastest, DSI's among those "
                        "satisfying Eq. 1")  # fmt: skip
    what = "write PREFIX.png and PREFIX.csv (fig.png names the prefix fig too; default: dsi-fig2, or dsi-fig7-kK"
    arguments.add_output(p, f"{what} with --lookahead)", metavar="PREFIX")
    what = "also run M random cells through the event-driven simulator and print both (slow)"
    check = p.add_argument(
        "--check-cells", type=arguments.ranged(int, 0, MAX_CHECK_CELLS), default=0, metavar="M", help=what
    )
    arguments.advanced_flag(check)
    p.set_defaults(func=run)


def add_grid_arguments(p, resolution: int = 100) -> None:
    """Options shared with ``specpar reproduce`` (whose default resolution is smaller)."""
    note = (
        "the paper's 100 x 101 cells"
        if resolution == 100
        else f"{resolution} x {resolution + 1} cells; 100 is the paper's"
    )
    p.add_argument("--resolution", type=arguments.integer, default=resolution, metavar="R",
                   help="R drafter latencies c from 0.01 to 1 and R+1 acceptance rates a from 0 to 1, evenly spaced "
                        f"(default {resolution}: {note})")  # fmt: skip
    arguments.add_sampling_arguments(p, ("max_tokens",), {"max_tokens": 100}, {"max_tokens": "tokens per run"})
    arguments.add_repeats(p, 5, "runs per cell and algorithm")
    arguments.add_sp_degree(p)
    what = "the range of lookaheads SI may choose from in each cell, and DSI those of them satisfying Eq. 1"
    arguments.add_lookaheads(p, "1-200", what)
    arguments.add_pair_arguments(p, fields=("seed",))


def output_prefix(given: str | None, default: str) -> str:
    """Where PREFIX.png and PREFIX.csv go: ``given`` (a directory: ``default`` in it; a name ending in .png or .csv:
    the name without it, so that ``-o fig.png`` writes fig.png and fig.csv, not fig.png.png), checked before any
    work."""
    from specpar.core.paths import check_output_file

    prefix = given or default
    if prefix.endswith(os.sep) or os.path.isdir(prefix):
        prefix = os.path.join(prefix, default)
    elif prefix.lower().endswith((".png", ".csv")) and len(os.path.basename(prefix)) > 4:
        prefix = prefix[:-4]
    for suffix in (".png", ".csv"):
        check_output_file(prefix + suffix, "-o")
    return prefix


def run(args) -> int:
    from specpar.entrypoints.cli.comparison import table_console
    from specpar.entrypoints.cli.progress import TokenProgress
    from specpar.experiments.heatmap import PANELS, compute_heatmap
    from specpar.experiments.plots import plot_heatmap

    console = table_console(wide=120, highlight=False)
    prefix = output_prefix(args.output, "dsi-fig2" if args.lookahead is None else f"dsi-fig7-k{args.lookahead}")
    settings = dict(lookaheads=arguments.lookahead_range(args), fixed_lookahead=args.lookahead,
                    **arguments.experiment_settings(args))  # fmt: skip
    t0 = time.perf_counter()
    with TokenProgress(None, f"{args.resolution} x {args.resolution + 1} cells", unit="cells") as bar:
        h = compute_heatmap(args.resolution, progress=bar.update, **settings)
    seconds = time.perf_counter() - t0
    h.write_csv(prefix + ".csv")
    plot_heatmap(h, prefix + ".png")
    console.print(f"{len(h.c)} x {len(h.a)} cells, {h.description}: computed in {seconds:.1f} s")
    for name, (label, _, _) in PANELS.items():
        s = h.speedup(name)
        console.print(f"  {label}: min {s.min():.3f}x, max {s.max():.3f}x, {(s < 1 - 1e-9).sum()} cells below 1")
    if args.lookahead is not None:
        bad = h.c[(h.sp_needed > h.sp_degree).any(axis=1)]
        if bad.size:
            console.print(
                f"  Eq. 1 fails for c <= {bad.max():g} with lookahead {args.lookahead} on {h.sp_degree} "
                "servers: DSI's verifications queue there (simulated)"
            )
    console.print(f"wrote {prefix}.png and {prefix}.csv")
    if args.check_cells:
        _check_cells(console, h, args)
    return 0


def _check_cells(console, h, args) -> None:
    """Random cells through the event-driven simulator beside the fast path's figures."""
    import numpy as np

    from specpar.entrypoints.cli.comparison import print_table
    from specpar.experiments.heatmap import event_cell

    rng = np.random.default_rng(args.seed)
    rows = []
    for _ in range(args.check_cells):
        i, j = int(rng.integers(len(h.c))), int(rng.integers(len(h.a)))
        si_k, dsi_k = int(h.si_lookahead[i, j]), int(h.dsi_lookahead[i, j])
        ev = event_cell(float(h.c[i]), float(h.a[j]), n=h.n, repeats=h.repeats, si_lookahead=si_k,
                        dsi_lookahead=dsi_k, sp_degree=h.sp_degree, seed=args.seed)  # fmt: skip
        figures = (h.si[i, j], ev["si"], h.dsi[i, j], ev["dsi"])
        rows.append([f"{h.c[i]:g}", f"{h.a[j]:g}", str(si_k), str(dsi_k), *(f"{x:.2f}" for x in figures)])
    columns = ("c", "a", "SI k", "DSI k", "SI fast", "SI events", "DSI fast", "DSI events")
    print_table(console, columns, rows, "fast path vs event-driven simulator (mean latency, target passes)", left=())
    console.print("(the event runs draw their own acceptances: figures agree in distribution, not run by run)")
