"""Token trees in SI and DSI (SpecInfer, Miao et al. ASPLOS 2024): the tree side of :mod:`specpar.algorithms.drafts`.

SI scores a whole tree in one target pass (tree attention) and keeps its longest accepted path plus the token after
it. DSI goes on drafting from each tree's most likely leaf, so the drafts it holds are that path. At the cursor a
draft is tested together with its siblings (multi-step speculative sampling). When a sibling off the path is
accepted, the rows of a tree that holds it verify the rest of its branch: those of a finished verification at once,
or the verification that scores it, still running, is spared by the rejection and its branch becomes the drafts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specpar.algorithms.drafts import ACCEPTED, REJECTED, DraftsView, Verdict
from specpar.core.calls import Scores, ScoreTree
from specpar.core.decoding import Decoding
from specpar.core.trees import TokenTree, attach

if TYPE_CHECKING:
    from specpar.algorithms.generation import Generation
    from specpar.runtimes.base import Task


def below_cursor(g: Generation, tree: TokenTree, start: int) -> int | None:
    """The node of ``tree`` (hanging at position ``start``) the verified output ends on, if it runs through it."""
    out = g.out
    below = tree.follow(out[start:]) if start < len(out) else []
    return below[-1] if below and len(below) == len(out) - start else None


def add_path(view: DraftsView, tree: TokenTree, start: int, first: int) -> int:
    """Add the drafts on the path to ``tree``'s most likely leaf, the first at position ``start`` and index ``first``
    of its window; how many."""
    path = tree.path(tree.most_likely_leaf())
    return view.pending.add((start, first, tree, path), tree.tokens_of(path))


class Trees:
    """Drafts as token trees. :class:`~specpar.algorithms.drafts.Pending`'s record of an unverified draft is its
    path's, ``(start, first, tree, path)``: the position of the path's first draft and its index in its lookahead
    window, the tree, the path's nodes. The draft at position p is node path[p - start], at index first + p - start."""

    __slots__ = ()

    def empty(self) -> TokenTree:
        return TokenTree()

    def score(self, g: Generation, tree: TokenTree, decoding: Decoding) -> ScoreTree:
        return ScoreTree(g.context(), tree, decoding)

    def verify(self, g: Generation, tree: TokenTree, scores: Scores) -> int:
        return g.verify_tree(tree, scores.rows)

    def add(self, view: DraftsView, tree: TokenTree, start: int, taken: int) -> int:
        """Add the path to the tree's most likely leaf, below the ``taken`` tokens the target filled while it was
        drafted; how many drafts (-1 when the tree does not hold those tokens)."""
        filled = tree.follow(view.g.out[start : start + taken])
        if len(filled) < taken:
            return -1
        if taken:
            tree = tree.subtree(filled[-1])
        return add_path(view, tree, start + taken, taken)

    def test(self, view: DraftsView, row) -> Verdict:
        """Test the draft at the cursor with its siblings: accepted when it (the path DSI drafted on) is; rejected
        when every draw failed, or when a sibling off the path was accepted (keeping the running verification
        that scores its branch, if one does)."""
        g = view.g
        start, first, tree, path = view.pending.origins[0]
        i = len(g.out) - start
        node = path[i]
        child = g.test_node(tree, tree.parents[node], row, first + i)
        if child == node:
            return ACCEPTED
        return REJECTED if child is None else self.below_sibling(view)

    def below_sibling(self, view: DraftsView) -> Verdict:
        """A sibling off the path was accepted: verify the rest of its branch with the rows of a finished
        verification that holds it (rejected, nothing kept), or keep the running verification that will (or
        neither, when none holds it)."""
        g = view.g
        for tree, start, rows in view.scored:
            if (below := below_cursor(g, tree, start)) is not None:
                g.verify_tree(tree, rows, below)
                return REJECTED
        for task in view.verifying:
            call = task.call
            if type(call) is ScoreTree and below_cursor(g, call.tree, call.start) is not None:
                return Verdict(False, keep=task)
        return REJECTED

    def follow(self, view: DraftsView, task: Task) -> None:
        """After a rejection that kept ``task`` running: the accepted sibling's branch in its tree becomes the
        drafts."""
        tree, start, g = task.call.tree, task.call.start, view.g
        below = below_cursor(g, tree, start)
        add_path(view, tree.subtree(below), len(g.out), tree.depths[below])

    def verification(self, view: DraftsView) -> ScoreTree:
        """One pass over the trees of the drafts that wait, each hung below the previous one's path, below the
        drafts already sent."""
        pending, cursor = view.pending, len(view.g.out)
        origins, tokens = pending.origins, pending.tokens
        i = len(origins) - pending.unsent
        out, j = TokenTree(), i
        while j < len(origins):  # origins[j] is the first of its path that waits
            start, _, tree, path = origins[j]
            parent = tree.parents[path[cursor + j - start]]
            at = out.follow(tokens[i:j])[-1] if j > i else -1
            attach(out, tree if parent < 0 else tree.subtree(parent), at)
            j = start + len(path) - cursor  # the next path's first draft
        return ScoreTree(view.g.context(tokens[:i]), out, view.g.decoding)

    def rows(self, view: DraftsView, task: Task):
        """A finished tree pass's rows along the drafts: at the root and on the drafts' path (the tree is kept for
        its other branches)."""
        call, rows = task.call, task.result.rows
        tree, start = call.tree, task.result.start
        view.scored.append((tree, start, rows))
        out, cursor = view.g.out, len(view.g.out)
        tokens = view.pending.tokens  # tokens[i] is at position cursor + i; the tree hangs at start
        path = tree.follow(out[start:] + tokens if start <= cursor else tokens[start - cursor :])
        return [rows[0], *(rows[1 + n] for n in path)]
