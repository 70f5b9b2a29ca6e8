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
    k = min_lookahead(30.0, 30.0 * c, sp)
    assert sp_degree_needed(30.0, 30.0 * c, k) <= sp
    if k > 1:
        assert sp_degree_needed(30.0, 30.0 * c, k - 1) > sp


def test_no_lookahead_can_satisfy_it():
    with pytest.raises(ConfigError, match="no lookahead <= 4 satisfies Eq. 1.*sp_degree >= 3"):
        min_lookahead(1.0, 0.1, 2, max_lookahead=4)
    with pytest.raises(ConfigError, match="zero latency"):
        min_lookahead(1.0, 0.0, 7)
    with pytest.raises(ConfigError, match="sp_degree"):
        min_lookahead(1.0, 0.1, 0)
    with pytest.raises(ConfigError, match="target latency"):
        min_lookahead(-1.0, 0.1, 2)
