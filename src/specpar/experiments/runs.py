"""One generation as the experiments write it: keywords in, a SpeculativeConfig, RuntimeConfig and Decoding built,
:func:`specpar.algorithms.registry.run_generation` called (simulated models on token-id prompts need none of the
Engine's request handling)."""

from __future__ import annotations

from collections.abc import Sequence

from specpar.algorithms.registry import run_generation
from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.decoding import Decoding
from specpar.core.query import Query
from specpar.core.results import GenerationResult


def run_once(
    prompt: Sequence[int], target, drafter=None, *, max_tokens: int, sp_degree: int = 4, stream=None, **options
) -> GenerationResult:
    """One generation. options: SpeculativeConfig fields (algorithm, lookahead, tree, ...); ``runtime`` (a name,
    "virtual" by default), ``runtime_options`` and RuntimeConfig fields (cancel_frees, link_ms, ...); the decoding's
    ``temperature`` (0 by default: greedy), ``seed`` (0) and ``coupling`` ("rejection"). sp_degree as
    :func:`specpar.generate`'s."""
    options = dict(options)
    runtime, runtime_options = options.pop("runtime", "virtual"), options.pop("runtime_options", None)
    spec_fields, runtime_fields, decoding = split_options(options, sampling=("temperature", "seed", "coupling"))
    spec = SpeculativeConfig(sp_degree=sp_degree, **spec_fields)
    config = RuntimeConfig.coerce(runtime, runtime_options, **runtime_fields)
    decoding = Decoding(
        decoding.get("temperature", 0.0),
        decoding.get("seed", 0),
        coupling=decoding.get("coupling", "rejection"),
        prompt_len=len(prompt),
    )
    return run_generation(Query(prompt, max_tokens, decoding, stream=stream), target, drafter, spec, config)
