"""The adaptive lookahead's parts: its cost models (against the simulator's fast path and SI's exact expectation, with
a wrong model as the control), its table of best lookaheads, and its running acceptance estimate."""

from __future__ import annotations

import numpy as np
import pytest

from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.experiments.fastpath import acceptance_uniforms, dsi_latency, next_rejection
from specpar.planning.adaptive import AdaptiveLookahead, adaptive_lookahead
from specpar.planning.analytic import dsi_ms_per_token, si_expected_latency, si_ms_per_token
from specpar.planning.lookahead import satisfies_eq1

N = 1000
CASES = [(c, a) for c in (0.05, 0.1, 0.2) for a in (0.4, 0.65, 0.9)]


def _fast_path_ms_per_token(c: float, a: float, ks: list[int], sp: int = 7) -> dict[int, float]:
    nz = next_rejection(acceptance_uniforms(200, N, seed=1), [a])[0]
    return {k: float(dsi_latency(nz, np.full(len(nz), k), np.full(len(nz), c), N, sp).mean()) / N for k in ks}


def _wrong_dsi(t, d, a, k):
    """The control: the model with the extra rows forgotten (chunk m's first draft judged when chunk m is verified,
    not when chunk m - 1 is)."""
    j = np.arange(3000)
    m = j // k
    judged = np.where(j == 0, t, (m + 1) * k * d + t)
    return float((1 - a) * (a**j * (1 - a) * judged).sum())


@pytest.mark.parametrize("c,a", CASES)
def test_dsis_model_is_the_fast_paths_time_per_token_where_a_chunk_fits_in_a_target_pass(c, a):
    ks = [k for k in range(1, int(1 / c) + 1) if satisfies_eq1(1.0, c, k, 7)]
    simulated = _fast_path_ms_per_token(c, a, ks)
    for k in ks:
        assert dsi_ms_per_token(1.0, c, a, k) == pytest.approx(simulated[k], rel=0.005), k
    # and the model finds the fast path's fastest lookahead
    assert min(ks, key=lambda k: dsi_ms_per_token(1.0, c, a, k)) == min(ks, key=simulated.get)
    # the control: a model that misses the extra row is off by more than the tolerance somewhere
    assert max(abs(_wrong_dsi(1.0, c, a, k) / simulated[k] - 1) for k in ks) > 0.005


def test_dsis_model_never_exceeds_non_si_and_is_the_drafter_at_a_equal_one():
    assert dsi_ms_per_token(1.0, 0.3, 0.1, 12) <= 1.0  # a chunk longer than a target pass: capped (Theorem 1)
    assert dsi_ms_per_token(1.0, 0.1, 1.0, 5) == 0.1
    assert dsi_ms_per_token(1.0, 0.1, 0.0, 3) == pytest.approx(1.0)  # every draft wrong: the target's pace


@pytest.mark.parametrize("c,a", CASES)
def test_sis_model_is_its_exact_expectation_per_token(c, a):
    for k in (1, 3, 7):
        exact = si_expected_latency(1.0, c, a, k, 4000) / 4000
        assert si_ms_per_token(1.0, c, a, k) == pytest.approx(exact, rel=0.01)


def test_the_table_moves_sis_lookahead_with_the_rate_and_keeps_dsis_smallest_valid():
    target, drafter = LatencyProfile.uniform(1.0), LatencyProfile.uniform(0.1)
    si = adaptive_lookahead("si", target, drafter)
    assert si.best[30] == 1 and si.best[90] >= 4 and si.best == sorted(si.best)  # more acceptance, longer rounds
    dsi = adaptive_lookahead("dsi", target, drafter, sp_degree=4)
    assert dsi.candidates[0] == 3  # Eq. 1: ceil(1 / (4 x 0.1))
    assert set(dsi.best) == {3}  # the paper's model: the smallest valid is fastest at every rate
    # with a per-token cost, verifying longer chunks costs more: still among the valid ones
    costly = adaptive_lookahead("dsi", LatencyProfile(1.0, 1.0, 0.02), drafter, sp_degree=4, dedicated_cursor=False)
    assert set(costly.best) <= set(costly.candidates)


def test_the_estimate_follows_the_latest_tests_and_the_lookahead_follows_it():
    policy = adaptive_lookahead("si", LatencyProfile.uniform(1.0), LatencyProfile.uniform(0.1), prior=0.5)
    start = policy.lookahead()
    for _ in range(30):
        policy.feedback(0, True)
    high = policy.lookahead()
    assert policy.estimate > 0.95 and high > start
    for _ in range(30):
        policy.feedback(1, False)
    assert policy.estimate < 0.05 and policy.lookahead() == 1
    assert policy.chosen == [start, high, 1] and policy.tested == 60


def test_bad_settings_are_config_errors():
    t, d = LatencyProfile.uniform(1.0), LatencyProfile.uniform(0.1)
    with pytest.raises(ConfigError, match="'si' or 'dsi'"):
        adaptive_lookahead("hsd", t, d)
    with pytest.raises(ConfigError, match="latencies > 0"):
        adaptive_lookahead("si", t, LatencyProfile.uniform(0.0))
    with pytest.raises(ConfigError, match="horizon"):
        AdaptiveLookahead([1, 2], lambda a, k: k, horizon=0.5)
    with pytest.raises(ConfigError, match="prior"):
        AdaptiveLookahead([1, 2], lambda a, k: k, prior=1.5)
