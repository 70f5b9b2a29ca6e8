"""Greedy invariant: every algorithm, on every runtime, returns exactly the target's own greedy tokens."""

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import specpar_threads
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.planning import sp_degree_needed

ALGOS = ["nonsi", "si", "dsi"]


@st.composite
def setups(draw, fast: bool):
    vocab = draw(st.integers(2, 16))
    seed = draw(st.integers(0, 10**6))
    target_ms = draw(st.floats(0.2, 1.5)) if fast else draw(st.floats(0.5, 50))
    ttft = target_ms * draw(st.sampled_from([1.0, 1.0, 3.0]))
    per_token = 0.0 if fast else draw(st.sampled_from([0.0, 0.0, 0.05 * target_ms]))
    c = draw(st.floats(0.01, 1.0))
    target = SimulatedModel(vocab, seed=seed, latency=LatencyProfile(ttft, target_ms, per_token))
    drafter = target.drafter(draw(st.floats(0.0, 1.0)), target.latency.scaled(c), seed=draw(st.integers(0, 99)))
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6))
    n = draw(st.integers(1, 20 if fast else 60))
    k = draw(st.integers(1, 8))
    sp = draw(st.integers(1, 6))
    return target, drafter, prompt, n, k, sp


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(fast=False), cancel_frees=st.sampled_from(["now", "end", {"target": "end"}]))
def test_every_algorithm_on_the_virtual_clock_returns_the_target_greedy_tokens(setup, cancel_frees):
    target, drafter, prompt, n, k, sp = setup
    expected = target.greedy_tokens(prompt, n)
    for algo in ALGOS:
        out = generate(
            prompt,
            target,
            drafter,
            algorithm=algo,
            max_tokens=n,
            lookahead=k,
            sp_degree=sp,
            cancel_frees=cancel_frees,
        )
        assert out.tokens == expected, f"{algo} diverged from the target's greedy decoding"
        assert out.accepted + out.rounds == n  # every token is an accepted draft or a target token


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(fast=True))
def test_every_algorithm_on_threads_returns_the_same_tokens_as_the_virtual_clock(setup):
    target, drafter, prompt, n, k, sp = setup
    expected = target.greedy_tokens(prompt, n)
    before = set(threading.enumerate())
    for algo in ALGOS:
        kw = dict(algorithm=algo, max_tokens=n, lookahead=k, sp_degree=sp)
        virtual = generate(prompt, target, drafter, runtime="virtual", **kw)
        threads = generate(prompt, target, drafter, runtime="threads", **kw)
        assert virtual.tokens == threads.tokens == expected
        assert specpar_threads(before) == []  # every worker joined


@pytest.mark.parametrize("a", [0.0, 0.5, 1.0])
def test_long_generation_with_many_rejections_and_paper_settings(a):
    """N = 400 with SP = 7 and Eq. 1's lookahead: thousands of cancellations, still token-exact."""
    target = SimulatedModel(32, seed=11, latency=LatencyProfile.uniform(30.0))
    drafter = target.drafter(a, target.latency.scaled(0.05), seed=3)
    prompt = [1, 2, 3]
    expected = target.greedy_tokens(prompt, 400)
    for k in (1, 4):
        sp = sp_degree_needed(30.0, 1.5, k)
        out = generate(prompt, target, drafter, algorithm="dsi", max_tokens=400, lookahead=k, sp_degree=sp)
        assert out.tokens == expected
