"""Closed forms beside the simulator, as cross-checks (not a second implementation): iid acceptance at rate ``a``,
one latency per forward pass (``target_ms`` per target pass, ``drafter_ms`` per drafter token)."""

from __future__ import annotations

import math

import numpy as np


def nonsi_latency(target_ms: float, n: int) -> float:
    """non-SI: n target forward passes."""
    return n * target_ms


def expected_tokens_per_round(a: float, k: int) -> float:
    """E[tokens per SI round] = (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, Eq. 1)."""
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def si_latency_closed_form(target_ms: float, drafter_ms: float, a: float, k: int, n: int) -> float:
    """SI's expected latency for n tokens, renewal approximation: n / E[tokens per round] * (k c + 1) target_ms."""
    return n / expected_tokens_per_round(a, k) * (k * drafter_ms + target_ms)


def si_expected_latency(target_ms: float, drafter_ms: float, a: float, k: int, n: int) -> float:
    """SI's exact expected latency for n tokens under specpar's SI rule, by dynamic programming over r (O(n k)): a round
    with r tokens still to produce drafts k' = min(k, r - 1) (never the last one), costs k' * drafter_ms + target_ms
    and yields j + 1 tokens, j ~ min(Geometric accepted run, k')."""
    e = [0.0] * (n + 1)
    for r in range(1, n + 1):
        kk = min(k, r - 1)
        total = kk * drafter_ms + target_ms
        p_run = 1.0  # a^j
        for j in range(kk):
            total += p_run * (1.0 - a) * e[r - j - 1]
            p_run *= a
        total += p_run * e[r - kk - 1]
        e[r] = total
    return e[n]


def dsi_latency_bound(target_ms: float, drafter_ms: float, a: float, n: int) -> float:
    """Proposition 1: DSI (lookahead 1, enough target servers) takes at most
    t1 a (N - 1) + t2 ((1 - a)(N - 1) + 1) in expectation, vs t2 N for non-SI."""
    return drafter_ms * a * (n - 1) + target_ms * ((1.0 - a) * (n - 1) + 1.0)


# -- time per token in steady state (n -> infinity), for choosing a lookahead as the acceptance rate drifts ---------
def si_ms_per_token(target_ms: float, drafter_ms: float, a: float, k: int, per_token_ms: float = 0.0) -> float:
    """SI's expected time per token with lookahead k: a round drafts k tokens (k drafter passes) and verifies them
    in one target pass (``per_token_ms`` per draft scored), for (1 - a^(k+1)) / (1 - a) tokens."""
    return (k * drafter_ms + target_ms + per_token_ms * k) / expected_tokens_per_round(a, k)


def dsi_ms_per_token(target_ms: float, drafter_ms: float, a: float, k: int, per_token_ms: float = 0.0) -> float:
    """DSI's expected time per token with lookahead k on enough target servers (Eq. 1 holds: no verification waits
    for a server), a renewal model of :mod:`specpar.algorithms.dsi`.

    From a restart at 0, draft j = m k + i (chunk m, index i) exists at (m + 1) k d and is judged when its target row
    is there: at t for j = 0 (the pass on the cursor), at m k d + v for i = 0 (the extra row of chunk m - 1's
    verification, v = t + per_token_ms k), else at (m + 1) k d + v. The first rejection, at j with probability
    a^j (1 - a), ends the round with j + 1 tokens: time per token = (1 - a) sum_j a^j (1 - a) J(j); d at a = 1.
    Exact for k d <= t (tests/algorithms/test_adaptive_lookahead.py); beyond, it ignores the tokens the target takes
    itself meanwhile, so it is pessimistic there and capped at t (Theorem 1: never slower than non-SI).
    """
    if a >= 1.0:
        return drafter_ms
    verify = target_ms + per_token_ms * k
    j = np.arange(min(10**6, max(64, math.ceil(30.0 / (1.0 - a)))))  # the terms beyond weigh less than e^-30
    m, i = j // k, j % k
    row = np.where(j == 0, target_ms, np.where(i == 0, m * k * drafter_ms + verify, (m + 1) * k * drafter_ms + verify))
    judged = np.maximum(row, (m + 1) * k * drafter_ms)
    weights = a**j * (1.0 - a)
    return min(target_ms, float((1.0 - a) * (weights * judged).sum()))
