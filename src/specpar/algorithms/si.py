"""SI: speculative inference (Leviathan et al. 2023; Chen et al. 2023).

Repeat: the drafter proposes k tokens, the target scores all of them in one forward pass, the verifier keeps the
accepted prefix plus one target token. Drafting waits for verification and verification waits for drafting. With
token trees (SpecInfer; a proposer that drafts trees) the target scores every node in one pass (tree attention),
and the verifier keeps the longest accepted path plus one target token (:mod:`specpar.algorithms.tree_drafts`).
"""

from __future__ import annotations

from specpar.algorithms.drafting import make_proposer
from specpar.algorithms.drafts import Chains
from specpar.algorithms.generation import Generation
from specpar.algorithms.proposers import Proposer, lookahead_of, wait_for
from specpar.algorithms.tree_drafts import Trees
from specpar.core.config import SpeculativeConfig
from specpar.core.numbers import positive_int
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Pool


def si(
    g: Generation, pools: dict[str, Pool], spec: SpeculativeConfig, proposer: Proposer | None = None
) -> GenerationResult:
    """SI on ``pools["target"]`` (one server) with the proposer ``spec`` and ``pools`` make
    (:func:`~specpar.algorithms.drafting.make_proposer`), or with ``proposer``: one that drafts token trees makes each
    round a tree and the lookahead its depth."""
    runtime, target, decoding = g.runtime, pools["target"], g.decoding
    proposer = make_proposer(g, pools, spec) if proposer is None else proposer
    lookahead = positive_int("lookahead (k)", lookahead_of(proposer, spec.lookahead))
    g.feedback = proposer.feedback
    shape = Trees() if proposer.trees else Chains()
    while not g.done:
        k = g.lookahead_at(len(g.out), lookahead)
        draft = wait_for(runtime, proposer.propose(g.context(), k, decoding)) if k else shape.empty()
        scores = runtime.run(target, shape.score(g, draft, decoding))
        shape.verify(g, draft, scores)
    return g.result("si", lookahead=lookahead, sp_degree=1)
