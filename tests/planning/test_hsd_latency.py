"""HSD's latency model against independent computations and against the virtual clock running the algorithm.

Tolerance of the model vs the clock: the mean ms/token over 16 generations of 1000
tokens (each on its own stack seed) is within 4% of L = sum_i c_i prod_{j>=i} R_j.
The measured standard error of that mean is 0.6-1.6% (the deepest, most variable
hierarchy below), so 4% is at least 2.5 standard errors; the seeds are fixed, so the
test is deterministic. A gamma that ignored overshoot (T_upper / E[tokens per batch])
is off by 20-30% on these hierarchies.
"""

import math
import random
import statistics

import numpy as np
import pytest

from specpar import ConfigError, generate
from specpar.backends.stack import SimulatedStack
from specpar.core.latency import LatencyProfile
from specpar.planning.analytic import si_latency_closed_form
from specpar.planning.hsd_latency import forwards_per_token, gamma, hierarchy_latency, top_rate


def batches_to_fill(a: float, t_low: int, t_up: int, rng: random.Random) -> int:
    """One run of the process gamma describes, straight from its definition."""
    held = calls = 0
    while held < t_up:
        calls += 1
        run = 0
        while run < t_low and rng.random() < a:
            run += 1
        held += run + 1
    return calls


@pytest.mark.parametrize("a,t_low,t_up", [(0.3, 1, 5), (0.7, 3, 4), (0.85, 2, 9), (0.95, 5, 15), (0.5, 15, 3)])
def test_gamma_is_the_mean_number_of_batches_of_the_process(a, t_low, t_up):
    rng = random.Random(1)
    mc = statistics.fmean(batches_to_fill(a, t_low, t_up, rng) for _ in range(20000))
    assert gamma(a, t_low, t_up) == pytest.approx(mc, rel=0.02)


def test_gamma_limits():
    for t_low in (1, 3, 7):
        for t_up in (1, 4, 15):
            assert gamma(1.0, t_low, t_up) == math.ceil(t_up / (t_low + 1))
            assert gamma(0.0, t_low, t_up) == t_up
            assert gamma(0.4, t_low, 1) == 1.0
    assert gamma(0.6, 2, 5) < gamma(0.6, 2, 6) and gamma(0.6, 2, 5) > gamma(0.8, 2, 5)


def test_one_drafter_reduces_to_si_closed_form():
    for a, k, c in [(0.0, 1, 0.1), (0.6, 4, 0.05), (0.9, 7, 0.3), (1.0, 3, 0.2)]:
        n = 1000
        per_token = hierarchy_latency([c, 1.0], [[1, a], [a, 1]], [0, 1], [k])
        assert per_token * n == pytest.approx(si_latency_closed_form(1.0, c, a, k, n), rel=1e-12)
        assert top_rate(a, k) == pytest.approx(1 / sum(a**i for i in range(k + 1)))


CASES = {
    "4 models, all used": ([0.2, 1.5, 6.0, 30.0], [0.7, 0.85, 0.9], [0, 1, 2, 3], [3, 4, 10]),
    "3 models": ([0.05, 0.2, 1.0], [0.8, 0.7], [0, 1, 2], [3, 4]),
    "5 models, one skipped": ([0.01, 0.1, 0.3, 0.6, 1.0], [0.95, 0.9, 0.8, 0.85], [0, 1, 3, 4], [2, 3, 5]),
}


def simulate(costs, chain, levels, buffers, temperature=0.0, runs=16, n=1000):
    """Mean ms/token over ``runs`` stacks, and the forward passes per token of each level."""
    per_token, forwards = [], [0] * len(levels)
    for seed in range(runs):
        stack = SimulatedStack(chain, [LatencyProfile.uniform(c) for c in costs], vocab_size=12, seed=seed)
        out = generate(
            [1, 2, 3],
            stack.target,
            [stack.models[m] for m in levels[:-1]],
            algorithm="hsd",
            buffers=buffers,
            max_tokens=n,
            temperature=temperature,
            seed=seed,
        )
        per_token.append(out.time_ms / n)
        forwards = [f + g / (n * runs) for f, g in zip(forwards, out.details["forwards_per_level"])]
    return statistics.fmean(per_token), forwards, out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_predicted_latency_matches_the_virtual_clock(name):
    costs, chain, levels, buffers = CASES[name]
    alpha = SimulatedStack(chain, [LatencyProfile.uniform(c) for c in costs], vocab_size=12).alpha
    measured, forwards, _ = simulate(costs, chain, levels, buffers)
    assert measured == pytest.approx(hierarchy_latency(costs, alpha, levels, buffers), rel=0.04)
    # and level by level: forward passes per token are prod_{j >= i} R_j
    for i, (f, predicted) in enumerate(zip(forwards, forwards_per_token(alpha, levels, buffers))):
        assert f == pytest.approx(predicted, rel=0.04), (
            f"level {i} ran {f:.3f} forwards/token, predicted {predicted:.3f}"
        )


@pytest.mark.slow
def test_predicted_latency_matches_the_virtual_clock_when_sampling():
    costs, chain, levels, buffers = CASES["3 models"]
    alpha = SimulatedStack(chain, [LatencyProfile.uniform(c) for c in costs], vocab_size=12).alpha
    measured, _, _ = simulate(costs, chain, levels, buffers, temperature=1.0, runs=8)
    assert measured == pytest.approx(hierarchy_latency(costs, alpha, levels, buffers), rel=0.04)


def test_gamma_matches_the_batches_an_intermediate_level_asks_for_on_the_virtual_clock():
    costs, chain = [0.05, 0.2, 0.5, 1.0], [0.8, 0.6, 0.9]
    levels, buffers = [0, 1, 2, 3], [2, 5, 6]
    _, _, out = simulate(costs, chain, levels, buffers, runs=1, n=4000)
    calls, forwards = out.details["calls_per_level"], out.details["forwards_per_level"]
    for i in (1, 2):  # a request to level i costs it gamma forward passes (one per batch from below)
        a = math.prod(chain[levels[i - 1] : levels[i]])
        assert forwards[i] / calls[i] == pytest.approx(gamma(a, buffers[i - 1], buffers[i]), rel=0.03)


def test_bad_latency_model_input_is_named():
    alpha = [[1, 0.5], [0.5, 1]]
    with pytest.raises(ConfigError, match="T_0"):
        hierarchy_latency([0.1, 1.0], alpha, [0, 1], [0])
    with pytest.raises(ConfigError, match="increase toward the target"):
        hierarchy_latency([1.0, 0.1], alpha, [0, 1], [2])
    with pytest.raises(ConfigError, match="acceptance rate"):
        gamma(1.5, 2, 3)
    with pytest.raises(ConfigError, match="levels"):
        hierarchy_latency([0.1, 1.0], alpha, [1, 0], [2])


@pytest.mark.slow
def test_measured_acceptance_matrix_recovers_the_stacks():
    from specpar.experiments.hsd_measure import measure_alpha

    stack = SimulatedStack([0.6, 0.9, 0.8], [LatencyProfile.uniform(c) for c in (0.05, 0.2, 0.5, 1.0)], vocab_size=10)
    for temperature in (0.0, 1.0):
        measured = measure_alpha(stack.models, [[1, 2], [3]], max_tokens=600, temperature=temperature)
        np.testing.assert_allclose(measured, stack.alpha, atol=0.05)
