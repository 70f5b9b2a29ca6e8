"""Where SI and DSI differ for chains of drafts and for token trees: one small strategy each, and what DSI shares
with them.

:class:`Chains` here, :class:`~specpar.algorithms.tree_drafts.Trees` beside it, answer the same questions, so that
:func:`~specpar.algorithms.si.si` and :class:`~specpar.algorithms.dsi.DSI` are written once:

* SI: ``empty()`` (no draft), ``score(g, draft, decoding)`` (the target's call that scores a whole draft in one
  pass) and ``verify(g, draft, scores)`` (the tokens it keeps);
* DSI, on a :class:`DraftsView` of its state: ``add(view, draft, start, taken)`` (add a draft drafted from position
  ``start``, below the ``taken`` positions the target filled meanwhile), ``test(view, row)`` (test the draft at the
  cursor: a :class:`Verdict`), ``verification(view)`` (the call that verifies the drafts waiting for a server) and,
  for trees only, ``rows(view, task)`` and ``follow(view, task)``.

A strategy never rejects: it says what the target's row decided, and DSI acts on the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specpar.core.calls import Proposal, Score, Scores
from specpar.core.decoding import Decoding

if TYPE_CHECKING:
    from specpar.algorithms.generation import Generation
    from specpar.runtimes.base import Task


class Pending:
    """DSI's unverified drafts, at positions cursor (len(g.out)), cursor + 1, ...

    tokens: their tokens. origins: for each, the record of the proposal it came from (the strategy's: :class:`Chains`,
        :class:`Trees`). unsent: the last ``unsent`` drafts wait for a verification server. The two lists change
        together, only here.
    """

    __slots__ = ("tokens", "origins", "unsent")

    def __init__(self):
        self.tokens: list[int] = []
        self.origins: list = []
        self.unsent = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, origin, tokens) -> int:
        """Append ``tokens``, all from the proposal ``origin`` records; how many."""
        self.origins += [origin] * len(tokens)
        self.tokens += tokens
        return len(tokens)

    def accept_first(self) -> None:
        """The draft at the cursor was accepted: it is output now."""
        del self.origins[0]
        del self.tokens[0]

    def clear(self) -> None:
        self.tokens.clear()
        self.origins.clear()
        self.unsent = 0


@dataclass(slots=True)
class DraftsView:
    """What a strategy sees of a DSI generation: the output, the drafts, the verifications in flight (ordered by
    their first row's position) and, for trees, the finished tree verifications since the last rejection, as
    (tree, start position, rows). DSI owns each; a strategy reads them, and adds drafts and scored trees."""

    g: Generation
    pending: Pending
    verifying: list
    scored: list


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the target's row at the cursor decided of the draft there: ``accepted``, or rejected; a rejection
    may ``keep`` one verification running (a token tree's: it scores the branch of an accepted sibling)."""

    accepted: bool
    keep: Task | None = None


ACCEPTED = Verdict(True)
REJECTED = Verdict(False)


class Chains:
    """Drafts as chains (:class:`~specpar.core.calls.Proposal`), verified by (speculative) sampling one by one.

    :class:`Pending`'s record of an unverified draft is its proposal's, ``(start, q)``: the position of its first
    draft and its [k, V] rows (None when greedy); the draft at position p is its (p - start)-th. (One record per
    proposal, not per draft: a tuple for each cost 1.5% of the simulator's instructions.)
    """

    __slots__ = ()

    def empty(self) -> Proposal:
        return Proposal([])

    def score(self, g: Generation, proposal: Proposal, decoding: Decoding) -> Score:
        return Score(g.context(proposal.tokens), len(proposal.tokens), decoding)

    def verify(self, g: Generation, proposal: Proposal, scores: Scores) -> int:
        return g.verify(proposal, scores)

    def add(self, view: DraftsView, proposal: Proposal, start: int, taken: int) -> int:
        """Add the chain's drafts after the ``taken`` tokens the target filled while it was drafted; how many
        (-1 when the chain contradicts those tokens)."""
        tokens = proposal.tokens
        if taken:
            if tokens[:taken] != view.g.out[start : start + taken]:
                return -1
            tokens = tokens[taken:]
        return view.pending.add((start, proposal.q), tokens)

    def test(self, view: DraftsView, row) -> Verdict:
        """Test the draft at the cursor against the target's row there."""
        pending, g = view.pending, view.g
        start, q = pending.origins[0]
        i = len(g.out) - start  # its index in its window
        return ACCEPTED if g.test_draft(pending.tokens[0], q if q is None else q[i], row, i) else REJECTED

    def verification(self, view: DraftsView) -> Score:
        """One pass over every unverified draft that scores the ``unsent`` last ones."""
        g, pending = view.g, view.pending
        return Score(g.context(pending.tokens), pending.unsent, g.decoding)
