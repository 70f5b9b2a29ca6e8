"""The n-gram (prompt lookup) proposer in SI and DSI: alone and in front of a drafter model, chains and token trees,
greedy and sampled, lossless; DSI with it never slower than non-SI; the config's spellings reach it."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import specpar.algorithms.verification as verification
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.core.errors import ConfigError
from specpar.entrypoints.engine import Engine
from stats import chi_square_p_value, output_counts

REPEATING = [1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 1, 2]  # the prompt repeats itself: the n-grams find matches
CASES = [
    ("si", "ngram", None, 5, 1),
    ("dsi", "ngram", None, 5, 3),
    ("si", "ngram:2:3+drafter", None, 4, 1),
    ("dsi", "ngram+drafter", None, 3, 4),
    ("si", "ngram", (2, 2), None, 1),
    ("dsi", "ngram+drafter", (3, 1), None, 3),
    ("dsi", "ngram", "best:6", None, 2),
    ("si", "ngram+drafter", "best:5", None, 1),
]


def _pair(seed: int = 1, per_token: float = 0.0):
    target = SimulatedModel(8, seed=seed, latency=LatencyProfile(1.0, 1.0, per_token))
    return target, target.drafter(0.7, LatencyProfile.uniform(0.1), seed=seed + 2)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["virtual", "threads"])
@pytest.mark.parametrize("algorithm,proposer,tree,k,sp", CASES)
def test_the_ngram_proposer_gives_the_targets_greedy_tokens(algorithm, proposer, tree, k, sp, runtime):
    for seed in range(3):
        target, drafter = _pair(seed)
        prompt = REPEATING[seed:]
        out = generate(prompt, target, drafter if "drafter" in proposer else None, algorithm=algorithm,
                       proposer=proposer, tree=tree, lookahead=k, sp_degree=sp, max_tokens=60,
                       runtime=runtime)  # fmt: skip
        assert out.tokens == target.greedy_tokens(prompt, 60), (seed, proposer)
        assert out.drafted > 0


@pytest.mark.slow
def test_on_transformers_models_too(tmp_path):
    from tiny_transformers import reference_greedy, tiny_pair

    target, drafter = tiny_pair(vocab=64, seed=3, noise=0.1, latencies=(LatencyProfile(1.0, 1.0, 0.1),
                                                                         LatencyProfile(0.3, 0.3)))  # fmt: skip
    prompt = [5, 9, 11, 5, 9, 11, 40, 5, 9]
    expected = reference_greedy(target, prompt, 20)
    for algorithm, proposer, tree in [("si", "ngram", None), ("dsi", "ngram+drafter", None), ("si", "ngram", (2, 1))]:
        out = generate(prompt, target, drafter, algorithm=algorithm, proposer=proposer, tree=tree, lookahead=4,
                       sp_degree=2, max_tokens=20, runtime="virtual")  # fmt: skip
        assert out.tokens == expected, (algorithm, proposer)


def test_lookup_drafts_cost_no_drafter_pass_and_the_fallback_drafts_where_nothing_matches():
    target, drafter = _pair()
    alone = generate(REPEATING, target, None, algorithm="si", proposer="ngram", lookahead=4, max_tokens=40)
    assert alone.drafter_forwards == 0 and alone.drafted > 0
    # a prompt whose last token occurs nowhere before: no match at the start, the drafter model drafts then
    behind = generate([0, 1, 2, 3], target, drafter, algorithm="si", proposer="ngram:2:2+drafter", lookahead=4,
                      max_tokens=40)  # fmt: skip
    assert behind.drafter_forwards > 0
    # with nothing to propose and no drafter the target goes on alone, one token per pass
    nothing = generate([0, 1, 2, 3], target, None, algorithm="si", proposer="ngram:3:3", max_tokens=3)
    assert nothing.drafted == 0 and nothing.target_forwards == 3


@pytest.mark.slow
@pytest.mark.parametrize("sp,per_token", [(2, 0.0), (2, 0.3), (4, 0.3)])
def test_dsi_with_the_ngram_proposer_is_never_slower_than_non_si(sp, per_token):
    """Theorem 1 with a proposer that costs nothing (Eq. 1 cannot hold: no finite SP keeps up with it)."""
    for seed in range(6):
        target, _ = _pair(seed, per_token)
        prompt = REPEATING[seed % 4 :]
        nonsi = generate(prompt, target, algorithm="nonsi", max_tokens=80).time_ms
        for k in (2, 5, 10):
            dsi = generate(prompt, target, None, algorithm="dsi", proposer="ngram", lookahead=k, sp_degree=sp,
                           max_tokens=80).time_ms  # fmt: skip
            assert dsi <= nonsi + 1e-9, (seed, k, dsi, nonsi)


def test_the_theorem_test_can_fail():
    """The controls: with a per-token cost, SI with the same proposer, and DSI without a server kept for the cursor,
    are slower than non-SI (lookups on these random texts are mostly wrong)."""
    target, _ = _pair(0, 0.3)
    nonsi = generate(REPEATING, target, algorithm="nonsi", max_tokens=80).time_ms
    si = generate(REPEATING, target, None, algorithm="si", proposer="ngram", lookahead=5, max_tokens=80)
    shared = generate(REPEATING, target, None, algorithm="dsi", proposer="ngram", lookahead=5, sp_degree=2,
                      dedicated_cursor=False, max_tokens=80)  # fmt: skip
    assert si.time_ms > nonsi and shared.time_ms > nonsi


# -- sampling ------------------------------------------------------------------------------------
V, N = 4, 3
PROMPT = [0, 1, 2, 0, 1]  # its last 2-gram occurred before: lookup drafts [2, 0, 1]


def _law(target):
    return {s: target.sequence_probability(PROMPT, s, 1.0) for s in itertools.product(range(V), repeat=N)}


def _samples(algorithm: str, proposer: str, tree=None, samples: int = 1500) -> tuple[Counter, dict]:
    """1,500 samples: the biased verifier fails at p < 1e-108 in each case with them, p < 1e-6 wanted."""
    target = SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    drafter = target.drafter(0.5, LatencyProfile.uniform(0.1), seed=4)
    counts = output_counts(
        PROMPT,
        target,
        drafter,
        samples,
        algorithm=algorithm,
        proposer=proposer,
        tree=tree,
        lookahead=2,
        sp_degree=3,
        max_tokens=N,
        temperature=1.0,
    )
    return counts, _law(target)


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm,proposer,tree",
    [("si", "ngram", None), ("dsi", "ngram", None), ("si", "ngram:2:2+drafter", None), ("dsi", "ngram", (2, 1)),
     ("si", "ngram:1:1", (3,)), ("dsi", "ngram:2:2+drafter", None), ("si", "ngram:2:2+drafter", (2, 1)),
     ("dsi", "ngram:2:2+drafter", "best:4")],
)  # fmt: skip
def test_point_mass_proposals_sample_the_targets_law(algorithm, proposer, tree):
    counts, law = _samples(algorithm, proposer, tree)
    assert chi_square_p_value(counts, law) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(
    "algorithm,proposer,tree",
    [("si", "ngram", None), ("dsi", "ngram", (2, 1)), ("dsi", "ngram:2:2+drafter", None),
     ("si", "ngram:2:2+drafter", (2, 1))],
)  # fmt: skip
def test_the_sampling_test_catches_a_biased_verifier(monkeypatch, algorithm, proposer, tree):
    """The control: a rejected draft x replaced from p (x included) instead of the residual (p without x for a
    point-mass proposal)."""
    monkeypatch.setattr(verification, "residual", lambda p, q: p)
    counts, law = _samples(algorithm, proposer, tree)
    assert chi_square_p_value(counts, law) < 1e-6


def test_the_sampled_runs_in_front_of_a_drafter_use_both_proposers():
    """The sampling cases with "+drafter" test what they say: lookups draft where the context repeats, the drafter
    model where it does not (PROMPT's last 2-gram matches; most sampled continuations do not)."""
    target = SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    drafter = target.drafter(0.5, LatencyProfile.uniform(0.1), seed=4)
    for algorithm, tree in (("dsi", None), ("si", (2, 1)), ("dsi", "best:4")):
        runs = [generate(PROMPT, target, drafter, algorithm=algorithm, proposer="ngram:2:2+drafter", tree=tree,
                         lookahead=2, sp_degree=3, max_tokens=N, temperature=1.0, seed=i) for i in range(40)]  # fmt: skip
        assert sum(r.drafter_forwards == 0 and r.drafted > 0 for r in runs) > 0, (algorithm, tree)  # lookups alone
        assert sum(r.drafter_forwards > 0 for r in runs) > 0, (algorithm, tree)  # the drafter model


# -- the config's spellings ----------------------------------------------------------------------
def test_vllms_speculative_config_and_a_requests_override_reach_the_proposer():
    target, drafter = _pair()
    expected = target.greedy_tokens(REPEATING, 30)
    vllm = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2}
    out = generate(REPEATING, target, None, speculative_config=vllm, max_tokens=30)
    assert out.tokens == expected and out.algorithm == "dsi" and out.drafter_forwards == 0
    with Engine(target, drafter, sp_degree=3) as engine:
        lookup = engine.generate(REPEATING, max_tokens=30, temperature=0, proposer="ngram", algorithm="si")
        model = engine.generate(REPEATING, max_tokens=30, temperature=0, algorithm="si", lookahead=4)
    assert lookup.tokens == model.tokens == expected
    assert lookup.drafter_forwards == 0 < model.drafter_forwards
    with Engine(target, None, sp_degree=2) as engine:  # no drafter model: the n-gram proposer alone still drafts
        assert engine.generate(REPEATING, max_tokens=30, temperature=0, proposer="ngram").tokens == expected
        with pytest.raises(ConfigError, match="needs a drafter"):
            engine.generate(REPEATING, max_tokens=30, temperature=0)


