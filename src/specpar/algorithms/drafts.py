"""Where SI and DSI differ for chains of drafts and for token trees: one small strategy each.

:class:`Chains` here, :class:`~specpar.algorithms.tree_drafts.Trees` beside it. Both answer the same questions, so that
:func:`~specpar.algorithms.si.si` and :class:`~specpar.algorithms.dsi.DSI` are written once:

* SI: ``empty()`` (the draft when no draft is worth making), ``score(g, draft, decoding)`` (the target's call that
  scores a whole draft in one pass) and ``verify(g, draft, scores)`` (the tokens it keeps);
* DSI, one draft at a time: ``add(dsi, draft, taken)`` (add a finished draft's drafts and their tokens, below the
  ``taken`` positions the target filled meanwhile), ``judge(dsi, row)`` (test the draft at the cursor),
  ``verification(dsi)`` (the call that verifies the drafts waiting for a server) and, for trees only,
  ``rows(dsi, task)`` (a finished tree verification's rows along the drafts).

``dsi`` is the generation's :class:`~specpar.algorithms.dsi.DSI` state (not annotated: dsi.py imports the strategies).
Each strategy also says what DSI records of an unverified draft (its class docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specpar.core.calls import Proposal, Score, Scores
from specpar.core.decoding import Decoding

if TYPE_CHECKING:
    from specpar.algorithms.generation import Generation


class Chains:
    """Drafts as chains (:class:`~specpar.core.calls.Proposal`), verified by (speculative) sampling one by one.

    DSI's record of an unverified draft is that of the proposal it came from, ``(start, q)``: the position of the
    proposal's first draft and its [k, V] rows (None when greedy). The draft at position p is its (p - start)-th:
    q[p - start] is the row it was drawn from, p - start its index in its lookahead window. A proposal's drafts share
    its record: DSI drafts about five per output token (the drafter runs ahead, and a rejection drops what it
    drafted), and a tuple for each cost 1.5% of the simulator's instructions.
    """

    __slots__ = ()

    def empty(self) -> Proposal:
        return Proposal([])

    def score(self, g: Generation, proposal: Proposal, decoding: Decoding) -> Score:
        return Score(g.context(proposal.tokens), len(proposal.tokens), decoding)

    def verify(self, g: Generation, proposal: Proposal, scores: Scores) -> int:
        return g.verify(proposal, scores)

    def add(self, dsi, proposal: Proposal, taken: int) -> int:
        """Add the chain's drafts after the ``taken`` tokens the target filled while it was drafted; how many
        (-1 when the chain contradicts those tokens)."""
        tokens = proposal.tokens
        if taken:
            start = dsi.drafted_from
            if tokens[:taken] != dsi.g.out[start : start + taken]:
                return -1
            tokens = tokens[taken:]
        dsi.drafts += [(dsi.drafted_from, proposal.q)] * len(tokens)
        dsi.tokens += tokens
        return len(tokens)

    def judge(self, dsi, row) -> bool:
        """Test the draft at the cursor against the target's row there; a rejection drops what depends on it."""
        start, q = dsi.drafts.pop(0)
        g = dsi.g
        i = len(g.out) - start  # its index in its window
        if g.judge(dsi.tokens.pop(0), q if q is None else q[i], row, i):
            return True
        dsi.reject()
        return False

    def verification(self, dsi) -> Score:
        """One pass over every unverified draft that scores the ``unsent`` last ones."""
        return Score(dsi.g.context(dsi.tokens), dsi.unsent, dsi.decoding)
