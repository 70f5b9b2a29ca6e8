"""Eq. 1: the smallest lookahead for an SP degree, with the paper's own examples."""

import pytest

from specpar import ConfigError, min_lookahead, sp_degree_needed


def test_the_papers_examples():
    assert min_lookahead(1.0, 0.05, 4) == 5  # §3.1: drafter at 5%, SP = 4 -> lookahead 5
    assert min_lookahead(1.0, 0.10, 5) == 2  # SP vs MP: drafter at 10%, 6 GPUs (5 targets) -> lookahead 2
    assert sp_degree_needed(1.0, 0.10, 2) == 5


@pytest.mark.parametrize("c", [0.01, 0.03, 0.1, 0.33, 0.5, 1.0])
@pytest.mark.parametrize("sp", [1, 2, 3, 7, 16])
def test_min_lookahead_is_the_smallest_satisfying_eq1(c, sp):
    t, d = 30.0, 30.0 * c
    k = min_lookahead(t, d, sp)
    assert sp * k * d >= t * (1 - 1e-9)  # Eq. 1
    if k > 1:
        assert sp * (k - 1) * d < t
    if sp >= 2:
        assert sp_degree_needed(t, d, k) <= sp


def test_no_lookahead_can_satisfy_it():
    with pytest.raises(ConfigError, match="no lookahead <= 4 satisfies Eq. 1.*sp_degree >= 3"):
        min_lookahead(1.0, 0.1, 2, max_lookahead=4)
    with pytest.raises(ConfigError, match="zero latency"):
        min_lookahead(1.0, 0.0, 7)
    with pytest.raises(ConfigError, match="sp_degree"):
        min_lookahead(1.0, 0.1, 0)
    with pytest.raises(ConfigError, match="target latency"):
        min_lookahead(-1.0, 0.1, 2)


def test_a_chunk_slower_than_a_target_pass_needs_a_second_server():
    assert sp_degree_needed(1.0, 0.05, 22) == 2  # 22 x 0.05 = 1.1 > 1
    assert sp_degree_needed(1.0, 0.05, 20) == 1  # exactly one pass per chunk: no overlap
    assert sp_degree_needed(1.0, 1.0, 1) == 1


def test_dsi_on_the_servers_it_needs_beats_si_where_one_server_did_not():
    import statistics

    from specpar import LatencyProfile, SimulatedModel, generate

    def mean(algo, sp):
        times = []
        for s in range(20):
            target = SimulatedModel(8, seed=s, latency=LatencyProfile.uniform(1.0))
            drafter = target.drafter(0.94, LatencyProfile.uniform(0.05), seed=s + 5)
            times.append(
                generate([s], target, drafter, algorithm=algo, max_new_tokens=100, lookahead=22, sp_degree=sp).time_ms
            )
        return statistics.fmean(times)

    si = mean("si", 1)
    assert mean("dsi", 1) > si  # one server: the target-only pass makes verifications queue
    assert mean("dsi", sp_degree_needed(1.0, 0.05, 22)) < si


def test_a_per_token_verification_cost_counts_in_eq1():
    # CPU-like: each extra verified token costs half a decode step
    assert sp_degree_needed(1.0, 0.1, 5, per_token_ms=0.5) == 7  # (1 + 2.5) / 0.5
    k = min_lookahead(1.0, 0.1, 7, per_token_ms=0.5)  # 7 * 0.1 * k >= 1 + 0.5 k  ->  k >= 5
    assert k == 5 and sp_degree_needed(1.0, 0.1, k, per_token_ms=0.5) <= 7
    with pytest.raises(ConfigError, match="verifications pile up.*raise sp_degree above 5.00"):
        min_lookahead(1.0, 0.1, 4, per_token_ms=0.5)
