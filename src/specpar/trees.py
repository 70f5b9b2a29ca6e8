"""Token trees (SpecInfer, Miao et al. ASPLOS 2024): many candidate continuations of one context, as a tree.

A :class:`TokenTree` hangs off a context (its root stands for the context's end). Node ``i`` holds a draft
``tokens[i]`` at depth ``depths[i]`` (1 for the root's children, at position len(context)), its parent
``parents[i]`` (-1: the root) and ``sources[i]``, the index of the drafter that proposed it. Nodes are stored
parents first (a parent's index is below its children's), so node order is a valid order for one forward pass.

What the verifier needs to stay lossless when sampling lives in ``draws``: under each node (``-1``: the root), the
samples drawn there in the order they were drawn, each as (child node, [V] row it was drawn from). SpecInfer's
multi-step speculative sampling (:func:`specpar.verification.verify_tree`) tests them in that order, replacing the
target's row by norm(max(0, p - q)) after each rejection; that is exact when each draw, given the earlier ones,
follows its stored row. So

* expansion from one drafter draws k_i children *without replacement*: draw j comes from q with the earlier
  draws' tokens removed, and that renormalised row is what is stored (a rejected draw x has p'(x) = 0, so the
  residual never proposes it again);
* merging trees keeps each tree's draws in its own order and appends them after the earlier trees' draws under
  the same node; a token two drafters both proposed becomes one node with two draws (the second is rejected for
  certain, as p'(x) = 0 by then, but its q still updates the residual);
* each draw has its own uniforms: draw j at a position uses stream ``sibling_stream(DRAFT, j)``, and drafter s of a
  merge drafts with :func:`source_decoding` (another seed), so draws of different drafters are independent.

Greedy trees take the top-k_i tokens of the drafter instead (no rows); the verifier follows the child equal to the
target's argmax.

A configuration ``<k1, ..., km>`` (``widths``) gives k_i children to every node at depth i - 1: a full tree of
k1 + k1 k2 + ... + k1...km nodes and depth m.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from specpar.decoding import DRAFT, Decoding, mix64, sample
from specpar.errors import ConfigError

MAX_TREE_NODES = 512  # the most nodes a server scores in one pass (tree attention masks grow with its square)
_SOURCE_SALT = 0x6A09E667F3BCC909


def sibling_stream(stream: int, j: int) -> int:
    """The random stream of the j-th draw under one node: ``stream`` itself for the first (so a tree of one chain
    draws and tests exactly as a chain does), distinct streams for the others."""
    return stream if j == 0 else stream + 16 * j


def source_decoding(decoding: Decoding, source: int) -> Decoding:
    """The decoding drafter ``source`` of a merge drafts with: its own seed, so its draws are independent of the
    other drafters' (source 0 keeps the generation's, so one drafter drafts as it would alone)."""
    if source == 0:
        return decoding
    return dataclasses.replace(decoding, seed=mix64((decoding.seed + source * _SOURCE_SALT) & ((1 << 64) - 1)))


def tree_size(widths: Sequence[int]) -> int:
    """Nodes of the full tree <k1, ..., km>: k1 + k1 k2 + ... + k1 ... km."""
    total, level = 0, 1
    for k in widths:
        level *= k
        total += level
    return total


def parse_tree(text: str) -> tuple[int, ...]:
    """A configuration from the command line: "2,2,1" -> (2, 2, 1) (validated by check_tree)."""
    try:
        widths = tuple(int(w) for w in text.replace(" ", "").split(","))
    except ValueError:
        raise ConfigError(f"a tree is a comma-separated list of widths k1,...,km (e.g. 2,2,1), got {text!r}") from None
    return check_tree(widths)


def check_tree(widths, room: int | None = None, max_nodes: int = MAX_TREE_NODES) -> tuple[int, ...]:
    """``widths`` as a tuple after checking it: a non-empty list of positive integers (zero width is an error),
    no deeper than ``room`` (the positions left in the context) and at most ``max_nodes`` nodes."""
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise ConfigError(f"a tree configuration is a non-empty list of widths <k1, ..., km>, got {widths!r}")
    for i, k in enumerate(widths):
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ConfigError(
                f"tree width k{i + 1} must be a positive integer (each depth needs at least one candidate), got {k!r}"
            )
    if room is not None and len(widths) > room:
        raise ConfigError(
            f"tree depth {len(widths)} reaches past the context: only {room} position(s) are left after the prompt "
            "(shorten the tree or the prompt)"
        )
    n = tree_size(widths)
    if n > max_nodes:
        raise ConfigError(
            f"tree {','.join(map(str, widths))} has {n} nodes, more than the {max_nodes} a server scores in one pass: "
            "use smaller widths or fewer levels"
        )
    return tuple(widths)


class TokenTree:
    """Draft tokens as a tree (see the module docstring). Build with :meth:`add`, :meth:`chain`, :func:`expand`,
    :func:`merge`; read with ``len``, :meth:`children`, :meth:`path`, :meth:`ancestors`."""

    __slots__ = ("tokens", "parents", "depths", "sources", "logq", "draws", "_child")

    def __init__(self):
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.sources: list[int] = []
        self.logq: list[float] = []  # log of the drafter probability of the node's path (0 when greedy: no rows)
        self.draws: dict[int, list[tuple[int, np.ndarray | None]]] = {}  # node (-1: root) -> [(child, q row)]
        self._child: dict[tuple[int, int], int] = {}  # (parent, token) -> child node

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def add(self, parent: int, token: int, source: int = 0, q_row: np.ndarray | None = None) -> int:
        """Record a draw of ``token`` under ``parent`` (from ``q_row`` when sampling); returns its node, a new one
        unless ``parent`` already has a child with this token (shared prefixes merge)."""
        key = (parent, token)
        node = self._child.get(key)
        if node is None:
            node = len(self.tokens)
            self._child[key] = node
            self.tokens.append(token)
            self.parents.append(parent)
            self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
            self.sources.append(source)
            base = 0.0 if parent < 0 else self.logq[parent]
            self.logq.append(base + (math.log(max(float(q_row[token]), 1e-300)) if q_row is not None else 0.0))
        self.draws.setdefault(parent, []).append((node, q_row))
        return node

    @classmethod
    def chain(cls, tokens: Sequence[int], q=None, source: int = 0) -> TokenTree:
        """A tree of one path: ``tokens`` with their [k, V] rows ``q`` (None when greedy)."""
        tree, parent = cls(), -1
        for i, t in enumerate(tokens):
            parent = tree.add(parent, int(t), source, None if q is None else q[i])
        return tree

    def child(self, parent: int, token: int) -> int | None:
        """The child of ``parent`` holding ``token``, or None."""
        return self._child.get((parent, token))

    def children(self, node: int) -> list[int]:
        """Children of ``node`` (-1: the root) in the order first drawn."""
        return list(dict.fromkeys(child for child, _ in self.draws.get(node, ())))

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node`` (empty for the root)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def tokens_of(self, nodes: Sequence[int]) -> list[int]:
        return [self.tokens[n] for n in nodes]

    def follow(self, tokens: Sequence[int], node: int = -1) -> list[int]:
        """The longest path from ``node`` down whose tokens are a prefix of ``tokens`` (the nodes, in order)."""
        out = []
        for t in tokens:
            node = self._child.get((node, t))
            if node is None:
                break
            out.append(node)
        return out

    def leaves(self) -> list[int]:
        return [n for n in range(len(self)) if (n not in self.draws)]

    def most_likely_leaf(self) -> int:
        """The deepest leaf whose path the drafter found most likely (greedy: the first-drawn children's path,
        the drafter's own greedy chain); DSI drafts its next chunk from there."""
        if not self.tokens:
            return -1
        deepest = self.depth
        return max(
            (n for n in self.leaves() if self.depths[n] == deepest),
            key=lambda n: (self.logq[n], [-c for c in self.path(n)]),
        )

    def subtree(self, node: int) -> TokenTree:
        """The descendants of ``node`` as a tree whose root is ``node`` (draws, sources and order kept)."""
        out, index = TokenTree(), {node: -1}
        for n in range(node + 1, len(self)):
            parent = self.parents[n]
            if parent in index:
                index[n] = len(out)
                out.tokens.append(self.tokens[n])
                out.parents.append(index[parent])
                out.depths.append(self.depths[n] - (self.depths[node] if node >= 0 else 0))
                out.sources.append(self.sources[n])
                out.logq.append(self.logq[n] - (self.logq[node] if node >= 0 else 0.0))
                out._child[(index[parent], self.tokens[n])] = index[n]
        for parent, draws in self.draws.items():
            if parent in index:
                out.draws[index[parent]] = [(index[c], q) for c, q in draws]
        return out

    def ancestors(self) -> np.ndarray:
        """[n, n] bool: entry (i, j) is True when node j is node i or one of its ancestors (tree attention)."""
        n = len(self)
        mask = np.zeros((n, n), dtype=bool)
        for i in range(n):
            parent = self.parents[i]
            if parent >= 0:
                mask[i] = mask[parent]
            mask[i, i] = True
        return mask

    def __repr__(self) -> str:
        return f"TokenTree({len(self)} nodes, depth {self.depth})"


def merge(trees: Sequence[TokenTree]) -> TokenTree:
    """One tree from several drafters' trees (or chains): shared prefixes become one node; each tree's draws stay in
    their own order, after the earlier trees' draws under the same node."""
    out = TokenTree()
    for tree in trees:
        attach(out, tree)
    return out


def attach(out: TokenTree, tree: TokenTree, at: int = -1) -> None:
    """Add ``tree``'s nodes and draws to ``out`` below node ``at`` (-1: the root), merging shared prefixes."""
    index = {-1: at}
    for parent, draws in sorted(tree.draws.items()):  # parents first: a node is drawn before its children
        for child, q_row in draws:
            index[child] = out.add(index[parent], tree.tokens[child], tree.sources[child], q_row)


# One expansion level: for each frontier node (-1: the root), what the drafter says there. Greedy: its candidates,
# best first (at least as many as that level's width); sampling: its [V] probability row.
LevelRows = Callable[[TokenTree, list[int]], list]


def expand(
    widths: Sequence[int], level_rows: LevelRows, decoding: Decoding, position: int, source: int = 0
) -> TokenTree:
    """SpecInfer's expansion from one drafter: k_i children under every node at depth i - 1.

    position: the position of the root's children (len(context)). ``level_rows(tree, frontier)`` runs the drafter on
    the frontier nodes (one forward pass per level on a real model). Greedy: the top k_i candidates; sampling: k_i
    draws without replacement, each stored with the renormalised row it was drawn from (module docstring).
    """
    tree, frontier = TokenTree(), [-1]
    for depth, k in enumerate(widths):
        rows = level_rows(tree, frontier)
        new = []
        for parent, row in zip(frontier, rows):
            if decoding.greedy:
                new.extend(tree.add(parent, int(t), source) for t in row[:k])
            else:
                for token, q_row in draw_without_replacement(row, k, decoding, position + depth):
                    new.append(tree.add(parent, token, source, q_row))
        frontier = new
    return tree


def draw_without_replacement(row: np.ndarray, k: int, decoding: Decoding, position: int):
    """k distinct tokens from ``row`` ([V]), each from ``row`` with the earlier ones removed: [(token, that row)]."""
    out, q = [], np.asarray(row, dtype=np.float64)
    for j in range(min(k, int(np.count_nonzero(q)))):
        if j:
            q = q.copy()
            q[out[-1][0]] = 0.0
            q /= q.sum()
        out.append((sample(q, decoding.uniform(sibling_stream(DRAFT, j), position)), q))
    return out
