"""Sampling invariant: SI's and DSI's output follows the target's distribution, jointly over the first tokens.

Fixed seeds make every test deterministic (not flaky). Two deliberately biased
verifiers must fail the same tests, so they have the power to catch a bug.
"""

import itertools

import pytest

import specpar.algorithms.verification as verification
from specpar import LatencyProfile, SimulatedModel, generate
from stats import chi_square_p_value, output_counts

# 2,000 samples: the biased verifiers below fail at p = 2e-47 (from p) and 0 (from q) with them, p < 1e-6 wanted
# (3e-110 and 0 with 4,000)
V, N, PROMPT, SAMPLES = 4, 3, [0, 1], 2000
# SI verifies chains of 2; DSI uses lookahead 1 so that its second token is judged against the
# previous task's extra row (the chunk-boundary path), not the way SI judges it.
LOOKAHEAD = {"nonsi": None, "si": 2, "dsi": 1}


def target_model():
    return SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)


def drafters(target):
    lat = LatencyProfile.uniform(0.1)
    return {
        # q = a p + (1 - a) onehot(z): acceptance exactly a
        "mixed": target.drafter(0.5, lat, seed=4),
        # an unrelated model over the same vocabulary: a general overlap, residual != p
        "other-model": SimulatedModel(V, seed=99, latency=lat, spread=1.5),
    }


def exact_joint(target, temperature):
    return {seq: target.sequence_probability(PROMPT, seq, temperature) for seq in itertools.product(range(V), repeat=N)}


def sample_outputs(target, drafter, algorithm, temperature, runtime="virtual"):
    return output_counts(
        PROMPT,
        target,
        drafter,
        SAMPLES,
        algorithm=algorithm,
        max_tokens=N,
        lookahead=LOOKAHEAD[algorithm],
        sp_degree=3,
        temperature=temperature,
        runtime=runtime,
    )


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize(
    "algorithm,drafter_name",
    [("nonsi", "mixed"), ("si", "mixed"), ("si", "other-model"), ("dsi", "mixed"), ("dsi", "other-model")],
)  # non-SI never calls the drafter: with the other model its samples are the same, seed for seed
def test_joint_distribution_of_the_first_three_tokens_is_the_targets(algorithm, drafter_name, temperature):
    target = target_model()
    drafter = drafters(target)[drafter_name]
    p_value = chi_square_p_value(
        sample_outputs(target, drafter, algorithm, temperature), exact_joint(target, temperature)
    )
    assert p_value > 1e-3, f"{algorithm} with the {drafter_name} drafter does not follow the target (p = {p_value:.2g})"


BIASES = {
    # the classic bug: replace a rejected draft with a fresh sample from p instead of norm(max(0, p - q))
    "resample-from-p": lambda p, q: p,
    # replace a rejected draft with a sample from the drafter
    "resample-from-q": lambda p, q: q / q.sum(),
}


@pytest.mark.slow
@pytest.mark.parametrize("bias", sorted(BIASES))
@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_a_biased_verifier_fails_the_distribution_test(monkeypatch, algorithm, bias):
    target = target_model()
    drafter = drafters(target)["other-model"]
    monkeypatch.setattr(verification, "residual", BIASES[bias])
    p_value = chi_square_p_value(sample_outputs(target, drafter, algorithm, 1.0), exact_joint(target, 1.0))
    assert p_value < 1e-6, f"the test could not detect the {bias} bias (p = {p_value:.2g})"


def test_mixed_drafter_acceptance_rate_is_a_when_sampling():
    target = target_model()
    out = generate(
        PROMPT,
        target,
        target.drafter(0.7, LatencyProfile.uniform(0.1), seed=1),
        algorithm="si",
        max_tokens=3000,
        lookahead=3,
        temperature=1.0,
        seed=3,
    )
    assert abs(out.acceptance_rate - 0.7) < 0.03


@pytest.mark.parametrize("algorithm", ["nonsi", "si"])
def test_sampled_tokens_do_not_depend_on_the_runtime(algorithm):
    """Position-keyed randomness: the same seed gives the same sampled tokens on the virtual clock and threads."""
    target = SimulatedModel(6, seed=2, latency=LatencyProfile.uniform(0.3))
    drafter = target.drafter(0.6, LatencyProfile.uniform(0.05), seed=1)
    for seed in range(3):
        kw = dict(algorithm=algorithm, max_tokens=25, lookahead=3, temperature=1.0, seed=seed, coupling="rejection")
        assert (
            generate([1], target, drafter, **kw).tokens
            == generate([1], target, drafter, runtime="threads", **kw).tokens
        )
