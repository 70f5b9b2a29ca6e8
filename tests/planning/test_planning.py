"""Eq. 1: the paper's own examples, the server kept for the cursor and catch-up where DSI needs them, the smallest
lookahead that keeps up."""

import pytest

from specpar import ConfigError, min_lookahead, sp_degree_needed
from specpar.planning.lookahead import eq1_servers, keeps_cursor_server, satisfies_eq1, verification_servers


def test_the_papers_examples_of_eq1_as_written():
    assert eq1_servers(1.0, 0.05, 5) == 4  # §3.1: drafter at 5%, SP = 4 -> lookahead 5
    assert eq1_servers(1.0, 0.05, 4) == 5
    assert eq1_servers(1.0, 0.10, 2) == 5  # SP vs MP: drafter at 10%, 5 target servers -> lookahead 2


def test_min_lookahead_and_sp_degree_needed_give_the_papers_worked_examples():
    # App. D / §3.1: a drafter at 5% of the target's latency, SP = 4 target servers -> lookahead 5
    assert min_lookahead(1.0, 0.05, 4) == 5
    assert min_lookahead(30.0, 1.5, 4) == 5  # the same in ms
    # §3.1, SP vs MP: a drafter at 10%, lookahead 2 -> 5 target servers (+ 1 drafter: 6 GPUs)
    assert sp_degree_needed(1.0, 0.1, 2) == 5
    assert sp_degree_needed(1.0, 0.05, 5) == 4 and sp_degree_needed(1.0, 0.01, 15) == 7  # ceil(1 / 0.15)
    # a per-token cost of 0 keeps Eq. 1, and no server is kept for the cursor unless asked
    assert min_lookahead(1.0, 0.05, 4, per_token_ms=0.0) == 5
    assert sp_degree_needed(1.0, 0.1, 2, dedicated_cursor=False) == 5


def test_a_server_kept_for_the_cursor_is_counted_only_where_dsi_keeps_one():
    assert keeps_cursor_server() is False and keeps_cursor_server(0.05) is True  # DSI's default: per_token_ms > 0
    assert keeps_cursor_server(0.05, dedicated_cursor=False) is False and keeps_cursor_server(0.0, True) is True
    assert sp_degree_needed(1.0, 0.1, 2, dedicated_cursor=True) == 6  # Eq. 1's 5 verifying + the cursor's
    assert min_lookahead(1.0, 0.05, 4, dedicated_cursor=True) == 7  # 3 verifying: 3 x 7 x 0.05 >= 1
    assert satisfies_eq1(1.0, 0.05, 5, 4) and not satisfies_eq1(1.0, 0.05, 5, 4, dedicated_cursor=True)
    # one server is never kept: it verifies and takes the passes on the cursor in turn
    assert min_lookahead(1.0, 0.1, 1, dedicated_cursor=True) == min_lookahead(1.0, 0.1, 1) == 10
    # with a per-token cost the default keeps one: catch-up counted on sp_degree - 1 verifying servers
    pt = 0.01
    v = verification_servers(1.0, 0.1, 3, pt)
    assert sp_degree_needed(1.0, 0.1, 3, pt) == v + 1 and sp_degree_needed(1.0, 0.1, 3, pt, False) == v


