"""Token trees in SI and DSI (SpecInfer, Miao et al. ASPLOS 2024): the tree side of :mod:`specpar.algorithms.drafts`.

SI scores a whole tree in one target pass (tree attention) and keeps its longest accepted path plus the token after
it. DSI goes on drafting from each tree's most likely leaf, so the drafts it holds are that path: each remembers its
tree and node. At the cursor a draft is tested together with its siblings (multi-step speculative sampling). When a
sibling off the path is accepted, the rows of a tree that holds it verify the rest of its branch: those of a
finished verification at once, or, while the verification that scores it still runs, that task is spared by the
rejection and its branch becomes the drafts; everything drafted after the path is rejected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def add_path(dsi, tree: TokenTree, start: int, first: int) -> int:
    """Add the drafts on the path to ``tree``'s most likely leaf, the first at position ``start`` and index ``first``
    of its window; how many."""
    path = tree.path(tree.most_likely_leaf())
    dsi.drafts += [(start, first, tree, path)] * len(path)
    dsi.tokens += tree.tokens_of(path)
    return len(path)


class Trees:
    """Drafts as token trees. DSI's record of an unverified draft is that of the path it lies on, shared by the
    path's drafts (as :class:`~specpar.algorithms.drafts.Chains` shares a proposal's): ``(start, first, tree, path)``, the
    position of the path's first draft and its index in its lookahead window, the tree, and the path's nodes. The
    draft at position p is node path[p - start] of the tree (whose draws keep the rows it was drawn from), at index
    first + p - start of its window."""

    __slots__ = ()

    def empty(self) -> TokenTree:
        return TokenTree()

    def score(self, g: Generation, tree: TokenTree, decoding: Decoding) -> ScoreTree:
        return ScoreTree(g.context(), tree, decoding)

    def verify(self, g: Generation, tree: TokenTree, scores: Scores) -> int:
        return g.verify_tree(tree, scores.rows)

    def add(self, dsi, tree: TokenTree, taken: int) -> int:
        """Add the path to the tree's most likely leaf, below the ``taken`` tokens the target filled while it was
        drafted; how many drafts (-1 when the tree does not hold those tokens)."""
        start = dsi.drafted_from
        filled = tree.follow(dsi.g.out[start : start + taken])
        if len(filled) < taken:
            return -1
        if taken:
            tree = tree.subtree(filled[-1])
        return add_path(dsi, tree, start + taken, taken)

    def judge(self, dsi, row) -> bool:
        """Test the draft at the cursor with its siblings; True when it (the path DSI drafted on) is accepted."""
        g = dsi.g
        start, first, tree, path = dsi.drafts[0]
        i = len(g.out) - start
        node = path[i]
        child = g.judge_node(tree, tree.parents[node], row, first + i)
        if child == node:
            dsi.drafts.pop(0)
            del dsi.tokens[0]
            return True
        spare = None if child is None else self.go_on_below(dsi)
        dsi.reject(spare)
        if spare is not None:  # its branch becomes the drafts
            tree, start = spare.call.tree, spare.call.start
            below = below_cursor(g, tree, start)
            add_path(dsi, tree.subtree(below), len(g.out), tree.depths[below])
        return False

    def go_on_below(self, dsi) -> Task | None:
        """A sibling off the path was accepted: verify the rest of its branch with the rows of a finished
        verification that holds it, or return the running verification that will (None when neither exists)."""
        g = dsi.g
        for tree, start, rows in dsi.scored:
            if (below := below_cursor(g, tree, start)) is not None:
                g.verify_tree(tree, rows, below)
                return None
        for task in dsi.verifying:
            call = task.call
            if type(call) is ScoreTree and below_cursor(g, call.tree, call.start) is not None:
                return task
        return None

    def verification(self, dsi) -> ScoreTree:
        """One pass over the trees of the drafts that wait, each hung below the previous one's path, below the
        drafts already sent."""
        drafts, tokens, cursor = dsi.drafts, dsi.tokens, len(dsi.g.out)
        i = len(drafts) - dsi.unsent
        out, j = TokenTree(), i
        while j < len(drafts):  # drafts[j] is the first of its path that waits
            start, _, tree, path = drafts[j]
            parent = tree.parents[path[cursor + j - start]]
            at = out.follow(tokens[i:j])[-1] if j > i else -1
            attach(out, tree if parent < 0 else tree.subtree(parent), at)
            j = start + len(path) - cursor  # the next path's first draft
        return ScoreTree(dsi.g.context(tokens[:i]), out, dsi.decoding)

    def rows(self, dsi, task: Task):
        """A finished tree pass's rows along the drafts: at the root and on the drafts' path (the tree is kept for
        its other branches)."""
        call, rows = task.call, task.result.rows
        tree, start = call.tree, task.result.start
        dsi.scored.append((tree, start, rows))
        out, cursor = dsi.g.out, len(dsi.g.out)
        tokens = dsi.tokens  # tokens[i] is at position cursor + i; the tree hangs at start
        path = tree.follow(out[start:] + tokens if start <= cursor else tokens[start - cursor :])
        return [rows[0], *(rows[1 + n] for n in path)]
