"""The server contract: the two calls an algorithm sends to a model server, and their results.

A server is a model instance with its own KV cache (or, for simulated models, its
own hash cache). Calls carry the whole context; the server reuses the longest
common prefix with what it saw last and processes only the rest.

Positions are absolute indices into the token sequence (prompt included).
Calls are treated as immutable once submitted (plain slotted classes rather
than frozen dataclasses: a call is built per task, and frozen construction costs 2.5x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specpar.decoding import Decoding


@dataclass(slots=True)
class Draft:
    """Ask a drafter for ``k`` tokens continuing ``context`` (positions len(context) .. len(context)+k-1)."""

    context: tuple[int, ...]
    k: int
    decoding: Decoding
    kind = "draft"


class Score:
    """Ask a target for its next-token distribution at the last ``n_drafts + 1`` positions of the sequence.

    ``context`` ends with ``n_drafts`` unverified draft tokens; one forward pass
    returns rows for positions ``start = len(context) - n_drafts .. end = len(context)``
    (n_drafts + 1 rows: one per draft plus the one after the last draft).
    """

    __slots__ = ("context", "n_drafts", "decoding", "start", "end")
    kind = "verify"

    def __init__(self, context: tuple[int, ...], n_drafts: int, decoding: Decoding):
        self.context = context
        self.n_drafts = n_drafts
        self.decoding = decoding
        self.end = len(context)  # position of the last row returned
        self.start = self.end - n_drafts  # position of the first row returned

    def __repr__(self) -> str:
        return f"Score(context=<{len(self.context)} tokens>, n_drafts={self.n_drafts}, decoding={self.decoding})"

    def __eq__(self, other) -> bool:
        return type(other) is Score and (self.context, self.n_drafts, self.decoding) == (
            other.context,
            other.n_drafts,
            other.decoding,
        )

    __hash__ = None


@dataclass(slots=True)
class Proposal:
    """A drafter's answer to :class:`Draft`.

    tokens: the k draft tokens.
    q: [k, V] drafter probabilities each token was sampled from, or None when greedy.
    """

    tokens: list[int]
    q: np.ndarray | None = None


@dataclass(slots=True)
class Scores:
    """A target's answer to :class:`Score`: one row per position from ``start``.

    rows: greedy -> list of argmax token ids; sampling -> [n+1, V] probability array.
    """

    start: int
    rows: Sequence

    @property
    def end(self) -> int:
        """Position of the last row."""
        return self.start + len(self.rows) - 1
