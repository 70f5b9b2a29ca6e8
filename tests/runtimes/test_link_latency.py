"""The virtual clock's link model: every call pays a round trip of 2 x link_ms; the tokens do not change."""

import pytest

from conftest import make_pair
from specpar import ConfigError, generate
from specpar.entrypoints.cli import main


def test_every_call_pays_a_round_trip_and_the_tokens_stay_the_targets():
    target, drafter = make_pair(seed=4, a=0.8, target_ms=10.0)
    plain = generate([1, 2], target, algorithm="nonsi", max_tokens=20)
    linked = generate([1, 2], target, algorithm="nonsi", max_tokens=20, runtime_options={"link_ms": 3.0})
    assert linked.tokens == plain.tokens
    assert linked.time_ms == pytest.approx(plain.time_ms + 20 * 2 * 3.0)
    by_pool = {"target": 3.0, "drafter": 1.0}  # non-SI has no drafter: the same time
    assert generate([1, 2], target, algorithm="nonsi", max_tokens=20, runtime_options={"link_ms": by_pool}).time_ms == (
        pytest.approx(linked.time_ms)
    )
    kw = dict(algorithm="dsi", max_tokens=60, lookahead=3, sp_degree=4)
    fast, slow = (generate([1, 2], target, drafter, runtime_options={"link_ms": x}, **kw) for x in (0.0, 5.0))
    assert slow.tokens == fast.tokens == target.greedy_tokens([1, 2], 60)
    assert slow.time_ms > fast.time_ms


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_bad_link_latency_is_refused(bad):
    target, _ = make_pair()
    with pytest.raises(ConfigError, match="link_ms"):
        generate([1], target, algorithm="nonsi", max_tokens=2, runtime_options={"link_ms": bad})


def test_link_ms_on_threads_is_a_one_line_error(capsys):
    assert main(["simulate", "--runtime", "threads", "--link-ms", "2", "-N", "4", "--repeats", "1"]) == 2
    assert "--link-ms is modelled on the virtual clock" in capsys.readouterr().err
