"""The commands' tables: a console as wide as where they land, one table printer (turned when too wide), and the
one comparison table of ``generate --compare``, ``bench`` and ``simulate``: a row per arm (an algorithm, a token
tree, a ``bench --arm``), the columns the command picks (:data:`CELLS`), the metrics' footnote under it, and a note
for each ratio its repeats leave inconclusive."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from specpar.core.results import fmt, metrics_footnote


def table_console(stderr: bool = False, wide: int = 130, **kw):
    """A Console for a command's tables: the terminal's width on a terminal; elsewhere (a log, a pipe) $COLUMNS when
    it is set, else ``wide`` columns, so that rows stay whole."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty():
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else wide
    return Console(stderr=stderr, width=width, **kw)


def print_table(console, columns, rows, title: str | None = None, left: tuple[str, ...] = ("algorithm",)) -> None:
    """Print ``rows`` (lists of cell strings, rich markup allowed) under ``columns``; when the table is wider than the
    console, print it turned (one row per column, one column per row, headed by each row's first cell), so that no
    header or cell is cut at 80 columns."""
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    natural = console.measure(table, options=console.options.update_width(1 << 16)).maximum
    if natural <= console.width:
        console.print(table)
        return
    turned = Table(title=title)
    turned.add_column(columns[0], justify="left", no_wrap=True)
    for row in rows:
        turned.add_column(row[0], justify="right")
    for i, col in enumerate(columns[1:], 1):
        turned.add_row(col, *(row[i] for row in rows))
    console.print(turned)


NAMES = {"nonsi": "non-SI", "si": "SI", "dsi": "DSI", "auto": "auto"}


def speedups_of(by_algo: dict, algo: str) -> dict:
    """``speedup_vs_nonsi`` / ``speedup_vs_si`` (values) and their ``_spread`` dicts for one algorithm's results,
    paired repeat by repeat with the baseline's (None where the baseline did not run)."""
    from specpar.experiments.loop import speedup

    out = {}
    for base in ("nonsi", "si"):
        s = speedup([r.time_ms for r in by_algo[base]], [r.time_ms for r in by_algo[algo]]) if base in by_algo else None
        out[f"speedup_vs_{base}"] = s.value if s and math.isfinite(s.value) else None
        out[f"speedup_vs_{base}_spread"] = s.to_dict() if s else None
    return out


def inconclusive_lines(summary: dict) -> list[str]:
    """One sentence per inconclusive ratio in a summary of :func:`speedups_of` ({arm: its speedups}: what the
    comparison table prints under itself)."""
    from specpar.experiments.loop import inconclusive_line

    lines = []
    for algo, s in summary.items():
        for base in ("nonsi", "si") if algo != "nonsi" else ():  # non-SI is the baseline, not judged against SI
            spread = s.get(f"speedup_vs_{base}_spread")
            name = s.get("name") or NAMES.get(algo, algo)
            line = inconclusive_line(name, NAMES[base], spread) if algo != base and spread else None
            if line:
                lines.append(line)
    return lines


def speedup_cell(summary_row: dict, base: str) -> str:
    """A table cell for a :func:`speedups_of` entry: ``1.23x ± 0.05`` (the spread of the paired per-run ratios when
    there are several), red below 1, "-" when the baseline did not run."""
    spread = summary_row.get(f"speedup_vs_{base}_spread")
    if not spread or spread["value"] is None:
        return "-"
    text = f"{spread['value']:.2f}x" + (f" ± {spread['ratio_std']:.2f}" if spread["repeats"] > 1 else "")
    return f"[red]{text}[/red]" if spread["value"] < 1 - 1e-9 else text


def _same(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "[red]NO[/red]")


def _percent(x: float | None) -> str:
    return fmt(None if x is None else 100 * x, ".2f", "%")


CELLS: dict[str, Callable[[Mapping], str]] = {  # each column's cell from a row
    "k": lambda r: str(r.get("lookahead") or "-"),
    "SP": lambda r: str(r["sp_degree"]),
    "time s": lambda r: fmt(r["time_s"], ".2f"),
    "predicted s": lambda r: fmt(r.get("predicted_s"), ".2f"),
    "latency ms": lambda r: f"{r['mean_ms']:.1f}±{r['std_ms']:.1f}",
    "tokens /s": lambda r: fmt(r.get("tokens_per_second")),
    "vs non-SI": lambda r: speedup_cell(r, "nonsi"),
    "vs SI": lambda r: speedup_cell(r, "si"),
    "accept rate": lambda r: fmt(r.get("acceptance_rate")),
    "run len": lambda r: fmt(r.get("mean_run_length")),
    "tokens/pass": lambda r: fmt(r.get("mean_acceptance_length")),
    "target fwd": lambda r: f"{r['target_forwards']:.1f}",
    "drafter fwd": lambda r: f"{r['drafter_forwards']:.1f}",
    "same as non-SI": lambda r: _same(r.get("same_tokens_as_nonsi")),
    "outside fwd": lambda r: _percent(r.get("outside_forward_fraction")),
}


def print_comparison(
    console, rows: Mapping[str, Mapping], columns: Sequence[str], title: str | None = None, why: str | None = None
) -> None:
    """The table of ``rows`` ({arm: row}: the row's "name" heads it, else the arm's :data:`NAMES`) under "algorithm"
    and ``columns``, the footnote defining its metrics, ``why`` (what the measured costs say), and the notes."""
    cells = [[r.get("name") or NAMES.get(arm, arm), *(CELLS[c](r) for c in columns)] for arm, r in rows.items()]
    print_table(console, ("algorithm", *columns), cells, title)
    console.print(metrics_footnote(columns), style="dim")
    if why:
        console.print(why)
    for line in inconclusive_lines(rows):
        console.print(f"[yellow]note:[/yellow] {line}")
