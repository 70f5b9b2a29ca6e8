"""SI: speculative inference (Leviathan et al. 2023; Chen et al. 2023).

Repeat: the drafter proposes k tokens, the target scores all of them in one
forward pass, the verifier keeps the accepted prefix plus one target token.
Drafting waits for verification and verification waits for drafting.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpar.algorithms.generation import Generation, check_positive_int
from specpar.calls import Draft, Proposal, Score
from specpar.decoding import GREEDY, Decoding
from specpar.results import GenerationResult
from specpar.runtimes.base import Pool, Runtime


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
) -> GenerationResult:
    check_positive_int("lookahead (k)", lookahead)
    g = Generation(prompt, max_new_tokens, decoding, runtime, stream, stopping)
    while not g.done:
        k = g.lookahead_at(len(g.out), lookahead)
        proposal = runtime.run(drafter, Draft(g.context(), k, decoding)) if k else Proposal([])
        scores = runtime.run(target, Score(g.context(proposal.tokens), k, decoding))
        g.verify(proposal, scores)
    return g.result("si", lookahead=lookahead, sp_degree=1)
