"""The server contract: the calls an algorithm sends to a model server, and their results.

A server is a model instance with its own cache; it reuses the longest common prefix of a call's context with what it
saw last. Positions are absolute indices into the token sequence (prompt included). Calls are immutable once
submitted (plain slotted classes: a call is built per task, and a frozen dataclass costs 2.5x to build).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np

from specpar.core.decoding import Decoding
from specpar.core.trees import BestFirst, tree_size


class Context(Sequence):
    """A call's token sequence: the first ``n`` tokens of ``base``, a shared list that only grows (a generation's
    verified tokens), then the tuple ``tail`` (unverified drafts). O(len(tail)) to build, so a run's memory grows
    linearly with its length. Behaves as ``tuple(self)`` (slices are tuples); ``context + tokens`` extends the tail.
    """

    __slots__ = ("base", "n", "tail", "_len")

    def __init__(self, base: list[int], n: int, tail: tuple[int, ...] = ()):
        self.base = base
        self.n = n
        self.tail = tail
        self._len = n + len(tail)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i):
        n = self.n
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            if step != 1:
                return tuple(self)[i]
            if stop <= n:
                return tuple(self.base[start:stop])
            if start >= n:
                return self.tail[start - n : stop - n]
            return tuple(self.base[start:n]) + self.tail[: stop - n]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("context index out of range")
        return self.base[i] if i < n else self.tail[i - n]

    def __iter__(self):
        yield from islice(self.base, self.n)
        yield from self.tail

    def __add__(self, tokens) -> Context:
        return Context(self.base, self.n, self.tail + tuple(tokens))

    def __eq__(self, other) -> bool:
        if not isinstance(other, (Context, tuple, list)) or len(other) != self._len:
            return NotImplemented if not isinstance(other, (Context, tuple, list)) else False
        if isinstance(other, Context) and other.base is self.base:
            m = min(self.n, other.n)  # both hold base[:m]: compare only what follows
            return self[m:] == other[m:]
        return tuple(self) == tuple(other)

    __hash__ = None

    def tokens(self) -> tuple[int, ...]:
        """The whole sequence as a tuple (an O(len) copy)."""
        return tuple(self.base[: self.n]) + self.tail

    def __repr__(self) -> str:
        return f"Context(<{self.n} verified + {len(self.tail)} draft tokens>)"


def as_context(tokens) -> Context:
    """``tokens`` as a Context (a Context is returned as is; any other sequence is copied once)."""
    return tokens if isinstance(tokens, Context) else Context(list(tokens), len(tokens))


@dataclass(slots=True)
class Draft:
    """Ask a drafter for ``k`` tokens continuing ``context`` (positions len(context) .. len(context)+k-1)."""

    context: Context | tuple[int, ...]
    k: int
    decoding: Decoding
    kind = "draft"
    extra_tokens = 0  # tokens the passes feed beyond the context and one per pass (an expanded tree's other nodes)


class Score:
    """Ask a target for its rows at the last ``n_drafts + 1`` positions: ``context`` ends with ``n_drafts`` drafts,
    and one forward pass returns rows for positions ``start = len(context) - n_drafts .. end = len(context)``."""

    __slots__ = ("context", "n_drafts", "decoding", "start", "end")
    kind = "verify"
    extra_tokens = 0  # tokens scored beyond the context (a tree's nodes: ScoreTree)

    def __init__(self, context: Context | tuple[int, ...], n_drafts: int, decoding: Decoding):
        self.context = context
        self.n_drafts = n_drafts
        self.decoding = decoding
        self.end = len(context)  # position of the last row returned
        self.start = self.end - n_drafts  # position of the first row returned

    def __repr__(self) -> str:
        return f"Score(context=<{len(self.context)} tokens>, n_drafts={self.n_drafts}, decoding={self.decoding})"

    def __eq__(self, other) -> bool:
        mine = (self.context, self.n_drafts, self.decoding)
        return type(other) is Score and mine == (other.context, other.n_drafts, other.decoding)

    __hash__ = None


@dataclass(slots=True)
class Proposal:
    """A drafter's answer to :class:`Draft`: the k draft tokens, and the [k, V] drafter probabilities each was
    sampled from (``q``; None when greedy)."""

    tokens: list[int]
    q: np.ndarray | None = None


@dataclass(slots=True)
class Scores:
    """A target's answer to :class:`Score` (or :class:`ScoreTree`): one row per position from ``start``.

    rows: greedy -> argmax token ids (ints); sampling -> [n+1, V] float64 probabilities (the processed target's).
    When ``decoding.logprobs`` is not None, greedy rows are :class:`specpar.core.logits_processors.LoggedArgmax`
    (the argmax, an ``int``, with ``.logprobs``: the [V] log-softmax of the processed logits, -inf where removed);
    sampling rows are the same (their logarithm is the log-probability row).
    :func:`specpar.core.logits_processors.rows` makes both forms from raw logits; a backend computing rows natively
    must give the same values. Drafters' answers never carry log-probabilities.
    """

    start: int
    rows: Sequence

    @property
    def end(self) -> int:
        """Position of the last row."""
        return self.start + len(self.rows) - 1


class DraftTree:
    """Ask a drafter for a token tree after ``context``: ``shape`` is widths <k1, ..., km> (one pass per level) or a
    :class:`specpar.core.trees.BestFirst` budget. ``source``: the drafter's index in a merge. ``k`` and
    ``extra_tokens`` price the passes as a chain's: widths exactly; a best-first tree as when the drafter is sure.
    """

    __slots__ = ("context", "shape", "decoding", "source", "k", "extra_tokens")
    kind = "draft"

    def __init__(self, context: Context | tuple[int, ...], shape, decoding: Decoding, source=0):
        self.context = context
        self.shape = shape
        self.decoding = decoding
        self.source = source
        if isinstance(shape, BestFirst):
            self.k = shape.max_depth
            self.extra_tokens = (shape.per_pass - 1) * (self.k - 1)
            return
        self.k = len(shape)  # forward passes, as for a chain of k drafts
        # the passes after the first feed levels 1 .. m-1: their nodes beyond the one token a chain's pass feeds
        self.extra_tokens = sum(tree_size(shape[:i]) - tree_size(shape[: i - 1]) - 1 for i in range(1, len(shape)))

    def __repr__(self) -> str:
        return f"DraftTree(context=<{len(self.context)} tokens>, shape={self.shape}, source={self.source})"


class ScoreTree:
    """Ask a target for its rows at every node of a token tree hanging off ``context``, in one forward pass.

    Rows (a :class:`Scores` from ``start = len(context)``): rows[0] at the root, rows[1 + i] after node i; priced as
    a chain of the same node count. ``end``: the position of the deepest path's last row.
    """

    __slots__ = ("context", "tree", "decoding", "n_drafts", "extra_tokens", "start", "end")
    kind = "verify"

    def __init__(self, context: Context | tuple[int, ...], tree, decoding: Decoding):
        self.context = context
        self.tree = tree
        self.decoding = decoding
        self.n_drafts = self.extra_tokens = len(tree)
        self.start = len(context)
        self.end = self.start + tree.depth

    def __repr__(self) -> str:
        return f"ScoreTree(context=<{len(self.context)} tokens>, {self.tree!r})"
