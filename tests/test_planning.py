"""Eq. 1: the paper's own examples, the server count with the pass on the cursor and catch-up, the smallest
lookahead that keeps up."""

import pytest

from specpar import ConfigError, min_lookahead, sp_degree_needed
from specpar.planning.lookahead import eq1_servers, satisfies_eq1, verification_servers


def test_the_papers_examples_of_eq1_as_written():
    assert eq1_servers(1.0, 0.05, 5) == 4  # §3.1: drafter at 5%, SP = 4 -> lookahead 5
    assert eq1_servers(1.0, 0.05, 4) == 5
    assert eq1_servers(1.0, 0.10, 2) == 5  # SP vs MP: drafter at 10%, 5 target servers -> lookahead 2


def test_the_server_count_adds_the_pass_on_the_cursor():
    assert sp_degree_needed(1.0, 0.05, 5) == 5  # Eq. 1's 4 verification servers + 1
    assert min_lookahead(1.0, 0.05, 5) == 5
    assert min_lookahead(1.0, 0.05, 4) == 7  # 3 verification servers: 3 x 7 x 0.05 >= 1
    assert sp_degree_needed(1.0, 0.01, 15) == 8  # the repro: Eq. 1 says 7


@pytest.mark.parametrize("c", [0.01, 0.03, 0.1, 0.33, 0.5, 1.0])
@pytest.mark.parametrize("sp", [1, 2, 3, 7, 16])
def test_min_lookahead_is_the_smallest_that_keeps_up(c, sp):
    t, d = 30.0, 30.0 * c
    v = max(1, sp - 1)  # servers verifying; one is kept for the cursor when there are two or more
    k = min_lookahead(t, d, sp)
    assert v * k * d >= t * (1 - 1e-9)  # Eq. 1 for the verification servers
    if k > 1:
        assert v * (k - 1) * d < t
    assert satisfies_eq1(t, d, k, sp) and (k == 1 or not satisfies_eq1(t, d, k - 1, sp))
    if sp >= 2:
        assert sp_degree_needed(t, d, k) <= sp


def test_no_lookahead_can_satisfy_it():
    with pytest.raises(ConfigError, match="no lookahead <= 4 lets 2 target server.*sp_degree >= 4"):
        min_lookahead(1.0, 0.1, 2, max_lookahead=4)
    with pytest.raises(ConfigError, match="zero latency"):
        min_lookahead(1.0, 0.0, 7)
    with pytest.raises(ConfigError, match="sp_degree"):
        min_lookahead(1.0, 0.1, 0)
    with pytest.raises(ConfigError, match="target latency"):
        min_lookahead(-1.0, 0.1, 2)


def test_a_chunk_slower_than_a_target_pass_needs_a_second_server():
    assert sp_degree_needed(1.0, 0.05, 22) == 2  # 22 x 0.05 = 1.1 > 1: one verification at a time, + the cursor
    assert sp_degree_needed(1.0, 0.05, 20) == 2
    assert sp_degree_needed(1.0, 1.0, 1) == 2


def test_dsi_on_the_servers_it_needs_beats_si_where_one_server_did_not():
    import statistics

    from specpar import LatencyProfile, SimulatedModel, generate

    def mean(algo, sp):
        times = []
        for s in range(20):
            target = SimulatedModel(8, seed=s, latency=LatencyProfile.uniform(1.0))
            drafter = target.drafter(0.94, LatencyProfile.uniform(0.05), seed=s + 5)
            times.append(
                generate(
                    [s % 8], target, drafter, algorithm=algo, max_new_tokens=100, lookahead=22, sp_degree=sp
                ).time_ms
            )
        return statistics.fmean(times)

    si = mean("si", 1)
    assert mean("dsi", 1) > si  # one server: the target-only pass makes verifications queue
    assert mean("dsi", sp_degree_needed(1.0, 0.05, 22)) < si


def test_catch_up_counts_in_eq1():
    # CPU-like: each extra token in a pass costs 0.05 of a decode step; V servers in turn each read V k tokens
    t, d, pt = 1.0, 0.1, 0.05
    for k in (1, 3, 5, 10):
        v = verification_servers(t, d, k, pt)
        assert v * k * d >= t + pt * (v * k - 1) - 1e-9  # v servers keep up, catch-up included
        assert v == 1 or (v - 1) * k * d < t + pt * ((v - 1) * k - 1)  # and v - 1 do not
        assert sp_degree_needed(t, d, k, pt) == v + 1
    assert verification_servers(1.0, 0.1, 5) == 2  # no per-token cost: Eq. 1
    k = min_lookahead(t, d, 7, per_token_ms=pt)
    assert satisfies_eq1(t, d, k, 7, pt) and not satisfies_eq1(t, d, k - 1, 7, pt)


def test_no_server_count_keeps_up_when_reading_a_token_costs_more_than_drafting_it():
    assert verification_servers(1.0, 0.1, 5, per_token_ms=0.5) is None
    with pytest.raises(ConfigError, match="no number of target servers keeps up"):
        sp_degree_needed(1.0, 0.1, 5, per_token_ms=0.5)
    with pytest.raises(ConfigError, match="0.5 ms to read, no less than the 0.1 ms"):
        min_lookahead(1.0, 0.1, 4, per_token_ms=0.5)
    assert not satisfies_eq1(1.0, 0.1, 50, 64, per_token_ms=0.5)
