"""HSD's expected latency per output token, corrected from the paper summary.

A hierarchy sigma = (s_0 < s_1 < ... < s_n = K) of models with costs c (one forward pass, any unit) and buffer sizes
T_0 .. T_{n-1}; alpha[i][j] (i < j): the probability that model j accepts a token of model i, 1 - TV(p, q).
Acceptances are iid per position and independent across levels (what specpar.backends.stack realises exactly).

    L = sum_i c_{s_i} * prod_{j >= i} R_j                       (cost per output token)

R_0 = T_0 (the bottom model's passes per call); R_n = (1 - a) / (1 - a^(T_{n-1} + 1)), a = alpha[s_{n-1}][K] (target
rounds per output token); 0 < i < n: R_i = gamma(alpha[s_{i-1}][s_i], T_{i-1}, T_i), the batches level i asks for per
call (:func:`gamma`). prod_{j >= i} R_j is model s_i's forward passes per output token (Wald's identity); with one
drafter, L = (T_0 c_0 + c_1) (1 - a) / (1 - a^(T_0 + 1)), SI's closed form per token.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int, is_number


def check_buffer(name: str, t) -> int:
    if not is_int(t, 1, numpy=True):
        raise ConfigError(f"{name} must be an integer >= 1, got {t!r}")
    return int(t)


def gain_probabilities(a, t_low: int) -> np.ndarray:
    """[t_low + 1, P] P(a verified batch of t_low drafts yields g tokens), g = 1 .. t_low + 1, for each of the P rates
    ``a``: the verifier keeps the accepted run (j < t_low with probability a^j (1 - a), all t_low with a^t_low) plus
    its own token."""
    a = np.atleast_1d(np.asarray(a, dtype=float))
    probs = a[None, :] ** np.arange(t_low + 1)[:, None] * (1.0 - a)
    probs[t_low] = a**t_low
    return probs


def gamma(a: float, t_low: int, t_up: int) -> float:
    """Expected number of batches of exactly t_low tokens a level verifies to hold >= t_up tokens: each yields g tokens
    with :func:`gain_probabilities`, the last may overshoot (HSD hands up exactly t_up), so

        G(r) = 1 + sum_{g < r} P(g) G(r - g),  G(r <= 0) = 0,   gamma = G(t_up)

    gamma(a, t, t') = ceil(t' / (t + 1)) at a = 1 and t' at a = 0.
    """
    return _gamma(check_rate(a), check_buffer("T_lower", t_low), check_buffer("T_upper", t_up))


@functools.lru_cache(maxsize=65536)
def _gamma(a: float, t_low: int, t_up: int) -> float:
    return float(_batches_to_fill(gain_probabilities(a, t_low), t_up)[t_up, 0])


def _batches_to_fill(gain: np.ndarray, t_max: int) -> np.ndarray:
    """[t_max + 1, P] G[r]: expected batches to hold >= r tokens, from gain[g - 1] = P(g tokens) [t_low + 1, P]."""
    G = np.zeros((t_max + 1, gain.shape[1]))  # G[0] = 0
    for r in range(1, t_max + 1):
        G[r] = 1.0
        for g in range(1, min(r - 1, len(gain)) + 1):  # gains that leave r - g >= 1 tokens to fill
            G[r] += gain[g - 1] * G[r - g]
    return G


def gamma_table(alphas: np.ndarray, t_max: int) -> np.ndarray:
    """[P, t_max, t_max] gamma(alphas[p], t_low, t_up) for t_low, t_up in 1 .. t_max, vectorized over P rates."""
    out = np.empty((len(alphas), t_max, t_max))
    for t_low in range(1, t_max + 1):
        out[:, t_low - 1, :] = _batches_to_fill(gain_probabilities(alphas, t_low), t_max)[1:].T
    return out


def top_rate(a, t_low):
    """R_n: target rounds per output token, (1 - a) / (1 - a^(t_low + 1)); 1 / (t_low + 1) at a = 1 (elementwise)."""
    a = np.asarray(a, dtype=float)
    t = np.asarray(t_low, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (1.0 - a) / (1.0 - a ** (t + 1.0))
    r = np.where(a >= 1.0, 1.0 / (t + 1.0), r)
    return float(r) if r.ndim == 0 else r


def check_rate(a, name: str = "acceptance rate") -> float:
    if not is_number(a, 0.0, 1.0, numpy=True):
        raise ConfigError(f"{name} must be a number in [0, 1], got {a!r}")
    return float(a)


def check_alpha(alpha, name: str = "alpha") -> np.ndarray:
    """alpha as a float [n, n] array with every entry in [0, 1]; ConfigError naming the problem otherwise."""
    try:
        rows = [list(r) for r in alpha]
    except TypeError:
        raise ConfigError(f"{name} must be a square matrix (a list of rows), got {alpha!r}") from None
    n = len(rows)
    if n < 2:
        raise ConfigError(f"{name} must be at least 2 x 2 (a drafter and the target), got {n} row(s)")
    for i, r in enumerate(rows):
        if len(r) != n:
            raise ConfigError(f"{name} must be square: {n} rows but row {i} has {len(r)} entries")
    try:
        a = np.array(rows, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must hold numbers, got {alpha!r}") from None
    bad = np.argwhere(~((a >= 0.0) & (a <= 1.0)))
    if len(bad):
        i, j = bad[0]
        raise ConfigError(f"{name}[{i}][{j}] = {float(a[i, j]):g} is not an acceptance rate in [0, 1]")
    return a


def check_costs(costs: Sequence[float]) -> list[float]:
    """Costs c_0 < c_1 < ... < c_K (the target last), each a finite number > 0."""
    c = list(costs)
    if len(c) < 2:
        raise ConfigError(f"give at least two costs (a drafter and the target), got {c!r}")
    for i, x in enumerate(c):
        if not is_number(x, 0, math.inf, lo_open=True, hi_open=True, numpy=True):
            raise ConfigError(f"cost c_{i} must be a finite number > 0, got {x!r}")
    for i in range(len(c) - 1):
        if not c[i] < c[i + 1]:
            raise ConfigError(
                f"costs must increase toward the target (M0 < M1 < ... < MK): "
                f"c_{i} = {c[i]:g} is not below c_{i + 1} = {c[i + 1]:g}"
            )
    return [float(x) for x in c]


def level_rates(alpha: np.ndarray, levels: Sequence[int], buffers: Sequence[int]) -> list[float]:
    """[n + 1] R_0 .. R_n of the hierarchy ``levels`` (model indices, the target last) with ``buffers`` [n]."""
    n = len(levels) - 1
    if n == 0:
        return [1.0]
    if len(buffers) != n:
        raise ConfigError(f"a hierarchy of {n} drafters needs {n} buffer sizes, got {list(buffers)}")
    T = [check_buffer(f"buffer size T_{i}", t) for i, t in enumerate(buffers)]
    R = [float(T[0])]
    for i in range(1, n):
        R.append(gamma(float(alpha[levels[i - 1]][levels[i]]), T[i - 1], T[i]))
    R.append(top_rate(float(alpha[levels[n - 1]][levels[n]]), T[n - 1]))
    return R


def forwards_per_token(alpha, levels: Sequence[int], buffers: Sequence[int]) -> list[float]:
    """[n + 1] expected forward passes of each model of the hierarchy per output token: prod_{j >= i} R_j."""
    R = level_rates(np.asarray(alpha, dtype=float), levels, buffers)
    return [math.prod(R[i:]) for i in range(len(R))]


def hierarchy_latency(costs: Sequence[float], alpha, levels: Sequence[int], buffers: Sequence[int]) -> float:
    """L = sum_i c_{s_i} prod_{j >= i} R_j: expected cost per output token of the hierarchy (cost units). costs: [K+1]
    c_0 .. c_K; alpha: [K+1, K+1]; levels: increasing model indices ending with K ([K]: the target alone, L = c_K);
    buffers: T for every level but the target."""
    c, a = check_costs(costs), check_alpha(alpha)
    if len(a) != len(c):
        raise ConfigError(f"alpha is {len(a)} x {len(a)} but there are {len(c)} costs: give one row per model")
    if list(levels) != sorted(set(levels)) or levels[-1] != len(c) - 1 or levels[0] < 0:
        raise ConfigError(
            f"levels must be increasing model indices ending with the target {len(c) - 1}, got {list(levels)}"
        )
    F = forwards_per_token(a, levels, buffers)
    return float(sum(c[s] * f for s, f in zip(levels, F)))
