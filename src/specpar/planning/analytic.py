"""Closed forms beside the simulator, as cross-checks (not a second implementation).

All assume iid acceptance with rate ``a`` and one latency per forward pass
(ttft = tpot, no per-token cost): ``target_ms`` per target pass, ``drafter_ms``
per drafter token.
"""

from __future__ import annotations


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
    """SI's exact expected latency for n tokens, under specpar's SI rule.

    A round with r tokens still to produce drafts k' = min(k, r - 1) tokens (never
    the last one), costs k' * drafter_ms + target_ms, and yields j + 1 tokens where
    j ~ min(Geometric accepted run, k'). Dynamic programming over r, O(n k).
    """
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
