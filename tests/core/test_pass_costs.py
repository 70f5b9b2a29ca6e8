"""PassCosts (core/latency.py): measured costs priced as LatencyProfile prices calls; on a linear profile the same
time for every call, on a measured v(k) the measured one."""

from __future__ import annotations

import random

import pytest

from specpar.core.calls import Context, Draft, DraftTree, Score, ScoreTree
from specpar.core.decoding import GREEDY
from specpar.core.latency import LatencyProfile, PassCosts, slowdown
from specpar.core.trees import TokenTree


def linear(lat: LatencyProfile, k_max: int = 40) -> PassCosts:
    return PassCosts(((1, lat.ttft_ms),), tuple(lat.tpot_ms + lat.per_token_ms * (k - 1) for k in range(1, k_max)))


def calls(rng: random.Random):
    ctx = Context(list(range(rng.randint(2, 30))), rng.randint(1, 30))
    yield Score(ctx, rng.randint(0, 5), GREEDY)
    yield Draft(ctx, rng.randint(1, 8), GREEDY)
    yield DraftTree(ctx, (2, 2, 1), GREEDY)
    tree = TokenTree()
    node = -1
    for t in range(rng.randint(1, 6)):
        node = tree.add(node if rng.random() < 0.6 else -1, t, 0)
    yield ScoreTree(ctx, tree, GREEDY)


def test_a_linear_profile_prices_every_call_as_the_latency_profile_does():
    rng = random.Random(7)
    for lat in (LatencyProfile(40.0, 10.0, 2.5), LatencyProfile(3.0, 3.0), LatencyProfile(9.0, 1.0, 0.125)):
        costs = linear(lat)
        for _ in range(200):
            for call in calls(rng):
                cached = rng.choice([0, 1, len(call.context) // 2, len(call.context)])
                assert costs.call_ms(call, cached) == pytest.approx(lat.call_ms(call, cached), rel=1e-12, abs=1e-12)


def test_measured_passes_are_not_assumed_linear():
    costs = PassCosts(((8, 80.0), (32, 200.0)), (10.0, 19.0, 24.0), call_ms_extra=0.5)
    ctx = Context(list(range(20)), 20)
    assert costs.call_ms(Score(ctx, 2, GREEDY), cached=18) == 19.0 + 0.5  # v(2): two new tokens
    assert costs.call_ms(Score(ctx, 2, GREEDY), cached=17) == 24.0 + 0.5  # v(3)
    assert costs.call_ms(Score(ctx, 2, GREEDY), cached=15) == 24.0 + 2 * 5.0 + 0.5  # past K: the last segment
    assert costs.call_ms(Score(ctx, 2, GREEDY), cached=0) == pytest.approx(
        130.0 + 14.0 + 0.5
    )  # prefill(18) + v(3) - v(1)
    assert costs.call_ms(Draft(ctx, 3, GREEDY), cached=19) == 10.0 + 2 * 10.0 + 0.5
    assert (costs.tpot_ms, costs.ttft_ms, costs.per_token_ms) == (10.0, 80.0, 7.0)


def test_slowdown_reads_the_factors_then_shares_the_cores():
    assert [slowdown((1.0, 1.7), n) for n in (1, 2, 3, 4)] == [1.0, 1.7, pytest.approx(2.55), 3.4]
