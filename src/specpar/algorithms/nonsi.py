"""non-SI: the target alone, one forward pass per token (the baseline)."""

from __future__ import annotations

from collections.abc import Sequence

from specpar.algorithms.generation import Generation
from specpar.core.calls import Score
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Pool, Runtime


def non_si(
    runtime: Runtime,
    target: Pool,
    prompt: Sequence[int],
    max_new_tokens: int,
    decoding: Decoding = GREEDY,
    stream=None,
    stopping=None,
) -> GenerationResult:
    g = Generation(prompt, max_new_tokens, decoding, runtime, stream, stopping)
    while not g.done:
        scores = runtime.run(target, Score(g.context(), 0, decoding))
        g.take(scores.rows[0])
    return g.result("nonsi", sp_degree=1)
