"""SI: speculative inference (Leviathan et al. 2023; Chen et al. 2023).

Repeat: the drafter proposes k tokens, the target scores all of them in one
forward pass, the verifier keeps the accepted prefix plus one target token.
Drafting waits for verification and verification waits for drafting.

With ``tree=<k1, ..., km>`` (SpecInfer): the drafter expands a token tree instead of a chain (several drafters
behind a :class:`~specpar.backends.merged.MergedDrafters` merge theirs), the target scores every node in one pass
(tree attention), and the verifier keeps the longest accepted path plus one target token.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.calls import Draft, DraftTree, Proposal, Score, ScoreTree
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.results import GenerationResult
from specpar.core.trees import TokenTree, check_tree, limit_depth, tree_depth
from specpar.runtimes.base import Pool, Runtime
from specpar.spec.generation import Generation, check_positive_int


def si(
    runtime: Runtime,
    target: Pool,
    drafter: Pool,
    prompt: Sequence[int],
    max_new_tokens: int,
    lookahead: int,
    decoding: Decoding = GREEDY,
    stream=None,
    stopping=None,
    tree: Sequence[int] | None = None,
) -> GenerationResult:
    """tree: a token tree configuration <k1, ..., km> drafted and verified each round instead of k drafts."""
    if tree is not None:
        shape = check_tree(tree)
        lookahead = tree_depth(shape)
    check_positive_int("lookahead (k)", lookahead)
    g = Generation(prompt, max_new_tokens, decoding, runtime, stream, stopping)
    while not g.done:
        k = g.lookahead_at(len(g.out), lookahead)
        if tree is None:
            proposal = runtime.run(drafter, Draft(g.context(), k, decoding)) if k else Proposal([])
            scores = runtime.run(target, Score(g.context(proposal.tokens), k, decoding))
            g.verify(proposal, scores)
        else:
            drafts = runtime.run(drafter, DraftTree(g.context(), limit_depth(shape, k), decoding)) if k else TokenTree()
            scores = runtime.run(target, ScoreTree(g.context(), drafts, decoding))
            g.verify_tree(drafts, scores.rows)
    return g.result("si", lookahead=lookahead, sp_degree=1)
