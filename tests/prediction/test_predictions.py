"""Predictions on the virtual clock (prediction/simulate.py, methods.py): on simulated models with known costs the
prediction is the engine's run, exactly; on a machine with contention and passes that are not linear in their
tokens the full profile ranks configurations as the machine does, and a linear profile without contention (the
old model) mis-ranks them."""

from __future__ import annotations

import statistics

import pytest

from specpar import generate
from specpar.backends.simulated import SimulatedModel
from specpar.core.config import SpeculativeConfig
from specpar.core.latency import LatencyProfile
from specpar.prediction.machine import MachineProfile, ModelCosts
from specpar.prediction.methods import EngineShape, predict_methods
from specpar.prediction.simulate import DRAFTER_SEED, VOCAB, pair_count, predicted_ms

TARGET, DRAFTER, A = LatencyProfile(30.0, 10.0, 2.0), LatencyProfile(3.0, 1.0, 0.25), 0.7

SPECS = [
    SpeculativeConfig(algorithm="nonsi"),
    SpeculativeConfig(algorithm="si", lookahead=3),
    SpeculativeConfig(algorithm="dsi", lookahead=2, sp_degree=2, dedicated_cursor=False, prefill_replicas=True),
    SpeculativeConfig(algorithm="dsi", lookahead=4, sp_degree=3, dedicated_cursor=True, prefill_replicas=True),
    SpeculativeConfig(algorithm="si", tree="2,2,1"),
    SpeculativeConfig(algorithm="dsi", tree="best:6", sp_degree=2, dedicated_cursor=False, prefill_replicas=True),
    SpeculativeConfig(algorithm="hsd", buffers=(3,)),
]


def engine_run_ms(spec: SpeculativeConfig, prompt_tokens: int, n: int) -> float:
    """The mean time of the engine's runs of ``spec`` on the simulated models a prediction samples, with their
    LatencyProfiles (the paper's cost model), on the virtual clock with target passes that run to their end."""
    times = []
    for r in range(pair_count(spec, n)):
        target = SimulatedModel(VOCAB, seed=r, latency=TARGET)
        drafter = target.drafter(A, DRAFTER, seed=r + DRAFTER_SEED)
        prompt = [(r + 5 * i) % VOCAB for i in range(prompt_tokens)]
        result = generate(prompt, target, None if spec.algorithm == "nonsi" else [drafter] if spec.algorithm == "hsd"
                          else drafter, speculative_config=spec, max_tokens=n, cancel_frees={"target": "end"})  # fmt: skip
        times.append(result.time_ms)
    return statistics.fmean(times)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.algorithm}-{s.lookahead}-{s.tree}")
def test_the_prediction_is_the_engines_run_on_models_with_known_costs(spec):
    profile = MachineProfile.from_latency(TARGET, DRAFTER, A)
    predicted = predicted_ms(profile, spec, 12, 40)
    assert predicted == pytest.approx(engine_run_ms(spec, 12, 40), rel=1e-9)


def test_control_a_profile_of_other_costs_predicts_another_time():
    spec = SPECS[2]
    other = MachineProfile.from_latency(LatencyProfile(30.0, 10.0, 0.0), DRAFTER, A)  # no per-token cost
    assert predicted_ms(other, spec, 12, 40) != pytest.approx(engine_run_ms(spec, 12, 40), rel=1e-3)


def cpu_machine() -> tuple[MachineProfile, MachineProfile]:
    """A machine whose passes cost one step up to 4 tokens and 8 ms more per token after, and whose cores are shared
    (two busy servers run 1.8x slower each); and the linear model the App. F profile (pair_profile.py) fits to it (tpot, and the per-token
    cost of a pass over 6 tokens), without contention."""
    v = tuple([10.0] * 4 + [10.0 + 8 * (k - 4) for k in range(5, 17)])
    target = ModelCosts("T", ((20, 60.0),), {1: v})
    drafter = ModelCosts("D", ((20, 10.0),), {1: tuple(2.0 + 0.3 * (k - 1) for k in range(1, 17))})
    full = MachineProfile(key={}, target=target, drafter=drafter, acceptance_rate=0.6, contention=(1.0, 1.8, 2.7),
                          per_token_ms=0.3)  # fmt: skip
    linear = MachineProfile.from_latency(LatencyProfile(60.0, 10.0, (v[5] - v[0]) / 5), LatencyProfile(10.0, 2.0, 0.3),
                                         0.6)  # fmt: skip
    return full, linear


def test_the_full_profile_ranks_configurations_as_the_machine_runs_them_and_a_linear_one_does_not():
    full, linear = cpu_machine()
    arms = SPECS[:3]

    def order(profile, seed):
        times = [predicted_ms(profile, s, 20, 64, seed=seed) for s in arms]
        return sorted(range(len(arms)), key=times.__getitem__)

    machine = order(full, seed=100)  # the machine: its own costs, other draws than the predictions'
    assert order(full, seed=0) == machine == [1, 0, 2]  # SI, non-SI, DSI (its three busy servers share two cores)
    assert order(linear, seed=0) != machine  # control: linear passes and no contention put non-SI first


def test_every_method_is_predicted_at_its_best_settings_fastest_first():
    profile = MachineProfile.from_latency(TARGET, DRAFTER, A)
    profile = MachineProfile(key={}, target=profile.target, drafter=profile.drafter, acceptance_rate=A,
                             ngram={"match_rate": 0.5, "acceptance_rate": 0.8})  # fmt: skip
    result = predict_methods(profile, 10, 30, EngineShape(units=1, targets=2))
    methods = [p.method for p in result.best]
    # (HSD needs a list of drafters; a profile of one drafter model predicts it as SI, which it cannot run as)
    assert sorted(methods) == sorted(["nonsi", "si", "dsi", "tree-si", "tree-dsi", "ngram-si", "ngram-dsi"])
    assert [p.ms for p in result.best] == sorted(p.ms for p in result.best)
    for best in result.best:  # each method's best is the fastest of its settings tried (up to the two rounds' draws)
        quick = min(p.ms for p in result.tried if p.method == best.method)
        assert best.ms <= 1.25 * quick
    assert result.of("nonsi").ms == pytest.approx(30.0 + 29 * 10.0)
    assert result.fastest.method != "nonsi"  # a fast drafter at a = 0.7: speculation pays


def test_ray_predictions_pay_the_round_trip_per_call_and_the_drafter_stays_beside_the_driver():
    base = MachineProfile.from_latency(TARGET, DRAFTER, A)
    profile = MachineProfile(key={}, target=base.target, drafter=base.drafter, acceptance_rate=A,
                             overhead_ms={"threads": 0.0, "ray": 3.0})  # fmt: skip
    result = predict_methods(profile, 10, 30, EngineShape(units=1, targets=2), methods=("nonsi", "si"),
                             runtimes=("threads", "ray"))  # fmt: skip
    by = {(p.method, p.runtime): p.ms for p in result.best}
    assert by["nonsi", "ray"] == pytest.approx(by["nonsi", "threads"] + 30 * 3.0)  # one target call per token
    assert by["si", "ray"] > by["si", "threads"]
    assert all(p.label.endswith("on Ray") == (p.runtime == "ray") for p in result.best)