@pytest.mark.parametrize("c", [0.01, 0.03, 0.1, 0.33, 0.5, 1.0])
@pytest.mark.parametrize("sp", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("kept", [False, True])
def test_min_lookahead_is_the_smallest_that_keeps_up(c, sp, kept):
    t, d = 30.0, 30.0 * c
    v = sp - 1 if kept and sp >= 2 else sp  # servers verifying; one is kept for the cursor where DSI keeps one
    k = min_lookahead(t, d, sp, dedicated_cursor=kept)
    assert v * k * d >= t * (1 - 1e-9)  # Eq. 1 for the verification servers
    if k > 1:
        assert v * (k - 1) * d < t
    assert satisfies_eq1(t, d, k, sp, dedicated_cursor=kept)
    assert k == 1 or not satisfies_eq1(t, d, k - 1, sp, dedicated_cursor=kept)
    if not kept or sp >= 2:
        assert sp_degree_needed(t, d, k, dedicated_cursor=kept) <= sp


def test_no_lookahead_can_satisfy_it():
    with pytest.raises(ConfigError, match="no lookahead <= 4 lets 2 target server.*lookahead 5, or sp_degree >= 3"):
        min_lookahead(1.0, 0.1, 2, max_lookahead=4)
    with pytest.raises(ConfigError, match="zero latency"):
        min_lookahead(1.0, 0.0, 7)
    with pytest.raises(ConfigError, match="sp_degree"):
        min_lookahead(1.0, 0.1, 0)
    with pytest.raises(ConfigError, match="target latency"):
        min_lookahead(-1.0, 0.1, 2)


def test_a_chunk_slower_than_a_target_pass_is_one_server_by_eq1_but_dsi_wants_two():
    """k c > 1: Eq. 1 counts one server (the paper's), but DSI's pass on the cursor ends before the chunk exists
    and the next one it starts makes a single server's verification queue; Theorem 2's setting takes two."""
    import statistics

    from specpar import LatencyProfile, SimulatedModel, generate
    from specpar.experiments.heatmap import theorem2_servers

    assert sp_degree_needed(1.0, 0.05, 22) == 1  # 22 x 0.05 = 1.1 > 1
    assert sp_degree_needed(1.0, 0.05, 20) == 1 and sp_degree_needed(1.0, 1.0, 1) == 1
    assert theorem2_servers(0.05, 22) == 2 and theorem2_servers(0.05, 5) == 4

    def mean(algo, sp):
        times = []
        for s in range(20):
            target = SimulatedModel(8, seed=s, latency=LatencyProfile.uniform(1.0))
            drafter = target.drafter(0.94, LatencyProfile.uniform(0.05), seed=s + 5)
            times.append(
                generate([s % 8], target, drafter, algorithm=algo, max_tokens=100, lookahead=22, sp_degree=sp).time_ms
            )
        return statistics.fmean(times)

    si = mean("si", 1)
    assert mean("dsi", 1) > si  # one server: the target-only pass makes verifications queue
    assert mean("dsi", theorem2_servers(0.05, 22)) < si


def test_catch_up_counts_in_eq1():
    # CPU-like: each extra token in a pass costs 0.05 of a decode step; V servers in turn each read V k tokens
    t, d, pt = 1.0, 0.1, 0.05
    for k in (1, 3, 5, 10):
        v = verification_servers(t, d, k, pt)
        assert v * k * d >= t + pt * (v * k - 1) - 1e-9  # v servers keep up, catch-up included
        assert v == 1 or (v - 1) * k * d < t + pt * ((v - 1) * k - 1)  # and v - 1 do not
        assert sp_degree_needed(t, d, k, pt) == v + 1  # DSI keeps a server for the cursor on per-token costs
    assert verification_servers(1.0, 0.1, 5) == 2 == eq1_servers(1.0, 0.1, 5)  # no per-token cost: Eq. 1
    k = min_lookahead(t, d, 7, per_token_ms=pt)
    assert satisfies_eq1(t, d, k, 7, pt) and not satisfies_eq1(t, d, k - 1, 7, pt)


def test_no_server_count_keeps_up_when_reading_a_token_costs_more_than_drafting_it():
    assert verification_servers(1.0, 0.1, 5, per_token_ms=0.5) is None
    with pytest.raises(ConfigError, match="no number of target servers keeps up"):
        sp_degree_needed(1.0, 0.1, 5, per_token_ms=0.5)
    with pytest.raises(ConfigError, match="0.5 ms to read, no less than the 0.1 ms"):
        min_lookahead(1.0, 0.1, 4, per_token_ms=0.5)
    assert not satisfies_eq1(1.0, 0.1, 50, 64, per_token_ms=0.5)
