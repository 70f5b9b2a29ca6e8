"""A pairwise acceptance matrix for HSD's optimizer, measured by running SI between every pair of models.

alpha[i][j] (i < j): the acceptance rate of model i's drafts verified by model j; greedy, the rate their greedy
tokens agree; sampling, an estimate of 1 - TV over j's own text. Any models with ``.server()``.
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
    si = dict(algorithm="si", lookahead=lookahead, max_tokens=max_tokens, temperature=temperature, runtime=runtime)
    for j in range(1, n):
        for i in range(j):
            runs = [run_once(prompt, models[j], models[i], seed=seed + r, **si) for r, prompt in enumerate(prompts)]
            drafted, accepted = sum(x.drafted for x in runs), sum(x.accepted for x in runs)
            alpha[i, j] = alpha[j, i] = accepted / drafted if drafted else 0.0
    return alpha
