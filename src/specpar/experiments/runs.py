"""One generation as the experiments write it: keywords in, the three config objects built once, the runner called.

The experiments run simulated models on token-id prompts, so they need none of the Engine's request handling
(text, end-of-text stopping, a queue); they call :func:`specpar.algorithms.registry.run_generation` through
:func:`run_once`, which is only the translation of keywords into a SpeculativeConfig, a RuntimeConfig and a
Decoding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specpar.algorithms.registry import run_generation
from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.decoding import Decoding
from specpar.core.query import Query
from specpar.core.results import GenerationResult


def run_once(
    prompt: Sequence[int],
    target,
    drafter=None,
    *,
    max_tokens: int,
    runtime: str = "virtual",
    runtime_options: Mapping | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    coupling: str = "rejection",
    stream=None,
    sp_degree: int = 4,
    **options,
) -> GenerationResult:
    """One generation (greedy unless ``temperature`` > 0). options: SpeculativeConfig fields (algorithm, lookahead,
    tree, ...) and RuntimeConfig fields (cancel_frees, link_ms, ...); sp_degree as :func:`specpar.generate`'s."""
    spec_fields, runtime_fields, _ = split_options(options)
    spec = SpeculativeConfig(sp_degree=sp_degree, **spec_fields)
    config = RuntimeConfig.coerce(runtime, runtime_options, **runtime_fields)
    decoding = Decoding(temperature, seed, coupling=coupling, prompt_len=len(prompt))
    return run_generation(Query(prompt, max_tokens, decoding, stream=stream), target, drafter, spec, config)
