"""Layer 3: the pure verification rules, tested on explicit distributions."""

import numpy as np
import pytest

from specpar.algorithms.verification import bonus, judge, residual, verify_chain
from specpar.core.decoding import Decoding, sample, uniform

GREEDY = Decoding()


def test_greedy_exact_match_keeps_the_accepted_prefix_and_the_correction():
    # target argmax rows at 4 positions; drafts agree at the first two only
    assert verify_chain([5, 6, 9], None, [5, 6, 7, 8], GREEDY, start=10) == (2, 7)
    assert verify_chain([5, 6, 7], None, [5, 6, 7, 8], GREEDY, start=10) == (3, 8)  # all pass: bonus
    assert verify_chain([1], None, [2, 3], GREEDY, start=0) == (0, 2)
    assert verify_chain([], None, [4], GREEDY, start=0) == (0, 4)


def test_residual_is_the_normalised_positive_part():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.5, 0.1, 0.2])
    np.testing.assert_allclose(residual(p, q), [0.75, 0.0, 0.25, 0.0])
    np.testing.assert_allclose(residual(p, p), p)  # no mass to reject: fall back to p


def test_uniforms_are_uniform_and_keyed():
    u = np.array([uniform(7, 2, i) for i in range(20000)])
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    assert uniform(7, 2, 5) == uniform(7, 2, 5)
    assert len({uniform(7, s, 5) for s in (1, 2, 3, 4)} | {uniform(8, 2, 5)}) == 5


def test_sample_follows_the_distribution():
    dist = np.array([0.1, 0.0, 0.6, 0.3])
    draws = np.bincount([sample(dist, uniform(3, 1, i)) for i in range(20000)], minlength=4) / 20000
    np.testing.assert_allclose(draws, dist, atol=0.012)
    assert draws[1] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_one_step_of_rejection_sampling_reproduces_p(seed):
    """Draft x ~ q, judge it: the kept token is distributed as p (Leviathan et al., Theorem 1)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(5))
    q = rng.dirichlet(np.ones(5))
    n = 40000
    kept = np.zeros(5)
    accepted = 0
    for i in range(n):
        dec = Decoding(1.0, seed=i)
        x = sample(q, dec.uniform(1, 0))
        ok, tok = judge(x, q, p, dec, position=0)
        kept[tok] += 1
        accepted += ok
    np.testing.assert_allclose(kept / n, p, atol=0.01)
    assert abs(accepted / n - np.minimum(p, q).sum()) < 0.01  # acceptance = 1 - TV(p, q)


def test_bonus_greedy_is_the_row_and_sampling_draws_from_it():
    assert bonus(3, GREEDY, 0) == 3
    p = np.array([0.0, 0.0, 1.0])
    assert bonus(p, Decoding(1.0, 5), 9) == 2
