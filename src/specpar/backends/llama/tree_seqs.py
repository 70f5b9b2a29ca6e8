"""Tree attention on llama.cpp: a token tree's nodes as sequence ids in one KV cache.

llama.cpp masks attention by sequence: a query token attends to the cached cells that hold its (first) sequence
id at positions up to its own. A token tree maps onto that as a path decomposition: a node's first child takes its
parent's id, every other child a new one (a tree of L leaves uses L ids, the context's id 0 among them), and each id
is made visible in the cells of the context and of its node's ancestors. A node then sees exactly the context, its
ancestors and itself, at position len(context) + depth - 1. :meth:`TreeSeqs.whole` (a ``ScoreTree``, one pass) feeds
a node in its own id and every id of its subtree, the context in every id; :meth:`TreeSeqs.growing` (a
``DraftTree``, a level at a time) feeds a node in its own id, a new id first shared with the cells of the context
and its parent's path (``llama_memory_seq_cp``). Leaving the ``with`` block drops every cell of the tree and every id
but 0, so the cache holds the context alone, in position order (:mod:`specpar.backends.llama.context`).
"""

from __future__ import annotations

from specpar.backends.llama.context import LlamaContext
from specpar.core.errors import ConfigError
from specpar.core.trees import TokenTree


class TreeSeqs:
    """Sequence ids of a token tree's nodes in ``ctx``, whose cache holds the context's first ``cached`` tokens;
    the tree hangs off a context of ``n_context`` tokens (its root's children sit at position n_context)."""

    def __init__(self, ctx: LlamaContext, n_context: int, whole: bool):
        self.ctx = ctx
        self.n_context = n_context
        self.whole = whole
        self.own: list[int] = []  # node -> its own sequence id
        self.sets: list[tuple[int, ...]] = []  # node -> the ids it is fed in (whole: its subtree's too)
        self._extended: set[int] = set()  # nodes (-1: root) whose first child has taken their id
        self._next = 1

    @classmethod
    def whole(cls, ctx: LlamaContext, tree: TokenTree, cached: int, n_context: int) -> TreeSeqs:
        """Ids for every node of ``tree`` at once; the cached context cells made visible to all of them."""
        seqs = cls(ctx, n_context, whole=True)
        for i in range(len(tree)):
            seqs.own.append(seqs._assign(tree.parents[i]))
        subtree = [{s} for s in seqs.own]
        for i in range(len(tree) - 1, -1, -1):  # children after parents: gather bottom-up
            p = tree.parents[i]
            if p >= 0:
                subtree[p] |= subtree[i]
        seqs.sets = [(seqs.own[i], *sorted(subtree[i] - {seqs.own[i]})) for i in range(len(tree))]
        for s in range(1, seqs._next):
            ctx.share(0, s, 0, cached)
        return seqs

    @classmethod
    def growing(cls, ctx: LlamaContext, n_context: int) -> TreeSeqs:
        """Ids given as nodes are added (:meth:`add`), for a cache that holds the whole context."""
        return cls(ctx, n_context, whole=False)

    def add(self, tree: TokenTree, lo: int, hi: int) -> None:
        """Ids for nodes lo .. hi-1 of ``tree`` (their parents fed already): a new id is shared with the cells of
        the context and the parent's path first."""
        for i in range(lo, hi):
            parent = tree.parents[i]
            own = self._assign(parent)
            parent_own = 0 if parent < 0 else self.own[parent]
            if own != parent_own:
                parent_pos = self.n_context - 1 + (tree.depths[parent] if parent >= 0 else 0)
                self.ctx.share(parent_own, own, 0, parent_pos + 1)
            self.own.append(own)
            self.sets.append((own,))

    def _assign(self, parent: int) -> int:
        if parent not in self._extended:
            self._extended.add(parent)
            return 0 if parent < 0 else self.own[parent]
        if self._next >= self.ctx.n_seq:
            raise ConfigError(
                f"a token tree with more than {self.ctx.n_seq} leaves does not fit the llama.cpp server's "
                f"{self.ctx.n_seq} sequences: use a narrower tree"
            )
        self._next += 1
        return self._next - 1

    def of(self, node: int) -> tuple[int, ...]:
        """The ids node ``node`` is fed in (its own first: llama.cpp masks by a token's first id)."""
        return self.sets[node]

    def linear(self) -> tuple[int, ...]:
        """The ids of a context token fed with the tree (every id: every node sees the context)."""
        return tuple(range(self._next))

    def __enter__(self) -> TreeSeqs:
        return self

    def __exit__(self, *exc) -> None:
        self.ctx.keep(self.n_context)
        for s in range(1, self._next):
            self.ctx.drop_sequence(s)
