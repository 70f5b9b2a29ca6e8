"""The adaptive lookahead's parts: its cost models (against the simulator's fast path and SI's exact expectation, with
a wrong model as the control), its table of best lookaheads, and its running acceptance estimate."""

from __future__ import annotations

import numpy as np
import pytest

from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.planning.adaptive import AdaptiveLookahead, adaptive_lookahead, tabulate
from specpar.planning.analytic import dsi_ms_per_token, si_expected_latency, si_ms_per_token
from specpar.planning.lookahead import satisfies_eq1
from specpar.prediction.fastpath import acceptance_uniforms, dsi_latency, next_rejection

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


@pytest.mark.slow
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
    assert si.best[30] == 1 and si.best[90] >= 4 and list(si.best) == sorted(si.best)  # more acceptance, longer rounds
    dsi = adaptive_lookahead("dsi", target, drafter, sp_degree=4)
    assert set(dsi.best) == {3}  # the paper's model: the smallest valid (Eq. 1: ceil(1 / (4 x 0.1))) at every rate
    # with a per-token cost, verifying longer chunks costs more: still among the valid ones
    costly = adaptive_lookahead("dsi", LatencyProfile(1.0, 1.0, 0.02), drafter, sp_degree=4, dedicated_cursor=False)
    assert min(costly.best) >= 4  # with catch-up Eq. 1 needs k >= 4 on 4 servers (verification_servers)


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
    table = tabulate([1, 2], lambda a, k: k)
    with pytest.raises(ConfigError, match="horizon"):
        AdaptiveLookahead(table, horizon=0.5)
    with pytest.raises(ConfigError, match="prior"):
        AdaptiveLookahead(table, prior=1.5)
    with pytest.raises(ConfigError, match="one lookahead per rate"):
        AdaptiveLookahead([1, 2])


# -- in a generation -----------------------------------------------------------------------------
def _drifting(seed: int = 0):
    from specpar import SimulatedModel
    from specpar.backends import Regimes

    target = SimulatedModel(16, seed=seed, latency=LatencyProfile.uniform(1.0))
    return target, target.drafter(Regimes((0.9, 0.4), 50), LatencyProfile.uniform(0.1), seed=seed + 5)


@pytest.mark.parametrize("algorithm,sp", [("si", 1), ("dsi", 4)])
def test_an_adaptive_lookahead_keeps_greedy_output_exact(algorithm, sp):
    from specpar import generate

    for seed in range(3):
        target, drafter = _drifting(seed)
        out = generate([3, 4], target, drafter, algorithm=algorithm, lookahead="adaptive", sp_degree=sp,
                       max_tokens=300)  # fmt: skip
        assert out.tokens == target.greedy_tokens([3, 4], 300)
        assert out.lookahead <= 16  # the windows' bound (the most the policy chooses); each window's own is its choice


def test_sis_adaptive_windows_follow_the_regimes(monkeypatch):
    """Rounds drafted in the a = 0.9 regime are longer than in the a = 0.4 one (a fixed lookahead's are the same)."""
    from specpar import generate
    from specpar.algorithms.drafting import AdaptiveProposer
    from specpar.backends import Regimes

    windows = []
    original = AdaptiveProposer.propose

    def spy(self, context, k, decoding):
        windows.append((len(context), self.policy.best[round(self.policy.estimate * 100)]))
        return original(self, context, k, decoding)

    monkeypatch.setattr(AdaptiveProposer, "propose", spy)
    target, drafter = _drifting()
    generate([3, 4], target, drafter, algorithm="si", lookahead="adaptive", max_tokens=1000)
    regimes = Regimes((0.9, 0.4), 50)
    high = [k for at, k in windows if regimes.rate_at(at) == 0.9 and at % 50 > 15]  # once the estimate has moved
    low = [k for at, k in windows if regimes.rate_at(at) == 0.4 and at % 50 > 15]
    assert np.mean(high) > 3 and np.mean(low) < 2


@pytest.mark.slow
def test_an_adaptive_lookahead_samples_the_targets_law():
    import itertools
    from collections import Counter

    from specpar import SimulatedModel, generate
    from specpar.backends import Regimes
    from stats import chi_square_p_value

    target = SimulatedModel(4, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    drafter = target.drafter(Regimes((0.9, 0.2), 1), LatencyProfile.uniform(0.1), seed=4)
    law = {s: target.sequence_probability([0, 1], s, 1.0) for s in itertools.product(range(4), repeat=3)}
    counts = Counter(
        tuple(
            generate(
                [0, 1],
                target,
                drafter,
                algorithm="dsi",
                lookahead="adaptive",
                sp_degree=3,
                max_tokens=3,
                temperature=1.0,
                seed=i,
            ).tokens
        )  # fmt: skip
        for i in range(3000)
    )
    assert chi_square_p_value(counts, law) > 1e-3


def test_an_adaptive_lookahead_says_what_it_cannot_do():
    from specpar import generate

    target, drafter = _drifting()
    for kw, needle in [
        (dict(algorithm="si", tree=(2, 1)), "not token trees"),
        (dict(algorithm="hsd"), "not 'hsd'"),
        (dict(algorithm="si", proposer="ngram"), "n-gram proposer alone"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            generate([3, 4], target, [drafter] if kw["algorithm"] == "hsd" else drafter, lookahead="adaptive",
                     max_tokens=10, **kw)  # fmt: skip
