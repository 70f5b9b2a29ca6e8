"""A chi-square goodness-of-fit test without SciPy (Wilson-Hilferty approximation of the p-value)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping

from specpar import generate


def chi_square_p_value(observed: Counter, expected_probs: Mapping[Hashable, float], min_expected: float = 5.0) -> float:
    """P-value of observed counts against expected probabilities; rare cells are pooled into one."""
    n = sum(observed.values())
    outside = sum(c for key, c in observed.items() if expected_probs.get(key, 0.0) == 0.0)
    if outside:
        return 0.0  # an outcome the target gives probability 0: certainly not its distribution
    stat, cells, pooled_o, pooled_e = 0.0, 0, 0.0, 0.0
    for key, p in expected_probs.items():
        e, o = n * p, observed.get(key, 0)
        if e >= min_expected:
            stat += (o - e) ** 2 / e
            cells += 1
        else:
            pooled_o += o
            pooled_e += e
    if pooled_e > 0:
        stat += (pooled_o - pooled_e) ** 2 / pooled_e
        cells += 1
    df = cells - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def output_counts(prompt, target, drafter, samples: int, **generate_kwargs) -> Counter:
    """How often each output (its tuple of tokens) comes out of ``samples`` generations seeded 0 .. samples - 1;
    with the rejection coupling unless ``coupling`` is given (a seed alone would choose the Gumbel coupling: these
    counts test the papers' rejection sampling, and its biased controls patch it)."""
    generate_kwargs.setdefault("coupling", "rejection")
    return Counter(tuple(generate(prompt, target, drafter, seed=i, **generate_kwargs).tokens) for i in range(samples))
