"""The machine profile type (prediction/machine.py): its costs, its JSON round trip, its constructors, bad input."""

from __future__ import annotations

import json

import pytest

from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile, slowdown
from specpar.prediction.machine import FORMAT, MachineProfile, ModelCosts, load_or_build


def measured() -> MachineProfile:
    target = ModelCosts("T", ((16, 100.0), (64, 250.0)), {1: (20.0, 38.0, 50.0), 2: (20.0, 25.0, 30.0)})
    drafter = ModelCosts("D", ((16, 30.0),), {1: (5.0, 9.0), 2: (5.0, 7.0)})
    return MachineProfile(
        key={"target": "abc", "backend": "llama", "settings": {"exact": True}, "cores": 2},
        target=target,
        drafter=drafter,
        contention=(1.0, 1.8),
        overhead_ms={"threads": 0.05, "ray": 1.5},
        per_token_ms=0.3,
        acceptance_rate=0.7,
        ngram={"match_rate": 0.4, "acceptance_rate": 0.5},
        cores=2,
        meta={"when": "now", "load_average": [1.0, 1.0, 1.0]},
    )


def test_pass_costs_come_from_the_table_of_the_threads_given():
    t = measured().target
    assert [t.pass_cost(k, 2) for k in (1, 2, 3)] == [20.0, 25.0, 30.0]
    assert [t.pass_cost(k, 1) for k in (1, 2, 3)] == [20.0, 38.0, 50.0]
    assert t.pass_cost(5, 1) == 50.0 + 2 * 12.0  # past K: the last segment's line
    assert t.table(4) == t.table(2) and t.table(0) == t.table(1)  # nearest measured count below, else the smallest
    assert {len(v) for v in t.pass_ms.values()} == {3}


def test_prefill_interpolates_and_extends_the_last_segment():
    t = measured().target
    assert t.prefill(16) == 100.0 and t.prefill(64) == 250.0
    assert t.prefill(40) == pytest.approx(175.0)
    assert t.prefill(112) == pytest.approx(400.0)
    assert measured().drafter.prefill(500) == 30.0  # one point: the same for every length


def test_json_round_trip_is_exact():
    p = measured()
    d = json.loads(json.dumps(p.to_dict()))
    assert d["format"] == FORMAT
    assert MachineProfile.from_dict(d) == p
    assert MachineProfile.from_dict(d).meta == p.meta


def test_save_and_load(tmp_path):
    p = measured()
    p.save(tmp_path / "m.json")
    assert MachineProfile.load(tmp_path / "m.json") == p
    assert load_or_build(tmp_path / "m.json") == p


def test_contention_extends_in_proportion_past_the_last_factor():
    p = measured()
    assert slowdown(p.contention, 1) == 1.0 and slowdown(p.contention, 2) == 1.8
    assert slowdown(p.contention, 4) == pytest.approx(3.6)
    assert p.has_contention
    free = p.with_free_cores(3)
    assert slowdown(free.contention, 3) == 1.0 and slowdown(free.contention, 6) == 2.0 and not free.has_contention


def test_from_latency_is_the_linear_model():
    lat = LatencyProfile(40.0, 10.0, 2.0)
    p = MachineProfile.from_latency(lat, lat.scaled(0.1), 0.8)
    assert [p.target.pass_cost(k, 7) for k in (1, 2, 5)] == [10.0, 12.0, 18.0]
    assert p.target.prefill(1) == p.target.prefill(999) == 40.0
    assert p.drafter.pass_cost(1, 1) == pytest.approx(1.0) and p.acceptance_rate == 0.8
    assert not p.has_contention and p.overhead_ms == {"threads": 0.0, "ray": 0.0}


def test_gpu_like_passes_cost_about_one_step():
    p = MachineProfile.gpu_like(25.0, 0.1, 0.8)
    assert p.target.pass_cost(1, 1) == p.target.pass_cost(8, 1) == 25.0
    assert p.drafter.pass_cost(1, 1) == pytest.approx(2.5) and not p.has_contention


@pytest.mark.parametrize(
    "change, words",
    [
        ({"format": "specpar-profile/1"}, "not a specpar machine profile"),
        ({"contention": [1.5, 2.0]}, "contention"),
        ({"contention": [1.0, 0.5]}, "contention"),
        ({"acceptance_rate": 1.5}, "acceptance_rate"),
        ({"cores": 0}, "cores"),
        ({"target": {"name": "T", "prefill_ms": [[16, 1.0]], "pass_ms": {"x": [1.0]}}}, "thread counts"),
        ({"target": {"name": "T", "prefill_ms": [[16, 1.0], [8, 2.0]], "pass_ms": {"1": [1.0]}}}, "increasing"),
        ({"target": {"name": "T", "prefill_ms": [[16, -1.0]], "pass_ms": {"1": [1.0]}}}, "prefill_ms"),
        ({"target": {"name": "T", "prefill_ms": [[16, 1.0]], "pass_ms": {"1": []}}}, "pass_ms"),
        ({"target": None}, "target"),
        ({"ngram": {"match_rate": "often"}}, "ngram"),
    ],
)
def test_bad_profiles_are_one_clear_error(change, words):
    d = {**measured().to_dict(), **change}
    with pytest.raises(ConfigError, match=words):
        MachineProfile.from_dict(d)


def test_a_missing_or_corrupt_file_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        MachineProfile.load(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        MachineProfile.load(tmp_path / "bad.json")


def test_without_a_file_or_models_there_is_no_profile():
    with pytest.raises(ConfigError, match="a profile file or the models to measure"):
        load_or_build()
