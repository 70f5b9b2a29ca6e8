"""Token trees (SpecInfer, Miao et al. ASPLOS 2024): many candidate continuations of one context, as a tree.

Node ``i``: a draft ``tokens[i]`` at depth ``depths[i]`` (1: at position len(context)), its parent ``parents[i]``
(-1: the root) and ``sources[i]``, the drafter that proposed it; parents come first (a valid order for one pass).

``draws``: under each node, the samples drawn there in order, as (child, [V] row drawn from). Multi-step speculative
sampling (:func:`specpar.algorithms.verification.verify_tree`) tests them in that order, replacing the target's row
by norm(max(0, p - q)) after each rejection: exact when each draw follows its stored row given the earlier ones. So
expansion draws *without replacement* (storing the renormalised rows), a merge keeps each tree's draws in order, and
each draw has its own uniforms (``sibling_stream``, :func:`source_decoding`). Greedy trees take the drafter's top-k
(no rows). Shapes: widths ``<k1, ..., km>`` (:func:`expand`) or a :class:`BestFirst` budget (:func:`grow_best_first`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from specpar.core.decoding import DRAFT, Decoding, mix64, sample
from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int

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


@dataclasses.dataclass(frozen=True)
class BestFirst:
    """A budgeted, drafter-confidence-guided tree: ``"best:B"`` or ``"best:B:W"`` (:func:`grow_best_first`).

    nodes: B, the node budget. per_pass: W, frontier nodes the drafter expands per forward pass (a larger W: fewer,
    wider passes, the same tree). depth: the deepest a node may be (None: B; lowered near a generation's end).
    """

    nodes: int
    per_pass: int = 1
    depth: int | None = None

    @property
    def max_depth(self) -> int:
        return self.nodes if self.depth is None else min(self.depth, self.nodes)

    def __str__(self) -> str:
        return f"best:{self.nodes}" + (f":{self.per_pass}" if self.per_pass != 1 else "")


def tree_depth(shape) -> int:
    """The deepest node a shape can have (the lookahead of SI and DSI over it)."""
    return shape.max_depth if isinstance(shape, BestFirst) else len(shape)


def limit_depth(shape, k: int):
    """``shape`` no deeper than k (near the end of a generation): widths[:k], or a BestFirst of depth k."""
    return dataclasses.replace(shape, depth=k) if isinstance(shape, BestFirst) else tuple(shape[:k])


def shape_text(shape) -> str:
    """How the command line spells a shape: "2,2,1" or "best:8"."""
    return str(shape) if isinstance(shape, BestFirst) else ",".join(map(str, shape))


def tree_size(widths: Sequence[int]) -> int:
    """Nodes of the full tree <k1, ..., km>: k1 + k1 k2 + ... + k1 ... km."""
    total, level = 0, 1
    for k in widths:
        level *= k
        total += level
    return total


def parse_tree(text: str):
    """A configuration from the command line (validated by check_tree): "2,2,1" -> (2, 2, 1); "best:8" ->
    BestFirst(8); "best:8:2" -> BestFirst(8, per_pass=2)."""
    if text.strip().lower().startswith("best"):
        parts = text.replace(" ", "").split(":")
        try:
            numbers = [int(x) for x in parts[1:]]
        except ValueError:
            numbers = []
        if parts[0].lower() != "best" or not 1 <= len(numbers) <= 2:
            raise ConfigError(
                f"a best-first tree is best:B (B nodes) or best:B:W (W nodes expanded per drafter pass), got {text!r}"
            )
        return check_tree(BestFirst(*numbers))
    try:
        widths = tuple(int(w) for w in text.replace(" ", "").split(","))
    except ValueError:
        raise ConfigError(f"a tree is a comma-separated list of widths k1,...,km (e.g. 2,2,1), got {text!r}") from None
    return check_tree(widths)


def check_tree(widths, room: int | None = None, max_nodes: int = MAX_TREE_NODES):
    """A tree shape after checking it. Widths (a tuple): a non-empty list of positive integers (zero width is an
    error), no deeper than ``room`` (the positions left in the context) and at most ``max_nodes`` nodes. A
    :class:`BestFirst` (or its text, "best:B"): a positive budget of at most ``max_nodes`` nodes (its depth is
    capped by the generation, so ``room`` does not apply)."""
    if isinstance(widths, str) and widths.strip().lower().startswith("best"):
        return parse_tree(widths)
    if isinstance(widths, BestFirst):
        for v, what in ((widths.nodes, "node budget B"), (widths.per_pass, "W (nodes per pass)")):
            if not is_int(v, 1):
                raise ConfigError(f"a best-first tree needs a positive {what}, got {v!r}")
        if widths.nodes > max_nodes:
            raise ConfigError(
                f"tree {widths} has {widths.nodes} nodes, more than the {max_nodes} a server scores in one pass"
            )
        return widths
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise ConfigError(f"a tree configuration is a non-empty list of widths <k1, ..., km>, got {widths!r}")
    for i, k in enumerate(widths):
        if not is_int(k, 1):
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

    def add(
        self, parent: int, token: int, source: int = 0, q_row: np.ndarray | None = None, logq: float | None = None
    ) -> int:
        """Record a draw of ``token`` under ``parent`` (from ``q_row`` when sampling); returns its node, a new one
        unless ``parent`` already has a child with this token (shared prefixes merge). logq: the path's log
        probability when the caller knows it (best-first trees), else from ``q_row``."""
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
            if logq is None:
                logq = base + (math.log(max(float(q_row[token]), 1e-300)) if q_row is not None else 0.0)
            self.logq.append(logq)
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


# One best-first pass: for each node of ``fed`` in ``frontier`` (-1: the root), the drafter's top ``k`` tokens there,
# best first, with their probabilities: [(tokens, probs)]. On a real model, one forward pass over the frontier.
RankedRows = Callable[[TokenTree, list[int], int], list[tuple[Sequence[int], Sequence[float]]]]


def grow_best_first(
    shape: BestFirst, ranked: RankedRows, decoding: Decoding, vocab_size: int, source: int = 0
) -> tuple[TokenTree, TokenTree, int]:
    """A tree of ``shape.nodes`` nodes grown best-first by the drafter's path probability (Sequoia, EAGLE-2): (tree,
    fed, passes).

    Each pass runs the drafter on the best ``per_pass`` candidates of the current best-B set that have no row yet and
    could still matter (a child is never more likely than its parent, so a candidate not strictly above the B-th
    cannot bring a child in), until none is left or after B - 1 passes (a chain of B drafts'). The tree is the best
    B candidates, ties to the older: exact best-first growth whatever W.

    ``fed``: the nodes the drafter was run on, in order (``ranked(fed, frontier, k)`` is called with frontier [-1]
    first, then with the nodes each pass appended); passes: forward passes, the root's included. Greedy: no rows.
    Sampling: each node's row is the point mass on its token; the candidates are a deterministic function of the
    context, so multi-step speculative sampling over them is lossless.
    """
    budget, limit = shape.nodes, shape.max_depth
    # candidate c: value (path log-probability), parent candidate (-1: root), token, depth; fed node or None
    value: list[float] = []
    parent: list[int] = []
    token: list[int] = []
    depth: list[int] = []
    fed_node: dict[int, int] = {}
    fed = TokenTree()

    def propose(under: int, tokens, probs) -> None:
        base, d = (value[under], depth[under]) if under >= 0 else (0.0, 0)
        for t, q in zip(tokens, probs):
            value.append(base + math.log(max(float(q), 1e-300)))
            parent.append(under)
            token.append(int(t))
            depth.append(d + 1)

    def best() -> list[int]:
        return sorted(range(len(value)), key=lambda c: (-value[c], c))[:budget]

    passes = 1
    for tokens, probs in ranked(fed, [-1], budget):
        propose(-1, tokens, probs)
    while passes < budget:  # never more passes than a chain of B drafts (the growth never needs more: B - 1 fed)
        chosen = best()
        floor = value[chosen[-1]] if len(chosen) == budget else -math.inf
        todo = [c for c in chosen if c not in fed_node and depth[c] < limit and value[c] > floor][: shape.per_pass]
        if not todo:
            break
        lo = len(fed)
        for c in todo:
            fed_node[c] = fed.add(fed_node[parent[c]] if parent[c] >= 0 else -1, token[c], source)
        frontier = list(range(lo, len(fed)))
        for c, (tokens, probs) in zip(todo, ranked(fed, frontier, budget)):
            propose(c, tokens, probs)
        passes += 1
    return _best_tree((best(), parent, token, value), None if decoding.greedy else vocab_size, source), fed, passes


def _best_tree(candidates: tuple, vocab_size: int | None, source: int) -> TokenTree:
    """The tree of the ``candidates`` chosen (chosen, parent, token, value: the chosen candidates, parents first,
    and every candidate's parent, token and path log-probability); each node's row the point mass on its token
    (sampling: ``vocab_size`` wide; greedy: None, no row)."""
    chosen, parent, token, value = candidates
    tree, node = TokenTree(), {-1: -1}
    for c in chosen:  # parents first (they rank above their children)
        row = None
        if vocab_size is not None:
            row = np.zeros(vocab_size)
            row[token[c]] = 1.0
        node[c] = tree.add(node[parent[c]], token[c], source, row, logq=value[c])
    return tree
