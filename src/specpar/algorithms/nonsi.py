"""non-SI: the target alone, one forward pass per token (the baseline)."""

from __future__ import annotations

from specpar.algorithms.generation import Generation
from specpar.core.calls import Score
from specpar.core.config import SpeculativeConfig
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Pool


def non_si(g: Generation, pools: dict[str, Pool], spec: SpeculativeConfig) -> GenerationResult:
    """One pass of ``pools["target"]`` per output token, each taking the target's own token."""
    runtime, target, decoding = g.runtime, pools["target"], g.decoding
    while not g.done:
        scores = runtime.run(target, Score(g.context(), 0, decoding))
        g.take(scores.rows[0])
    return g.result("nonsi", sp_degree=1)
