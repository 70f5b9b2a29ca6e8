"""Layer 5: simulated models are deterministic, have the acceptance rate they are built with, and a cache that behaves."""

import os

import numpy as np
import pytest

from conftest import make_pair
from processes import run_python
from specpar import ConfigError, LatencyProfile, SimulatedModel
from specpar.core.calls import Draft, Score
from specpar.core.decoding import Decoding


def test_distribution_is_a_deterministic_function_of_seed_and_prefix():
    a, b = SimulatedModel(8, seed=3), SimulatedModel(8, seed=3)
    h = a.prefix_hash([1, 2, 3])
    np.testing.assert_array_equal(a.probs(h), b.probs(b.prefix_hash([1, 2, 3])))
    assert a.greedy_tokens([1, 2, 3], 20) == b.greedy_tokens([1, 2, 3], 20)
    assert a.greedy_tokens([1, 2, 3], 20) != SimulatedModel(8, seed=4).greedy_tokens([1, 2, 3], 20)
    assert a.prefix_hash([1, 2, 3]) != a.prefix_hash([1, 2, 4]) != a.prefix_hash([2, 1, 3])


@pytest.mark.slow
def test_distributions_do_not_depend_on_the_interpreters_hash_seed():
    """The prefix hash is CPython's tuple hash of ints, which PYTHONHASHSEED (str/bytes only) must not change."""
    script = (
        "from specpar import SimulatedModel; m = SimulatedModel(32, seed=5); d = m.drafter(0.5, seed=2); "
        "print(m.greedy_tokens([1, 2], 30), d.greedy_tokens([1, 2], 30), m.prefix_hash([7, 8, 9]))"
    )
    runs = [run_python(script, 60, env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("0", "1", "12345")]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr for r in runs]
    outputs = {r.stdout for r in runs}
    assert len(outputs) == 1 and outputs.pop().strip()


@pytest.mark.parametrize("a", [0.0, 0.3, 0.8, 1.0])
def test_the_drafters_written_out_greedy_run_equals_its_argmax_chain(a):
    from specpar.backends.simulated import SimulatedLM

    drafter = SimulatedModel(7, seed=11).drafter(a, seed=4)
    for prefix in ([0], [3, 1], [6, 6, 2, 5]):
        h = drafter.prefix_hash(prefix)
        fast, ref = [h], [h]
        assert drafter.greedy_run(h, 40, fast) == SimulatedLM.greedy_run(drafter, h, 40, ref)
        assert fast == ref


def test_probs_are_a_distribution_whose_argmax_is_the_greedy_token_and_with_a_zero():
    m = SimulatedModel(6, seed=1)
    for prefix in ([0], [1, 2], [5, 5, 5, 1]):
        h = m.prefix_hash(prefix)
        p = m.probs(h)
        assert abs(p.sum() - 1) < 1e-12 and (p >= 0).all()
        assert int(np.argmax(p)) == m.argmax(h)
        assert p[m.excluded(h)] == 0.0
        cooler = m.probs(h, temperature=0.5)
        assert cooler[m.argmax(h)] > p[m.argmax(h)]


@pytest.mark.parametrize("a", [0.0, 0.3, 0.77, 1.0])
def test_greedy_drafter_agrees_with_probability_a(a):
    target, drafter = make_pair(seed=2, a=a)
    hashes = [target.prefix_hash([i, j, k]) for i in range(8) for j in range(8) for k in range(40)]
    agree = np.mean([drafter.argmax(h) == target.argmax(h) for h in hashes])
    assert abs(agree - a) < 0.03


@pytest.mark.parametrize("a", [0.0, 0.25, 0.9, 1.0])
def test_sampling_drafter_overlap_is_exactly_a(a):
    target, drafter = make_pair(seed=5, a=a)
    for prefix in ([0], [3, 1], [7, 7, 2]):
        h = target.prefix_hash(prefix)
        p, q = target.probs(h), drafter.probs(h)
        assert abs(q.sum() - 1) < 1e-12
        assert abs(np.minimum(p, q).sum() - a) < 1e-12  # 1 - TV(p, q) = a


def test_bad_model_parameters_are_named():
    with pytest.raises(ConfigError, match="vocab_size"):
        SimulatedModel(1)
    with pytest.raises(ConfigError, match="acceptance_rate"):
        SimulatedModel(4).drafter(1.5)
    with pytest.raises(ConfigError, match="acceptance_rate"):
        SimulatedModel(4).drafter(-0.1)
    with pytest.raises(ConfigError, match="tpot_ms"):
        LatencyProfile(1.0, -2.0)


def test_cache_reuse_and_cropping_give_the_rows_of_a_fresh_server():
    target, _ = make_pair(seed=9, vocab=5)
    dec = Decoding(1.0, 0)
    warm = target.server()
    warm.compute(Score((1, 2, 3, 4, 0, 0), 2, dec))  # cache a branch that will diverge
    for ctx in [(1, 2, 3, 4, 1), (1, 2), (1, 2, 3, 4, 1, 3, 3, 2)]:
        call = Score(ctx, 1, dec)
        np.testing.assert_array_equal(warm.compute(call).rows, target.server().compute(call).rows)


def test_latency_follows_the_cache_prefill_then_decode_steps():
    t = SimulatedModel(4, latency=LatencyProfile(ttft_ms=50, tpot_ms=10, per_token_ms=2))
    s, dec = t.server(), Decoding()
    assert s.duration_ms(Score((1, 2, 3), 0, dec)) == 50  # cold: prefill
    assert s.duration_ms(Score((1, 2, 3, 0, 1), 2, dec)) == 50 + 2 * 2  # cold, scoring 2 drafts
    s.compute(Score((1, 2, 3), 0, dec))
    assert s.duration_ms(Score((1, 2, 3, 0, 1, 2), 3, dec)) == 10 + 2 * 2  # 3 new tokens in one pass
    assert s.duration_ms(Score((1, 2, 3), 0, dec)) == 10  # fully cached: re-run the last token
    d = t.server()
    assert d.duration_ms(Draft((1, 2), 4, dec)) == 50 + 3 * 10  # prefill, then 3 more decode steps


@pytest.mark.parametrize("ttft, tpot, per_token, matters", [(7, 7, 0, False), (7, 7, 0.5, True), (9, 7, 0, True)])
def test_a_server_skips_the_cache_comparison_only_where_the_cache_cannot_change_the_time(
    ttft, tpot, per_token, matters
):
    lat = LatencyProfile(ttft, tpot, per_token)
    assert lat.cache_matters is matters
    dec = Decoding()
    calls = [Score((1, 2, 3, 0, 1), 2, dec), Score((1, 2, 3), 0, dec), Draft((1, 2, 3, 4), 3, dec)]
    for call in calls:
        times = {lat.call_ms(call, cached) for cached in range(len(call.context) + 1)}
        assert (len(times) > 1) is matters  # every cached length gives one time exactly when it cannot matter
    server = SimulatedModel(4, latency=lat).server()
    server.compute(Score((1, 2, 3), 0, dec))  # caches (1, 2, 3): every call above starts with it
    for call in calls:
        assert server.duration_ms(call) == lat.call_ms(call, 3)