def test_a_served_request_picks_the_ngram_proposer():
    """A server with no drafter model speculates per request with the n-gram proposer (and without it, cannot)."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    from served import post, running
    from specpar.entrypoints.server.app import create_app

    target, _ = _pair()
    expected = target.greedy_tokens(REPEATING, 20)
    with Engine(target, None, sp_degree=2, runtime="threads", algorithm="nonsi") as engine:
        with running(create_app(engine, "sim", max_model_len=512)) as url:
            body = {"model": "sim", "prompt": REPEATING, "max_tokens": 20, "temperature": 0}
            for speculative in (
                {"proposer": "ngram", "algorithm": "si"},
                {"proposer": "ngram:1:2", "algorithm": "dsi"},
            ):
                status, data = post(url, "/v1/completions", {**body, "speculative": speculative}, key=None)
                assert status == 200, data
                assert [int(t) for t in data["choices"][0]["text"].split()] == expected
            for speculative, needle in (
                ({"algorithm": "dsi"}, "no drafter"),
                ({"proposer": "eagle"}, "proposer must"),
                ({"proposer": "ngram"}, "'si' or 'dsi', not 'nonsi'"),  # the server's algorithm is non-SI
            ):
                status, data = post(url, "/v1/completions", {**body, "speculative": speculative}, key=None)
                assert status == 400 and needle in data["error"]["message"], data
