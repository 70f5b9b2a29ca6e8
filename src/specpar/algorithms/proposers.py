"""Proposers: what drafts for SI and DSI, behind one small interface.

An algorithm asks a proposer for the drafts after a context and gets back a *draft*: a chain (a
:class:`~specpar.core.calls.Proposal`: k tokens and, when sampling, the [k, V] rows they were drawn from) or a token
tree (a :class:`~specpar.core.trees.TokenTree`, whose draws carry their rows)::

    propose(context, k, decoding) -> Task | Proposal | TokenTree

A proposer whose work takes time (a model) submits *one* runtime task and returns it (the algorithm may cancel it);
one whose work costs nothing (n-gram lookup) returns the draft itself, taken on the same clock tick. k is the most
drafts wanted (the lookahead, less near the end); a proposer may return fewer, none included. Drafts carry the rows
they were drawn from when sampling (lossless verification needs q). ``feedback``, when set, is told (index in its
proposal, accepted) of each draft the target tested, in order (what an adaptive lookahead counts).

The shape follows HF's ``CandidateGenerator`` and vLLM v1's ``spec_decode`` proposers; unlike theirs, a proposal is a
task on the runtime, so that on every clock drafting takes its time and overlaps verification (DSI).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from specpar.core.calls import Context, Draft, DraftTree, Proposal
from specpar.core.decoding import Decoding
from specpar.core.trees import TokenTree, check_tree, limit_depth, tree_depth
from specpar.runtimes.base import Pool, Runtime, Task

Drafted = Proposal | TokenTree  # a draft: a chain or a token tree


class Proposer(ABC):
    """Drafts after a context. trees: whether its drafts are token trees; depth: the deepest draft it makes whatever
    k allows (a tree shape's depth), None when k decides; feedback: None, or told (index, accepted) of each draft."""

    trees = False
    depth: int | None = None
    feedback: Callable[[int, bool], None] | None = None

    @abstractmethod
    def propose(self, context: Context, k: int, decoding: Decoding) -> Task | Drafted:
        """At most ``k`` (>= 1) drafts after ``context``: a runtime task whose result is the draft, or the draft
        itself when proposing takes no time."""


class ModelDrafter(Proposer):
    """A drafter model on ``pool`` (on ``runtime``): each proposal is one ``Draft`` call, or with ``tree`` a
    ``DraftTree`` of that shape, as one task. The server may be :class:`~specpar.backends.merged.MergedDrafters`."""

    def __init__(self, runtime: Runtime, pool: Pool, tree=None):
        self.runtime = runtime
        self.pool = pool
        self.tree = tree
        self.call = Draft  # the call for k drafts after a context: (context, k, decoding)
        if tree is not None:
            self.tree = check_tree(tree)
            self.trees = True
            self.depth = tree_depth(self.tree)
            self.call = self.tree_call

    def tree_call(self, context: Context, k: int, decoding: Decoding) -> DraftTree:
        """The call that asks for the tree, no deeper than k."""
        return DraftTree(context, limit_depth(self.tree, k), decoding)

    def propose(self, context: Context, k: int, decoding: Decoding) -> Task:
        call = self.call  # an attribute, not a method: read it, then call it (a method lookup would not specialize)
        return self.runtime.submit(self.pool, call(context, k, decoding))

    def __repr__(self) -> str:
        return f"ModelDrafter({self.pool.name}{'' if self.tree is None else f', tree={self.tree}'})"


def lookahead_of(proposer: Proposer, lookahead: int) -> int:
    """The lookahead an algorithm uses with ``proposer``: a tree shape's depth where it has one."""
    return lookahead if proposer.depth is None else proposer.depth


def wait_for(runtime: Runtime, proposing: Task | Drafted) -> Drafted:
    """The draft ``propose`` returned, once it is there: for an algorithm with nothing else in flight (SI)."""
    if type(proposing) is not Task:
        return proposing
    done = runtime.wait()
    assert done is proposing, "wait_for() needs an otherwise idle runtime"
    return done.result
