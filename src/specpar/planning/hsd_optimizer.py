"""HSD's optimizer: the subset of models and buffer sizes that minimize the latency L (:mod:`.hsd_latency`).

A dynamic program over (model, buffer) pairs: one call to model m (not the target) holding buffer t costs

    H(m, t) = c_m * t                                       (m drafts alone, the bottom level)
    H(m, t) = gamma(alpha[m'][m], t', t) * (c_m + H(m', t'))  (m verifies batches of t' from m' < m)

at the least of these. A call's cost depends on the levels below only through H(m', t') (each batch is exactly t'
tokens) and gamma > 0, so the minimum is exact. The target adds

    L* = min( c_K,  min_{m', t'} R(alpha[m'][K], t') * (c_K + H(m', t')) )

Models visited cheapest first make the graph acyclic: O(K^2 T^2) after the gamma table (O(K^2 T^3)), against the
paper's O(T^4 K^4 log(TK)). :func:`exhaustive` (every subset and buffer vector) is the reference for small K.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from specpar.core.errors import ConfigError
from specpar.planning.hsd_latency import (
    check_alpha,
    check_buffer,
    check_costs,
    gamma_table,
    hierarchy_latency,
    top_rate,
)


@dataclass(frozen=True)
class HsdPlan:
    """A hierarchy: ``levels``, model indices from the bottom drafter to the target K ([K]: the target alone);
    ``buffers``, T for each level but the target (T_0: tokens the bottom model drafts per call); ``latency``, its
    predicted cost per output token L (the costs' unit)."""

    levels: tuple[int, ...]
    buffers: tuple[int, ...]
    latency: float

    def to_dict(self) -> dict:
        return asdict(self)


MAX_T_MAX = 1000  # 14 s at T_max = 200 with two models; beyond 10^3 the arrays outgrow memory


def check_problem(costs: Sequence[float], alpha, t_max: int) -> tuple[list[float], np.ndarray, int]:
    c = check_costs(costs)
    a = check_alpha(alpha)
    if len(a) != len(c):
        raise ConfigError(f"alpha is {len(a)} x {len(a)} but there are {len(c)} costs: give one row per model")
    T = check_buffer("T_max", t_max)
    if T > MAX_T_MAX:
        raise ConfigError(f"T_max must be at most {MAX_T_MAX} (the program's time grows as T_max^3), got {T}")
    return c, a, T


def optimize(costs: Sequence[float], alpha, t_max: int = 15) -> HsdPlan:
    """The hierarchy and buffers (each in 1 .. t_max) with the least L, by the dynamic program above. costs: [K+1]
    c_0 < ... < c_K (the target last); alpha: [K+1, K+1], entries above the diagonal used."""
    c, a, T = check_problem(costs, alpha, t_max)
    K = len(c) - 1
    iu = np.triu_indices(K + 1, 1)
    pair = -np.ones((K + 1, K + 1), dtype=int)
    pair[iu] = np.arange(len(iu[0]))
    gam = gamma_table(a[iu], T)  # [pairs, t_low, t_up]
    t = np.arange(1, T + 1)

    H = np.empty((K, T))  # H[m, t - 1]
    below = np.full((K, T, 2), -1)  # the (m', t') below each (m, t); -1: m is the bottom
    for m in range(K):
        H[m] = c[m] * t
        if m:
            cand = gam[pair[:m, m]] * (c[m] + H[:m, :, None])  # [m', t', t]
            best = cand.reshape(m * T, T).argmin(axis=0)
            better = cand.reshape(m * T, T)[best, np.arange(T)] < H[m]
            H[m] = np.where(better, cand.reshape(m * T, T)[best, np.arange(T)], H[m])
            below[m, better] = np.stack(np.unravel_index(best[better], (m, T)), axis=1)

    top = top_rate(a[:K, K][:, None], t[None, :]) * (c[K] + H)  # [m', t']
    m, tt = np.unravel_index(int(top.argmin()), top.shape)
    if not top[m, tt] < c[K]:
        return HsdPlan((K,), (), c[K])
    levels, buffers = [K], []
    while m >= 0:
        levels.append(int(m))
        buffers.append(int(tt) + 1)
        m, tt = below[m, tt]
    return HsdPlan(tuple(reversed(levels)), tuple(reversed(buffers)), float(top.min()))


def exhaustive(costs: Sequence[float], alpha, t_max: int) -> HsdPlan:
    """The reference: L of every subset of drafters with every buffer vector in 1 .. t_max; (1 + t_max)^K hierarchies."""
    c, a, T = check_problem(costs, alpha, t_max)
    K = len(c) - 1
    best = HsdPlan((K,), (), c[K])
    for n in range(1, K + 1):
        for subset in itertools.combinations(range(K), n):
            levels = subset + (K,)
            for buffers in itertools.product(range(1, T + 1), repeat=n):
                L = hierarchy_latency(c, a, levels, buffers)
                if L < best.latency:
                    best = HsdPlan(levels, buffers, L)
    return best


def best_single_drafter(costs: Sequence[float], alpha, t_max: int = 15) -> HsdPlan:
    """The best SI plan: one drafter and its lookahead (the target alone if no drafter helps)."""
    c, a, T = check_problem(costs, alpha, t_max)
    K = len(c) - 1
    t = np.arange(1, T + 1)
    L = top_rate(a[:K, K][:, None], t[None, :]) * (c[K] + np.asarray(c[:K])[:, None] * t[None, :])
    m, tt = np.unravel_index(int(L.argmin()), L.shape)
    if not L[m, tt] < c[K]:
        return HsdPlan((K,), (), c[K])
    return HsdPlan((int(m), K), (int(tt) + 1,), float(L[m, tt]))
