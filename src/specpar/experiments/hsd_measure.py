"""Measure a pairwise acceptance matrix for HSD's optimizer by running SI between every pair of models.

alpha[i][j] (i < j) is the acceptance rate of model i's drafts when model j verifies
them (SI, model j as the target): under greedy decoding the rate at which their
greedy tokens agree, when sampling an estimate of sum_x min(p_j(x), p_i(x)) = 1 - TV
averaged over the positions of j's own text. Works for any models with ``.server()``:
simulated stacks, or transformers models that share a tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specpar.core.errors import ConfigError
from specpar.experiments.runs import run_once


def measure_alpha(
    models: Sequence,
    prompts: Sequence[Sequence[int]],
    max_tokens: int = 64,
    lookahead: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    runtime: str = "virtual",
) -> np.ndarray:
    """[n, n] symmetric matrix of measured acceptance rates, ones on the diagonal; models smallest first."""
    if len(models) < 2:
        raise ConfigError("measure_alpha needs at least two models (a drafter and a target)")
    if not prompts:
        raise ConfigError("measure_alpha needs at least one prompt")
    n = len(models)
    alpha = np.eye(n)
    for j in range(1, n):
        for i in range(j):
            drafted = accepted = 0
            for r, prompt in enumerate(prompts):
                out = run_once(
                    prompt,
                    models[j],
                    models[i],
                    algorithm="si",
                    lookahead=lookahead,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    seed=seed + r,
                    runtime=runtime,
                )
                drafted, accepted = drafted + out.drafted, accepted + out.accepted
            alpha[i, j] = alpha[j, i] = accepted / drafted if drafted else 0.0
    return alpha
