"""The commands' one progress display, drawn on stderr with rich, only on a terminal, and always taken down (Ctrl-C
included) by its ``with`` block, so that the one-line "interrupted" lands on a clean line."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence

REFRESH_S = 0.1  # the bar is updated at most this often: a run of 10^7 tokens calls the stream 10^6+ times


class TokenProgress:
    """``with TokenProgress(total, label, enabled) as bar``: a bar of tokens generated over every run (pass
    ``bar.callback`` to ``generate(stream=...)``), or of other steps (``unit``, counted by :meth:`advance`).

    total: tokens (or steps) expected over all runs, None when unknown; enabled: False for JSON output.
    """

    def __init__(self, total: int | None, label: str, enabled: bool = True, unit: str = "tokens"):
        self.total, self.label, self.unit = total, label, unit
        self.enabled = enabled and sys.stderr.isatty()
        self._pending = 0
        self._next_refresh = 0.0

    def __enter__(self) -> TokenProgress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            columns = (MofNCompleteColumn(), TextColumn(self.unit), TimeRemainingColumn())
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), *columns, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total)
        return self

    @property
    def callback(self):
        """:meth:`stream` where a bar is drawn, else None (a run with nothing to call costs nothing)."""
        return self.stream if self.enabled else None

    def stream(self, tokens: Sequence[int]) -> None:
        """The ``stream`` callback: count ``tokens``, redraw at most every REFRESH_S seconds."""
        if not self.enabled:
            return
        self._pending += len(tokens)
        now = time.monotonic()
        if now >= self._next_refresh:
            self._bar.update(self._task, advance=self._pending)
            self._pending, self._next_refresh = 0, now + REFRESH_S

    def describe(self, label: str) -> None:
        """Show what runs now (e.g. "DSI, repeat 2 of 5")."""
        self.advance(label, 0)

    def advance(self, label: str | None = None, steps: int = 1) -> None:
        """Count ``steps`` done (a bar of steps), and show ``label`` when given."""
        if self.enabled:
            self._bar.update(self._task, advance=steps, **({"description": label} if label else {}))

    def update(self, completed: int, total: int) -> None:
        """Set the count and the total (work whose total is known only as it runs)."""
        if self.enabled:
            self._bar.update(self._task, completed=completed, total=total)

    def __exit__(self, *exc) -> bool:
        if self.enabled:
            self._bar.__exit__(*exc)
        return False


def status(label: str, enabled: bool = True):
    """A spinner with ``label`` on stderr while a step with no count runs (on a terminal; else nothing)."""
    if not (enabled and sys.stderr.isatty()):
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(label)
