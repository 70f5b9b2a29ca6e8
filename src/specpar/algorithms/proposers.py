"""Proposers: what drafts for SI and DSI, behind one small interface.

An algorithm asks a proposer for the drafts after a context and gets back a *draft*: a chain (a
:class:`~specpar.core.calls.Proposal`: k tokens and, when sampling, the [k, V] rows they were drawn from) or a token
tree (a :class:`~specpar.core.trees.TokenTree`, whose draws carry their rows)::

    propose(context, k, decoding) -> Task | Proposal | TokenTree

* A proposer whose work takes time on the runtime (a model: drafting costs forward passes, and in DSI it runs
  while the targets verify) submits *one* runtime task and returns it; the draft is that task's result, once
  ``runtime.wait()`` returns the task. The algorithm may cancel the task (a rejection made the draft useless).
* A proposer whose work costs no time (a lookup in the context, as n-gram / prompt-lookup drafting does) returns
  the draft itself; the algorithm takes it at once, on the same clock tick.

k is the most drafts wanted (a chain of at most k tokens, a tree at most k levels deep): the lookahead, less near
the end of the output. A proposer may return fewer, none included (it found nothing to propose); the algorithm
then goes on with the target alone until its next event. Drafts must carry the rows they were drawn from when
sampling (lossless verification needs q), and a proposer that drafts trees says so (``trees``): SI and DSI verify
trees with tree attention and multi-step speculative sampling (:mod:`specpar.algorithms.tree_drafts`).

Feedback: ``feedback``, when a proposer sets it, is called with (index, accepted) for each of its drafts the target
tested, in the order they were tested: index is the draft's place in its proposal (0: the first; in DSI, counted
from the position the proposal was drafted from), accepted whether it was kept (the acceptance counts an adaptive
lookahead or a drafter's own statistics are built from). It is None by default, which costs nothing.

The proposers here: :class:`ModelDrafter`, a drafter model's servers (one model, or several drafters' trees merged
into one by :class:`~specpar.backends.merged.MergedDrafters`, whose drafters run side by side as one task);
:class:`~specpar.algorithms.hsd_sp.LevelsDrafter`, HSD's levels below the target (HSD-SP). The shape follows HF's
``CandidateGenerator`` (``get_candidates`` and ``update_candidate_strategy``) and vLLM v1's ``spec_decode``
proposers (one class per method behind ``propose``); unlike theirs, a proposal is a task on the runtime, so that
on every clock drafting takes its time and overlaps verification (DSI).
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
    """Drafts after a context (module docstring).

    trees: whether its drafts are token trees (else chains).
    depth: the deepest draft it makes whatever k allows (a tree shape's depth), None when k decides.
    feedback: None, or a callable (index, accepted) told of each of its drafts the target tested.
    """

    trees = False
    depth: int | None = None
    feedback: Callable[[int, bool], None] | None = None

    @abstractmethod
    def propose(self, context: Context, k: int, decoding: Decoding) -> Task | Drafted:
        """At most ``k`` (>= 1) drafts after ``context``: a runtime task whose result is the draft, or the draft
        itself when proposing takes no time."""


class ModelDrafter(Proposer):
    """A drafter model on ``pool`` (on ``runtime``): each proposal is one ``Draft`` call, or with ``tree`` a
    ``DraftTree`` of that shape (widths <k1, ..., km> or best-first), as one task.

    The pool's server may be one model's or :class:`~specpar.backends.merged.MergedDrafters` (several drafters'
    trees merged; it drafts trees only).
    """

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
