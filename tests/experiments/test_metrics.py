"""Results: the field's metrics follow their definitions (results.py) and the timeline shows every task."""

import math

import pytest

from conftest import make_pair
from specpar import generate


def test_nonsi_counts_and_timeline():
    target, _ = make_pair(target_ms=2.0)
    out = generate([1], target, algorithm="nonsi", max_tokens=10)
    assert out.target_forwards == 10 and out.drafter_forwards == 0
    assert out.time_ms == 20.0 and out.ttft_ms == 2.0 and out.tpot_ms == 2.0
    assert [(r.server, r.start_ms, r.end_ms) for r in out.timeline] == [
        ("target0", 2.0 * i, 2.0 * i + 2.0) for i in range(10)
    ]
    assert out.mean_acceptance_length == 1.0 and math.isnan(out.acceptance_rate)


@pytest.mark.parametrize("algo", ["si", "dsi"])
@pytest.mark.parametrize("a", [0.4, 0.85])
def test_acceptance_rate_and_per_position_rates_estimate_a(algo, a):
    target, drafter = make_pair(seed=1, a=a, c=0.1)
    out = generate([2], target, drafter, algorithm=algo, max_tokens=3000, lookahead=4, sp_degree=3)
    assert out.acceptance_rate == pytest.approx(a, abs=0.03)
    assert out.accepted + out.rounds == 3000
    assert out.mean_run_length == pytest.approx(3000 / out.rounds)
    assert out.mean_acceptance_length == pytest.approx(3000 / out.verifications)
    if algo == "si":  # a round is one verification: the two lengths are one quantity, at most k + 1
        assert out.verifications == out.rounds and out.mean_acceptance_length == out.mean_run_length <= 5
    for rate, n in zip(out.per_position_acceptance_rate, out.position_drafted):
        if n > 300:
            assert rate == pytest.approx(a, abs=0.06)


def test_si_rounds_are_target_forwards_and_drafts_follow_lookahead():
    target, drafter = make_pair(seed=2, a=1.0, c=0.1)
    out = generate([0], target, drafter, algorithm="si", max_tokens=25, lookahead=4)
    # a = 1: every round accepts all 4 drafts and adds a bonus (5 tokens a round)
    assert out.accepted_per_round == [4, 4, 4, 4, 4]
    assert out.target_forwards == out.rounds == 5
    assert out.drafter_forwards == 20
    # 27 tokens: the sixth round has 2 left, drafts 1 (never the last token) and takes the bonus
    out = generate([0], target, drafter, algorithm="si", max_tokens=27, lookahead=4)
    assert out.accepted_per_round == [4, 4, 4, 4, 4, 1] and out.drafter_forwards == 21
    assert out.per_position_acceptance_rate == [1.0] * 4


def test_dsi_timeline_shows_parallel_target_servers_and_cancelled_work():
    target, drafter = make_pair(seed=3, a=0.7, c=0.05, target_ms=10.0)
    out = generate([1], target, drafter, algorithm="dsi", max_tokens=60, lookahead=2, sp_degree=10)
    servers = {r.server for r in out.timeline}
    assert "drafter0" in servers and len([s for s in servers if s.startswith("target")]) > 3
    assert any(r.cancelled for r in out.timeline)
    for r in out.timeline:
        assert 0.0 <= r.start_ms <= r.end_ms <= out.time_ms + 1e-9
    d = out.to_dict(timeline=True)
    assert d["timeline"][0].keys() == {
        "server",
        "kind",
        "start_ms",
        "end_ms",
        "cancelled",
        "tokens",
        "drafts",
        "cached",
    }
    assert all(r["cached"] is None for r in d["timeline"])  # the virtual clock prices calls instead of recording it
    assert d["tokens"] == out.tokens and d["acceptance_rate"] == out.acceptance_rate


@pytest.mark.parametrize("ttft", [1.0, 3.0])
def test_dsi_mean_acceptance_length_counts_completed_verification_tasks_in_the_timeline(ttft):
    """Tokens per completed verification task, counted here from the timeline: every target task that was not
    cancelled, minus the prefills of idle replicas at the start (TTFT > TPOT: one per replica but the first)."""
    from specpar import LatencyProfile, SimulatedModel

    target = SimulatedModel(8, seed=4, latency=LatencyProfile(ttft, 1.0))
    drafter = target.drafter(1.0, LatencyProfile(0.1 * ttft, 0.1), seed=9)
    out = generate([1], target, drafter, algorithm="dsi", max_tokens=40, lookahead=3, sp_degree=5)
    done = [r for r in out.timeline if r.server.startswith("target") and not r.cancelled]
    warm_ups = 4 if ttft > 1 else 0
    assert out.verifications == len(done) - warm_ups == out.target_forwards - warm_ups
    assert out.mean_acceptance_length == 40 / out.verifications <= 3 + 1
    # a = 1: one run, chained across every window (the target never corrects a draft)
    assert out.rounds == 1 and out.mean_run_length == 40 > out.lookahead + 1
