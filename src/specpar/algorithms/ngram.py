"""Prompt lookup (n-gram) drafting: drafts copied from where the context's last n tokens appeared before.

The matcher (Saxena's prompt lookup decoding; HF's ``prompt_lookup_num_tokens``, vLLM's ``ngram``): take the last n
tokens of the context (prompt + output so far + drafts), n from ``max_n`` down to ``min_n``; every earlier place
those n tokens occur proposes the k tokens that followed them there. The most recent occurrence comes first, and the
first n that matches decides a chain; for a token tree, distinct continuations are gathered (longer n first, each
most recent first) until ``branches`` of them. A lookup costs no model pass: :class:`NgramMatcher` indexes the
n-grams of the verified tokens, which only grow during a generation.

Drafts are deterministic, so when sampling each is a *point-mass proposal* (q is 1 at its token): rejection sampling
accepts draft x with probability p(x) and otherwise resamples from p without x, exactly the target's law (for
siblings in a tree, SpecInfer's multi-step sampling removes each rejected sibling in turn).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specpar.algorithms.proposers import Proposer
from specpar.core.calls import Context, Proposal
from specpar.core.config import NGRAM_SIZES, check_ngram_sizes
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError
from specpar.core.trees import BestFirst, TokenTree, check_tree, tree_depth, tree_size

DEFAULT_MIN_N, DEFAULT_MAX_N = NGRAM_SIZES


class NgramMatcher:
    """Continuations of a context's last n-gram found earlier in it, n in [min_n, max_n]. Its index maps, for each n,
    the n-gram ending at each position ``e`` of one ``base`` list (``base[e - n:e]``) to those ends, increasing."""

    def __init__(self, min_n: int = DEFAULT_MIN_N, max_n: int = DEFAULT_MAX_N):
        self.min_n, self.max_n = check_ngram_sizes(min_n, max_n)
        self._base: list[int] | None = None
        self._indexed = 0  # n-grams ending at positions <= this are in the index
        self._ends: dict[int, dict[tuple[int, ...], list[int]]] = {}

    def _index(self, base: list[int], upto: int) -> None:
        if base is not self._base or upto < self._indexed:  # another generation (or a base that shrank)
            self._base, self._indexed = base, 0
            self._ends = {n: {} for n in range(self.min_n, self.max_n + 1)}
        for e in range(self._indexed + 1, upto + 1):
            for n, ends in self._ends.items():
                if e >= n:
                    ends.setdefault(tuple(base[e - n : e]), []).append(e)
        self._indexed = max(self._indexed, upto)

    def continuations(self, context: Sequence[int], k: int, branches: int = 1) -> list[list[int]]:
        """Up to ``branches`` distinct continuations of at most ``k`` tokens, best first (one that starts an earlier
        one is skipped); none when the last n tokens occur nowhere earlier."""
        ctx = context if isinstance(context, Context) else Context(list(context), len(context))
        total = len(ctx)
        self._index(ctx.base, ctx.n)
        out: list[list[int]] = []
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            suffix = tuple(ctx[total - n :])
            # ends among the drafts first (the most recent), then the verified tokens' from the index
            tail = [e for e in range(total - 1, max(ctx.n, n - 1), -1) if tuple(ctx[e - n : e]) == suffix]
            for e in tail + [e for e in reversed(self._ends[n].get(suffix, ())) if e < total]:
                found = list(ctx[e : e + k])
                if any(have[: len(found)] == found for have in out):
                    continue
                out.append(found)
                if len(out) == branches:
                    return out
        return out


def chain_proposal(tokens: Sequence[int], decoding: Decoding, width: int) -> Proposal:
    """Deterministic drafts as a chain: q is None when greedy, else one point-mass row [width] per draft."""
    return Proposal(list(tokens), None if decoding.greedy else point_masses(tokens, width))


def tree_proposal(
    continuations: Sequence[Sequence[int]], decoding: Decoding, width: int, max_nodes: int | None = None
) -> TokenTree:
    """Deterministic drafts as a token tree: each continuation a path from the root (shared prefixes one node, the
    earlier one's child drawn first), at most ``max_nodes`` nodes; point-mass rows when sampling."""
    tree = TokenTree()
    for tokens in continuations:
        node = -1
        rows = None if decoding.greedy else point_masses(tokens, width)
        for i, token in enumerate(tokens):
            child = tree.child(node, token)
            if child is None:
                if max_nodes is not None and len(tree) >= max_nodes:
                    return tree
                child = tree.add(node, int(token), 0, None if rows is None else rows[i])
            node = child
    return tree


def point_masses(tokens: Sequence[int], width: int) -> np.ndarray:
    """[len(tokens), width]: row i is 1 at tokens[i] (a draft that was certain)."""
    rows = np.zeros((len(tokens), width))
    rows[np.arange(len(tokens)), list(tokens)] = 1.0
    return rows


class NgramProposer(Proposer):
    """Drafts by prompt lookup at no cost: a chain of at most k tokens, or with ``tree`` a token tree of the
    continuations found (as deep as the tree's depth, at most as many nodes as its shape).

    width: the target's row width (point-mass rows when sampling). fallback: a proposer that drafts where no n-gram
    matches (it must draft trees where this one does), else the proposal is empty.
    """

    def __init__(self, width: int, min_n: int = DEFAULT_MIN_N, max_n: int = DEFAULT_MAX_N, tree=None, fallback=None):
        self.matcher = NgramMatcher(min_n, max_n)
        self.width = width
        self.trees = tree is not None
        self.depth = None
        self.budget = 1
        if tree is not None:
            shape = check_tree(tree)
            self.depth = tree_depth(shape)
            self.budget = shape.nodes if isinstance(shape, BestFirst) else tree_size(shape)
        if fallback is not None and fallback.trees != self.trees:
            raise ConfigError("the n-gram proposer and the drafter behind it must both draft chains or both trees")
        self.fallback = fallback

    def propose(self, context, k: int, decoding: Decoding):
        found = self.matcher.continuations(context, k, self.budget)
        if found:
            if self.trees:
                return tree_proposal(found, decoding, self.width, self.budget)
            return chain_proposal(found[0], decoding, self.width)
        if self.fallback is not None:
            return self.fallback.propose(context, k, decoding)
        return TokenTree() if self.trees else Proposal([])

    def __repr__(self) -> str:
        m = self.matcher
        return f"NgramProposer({m.min_n}..{m.max_n}" + (f", then {self.fallback!r})" if self.fallback else ")")
