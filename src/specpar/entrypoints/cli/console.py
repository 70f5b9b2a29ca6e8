"""The rich Console a command prints its tables with, as wide as where they land."""

from __future__ import annotations

import os
import sys


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
