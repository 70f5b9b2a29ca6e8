"""algorithm="auto" (prediction/auto.py): the engine runs the method its prediction calls fastest, and says so."""

from __future__ import annotations

import pytest

from specpar import Engine, generate
from specpar.backends.simulated import SimulatedModel
from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.params import SamplingParams
from specpar.prediction.auto import bucket
from specpar.prediction.machine import MachineProfile

PROMPT = [i % 16 for i in range(20)]


def pair(c: float, a: float, per_token: float = 0.0, seed: int = 1):
    target = SimulatedModel(16, seed=seed, latency=LatencyProfile(10.0, 10.0, per_token))
    return target, target.drafter(a, LatencyProfile(10.0 * c, 10.0 * c), seed=seed + 1)


def test_auto_runs_plain_decoding_where_speculation_cannot_pay():
    target, drafter = pair(c=0.9, a=0.05, per_token=3.0)  # a slow drafter that is almost always wrong
    result = generate(PROMPT, target, drafter, algorithm="auto", max_tokens=40)
    assert result.algorithm == "nonsi"
    assert result.auto["method"] == "nonsi" and result.auto["reason"].startswith("non-SI: predicted")
    assert result.auto["predicted_ms"] == pytest.approx(result.time_ms)  # nothing random in non-SI: exact
    assert result.tokens == target.greedy_tokens(PROMPT, 40)


def test_auto_runs_dsi_where_it_pays():
    target, drafter = pair(c=0.05, a=0.9)  # the paper's regime: a fast, accurate drafter, passes of one step
    result = generate(PROMPT, target, drafter, algorithm="auto", max_tokens=40)
    assert result.algorithm == "dsi" and result.auto["method"] in ("dsi", "tree-dsi")
    assert result.tokens == target.greedy_tokens(PROMPT, 40)
    plain = generate(PROMPT, target, drafter, algorithm="nonsi", max_tokens=40)
    assert result.time_ms < 0.5 * plain.time_ms


@pytest.mark.slow
def test_the_reason_names_the_others_and_the_cost_of_a_pass():
    target, drafter = pair(c=0.1, a=0.8, per_token=2.0)
    with Engine(target, drafter, units=1) as engine:
        choice = engine.auto().choose(20, 40)
    words = choice.reason
    assert words.startswith(f"{choice.chosen.label}: predicted ")
    assert "decode steps on this machine" in words and words.count(" ms") >= 3
    assert f"a pass over {1 + next(p.spec.lookahead for p in choice.predictions.best if p.spec.lookahead)}" in words


def test_auto_caps_dsi_at_the_requests_sp_degree():
    target, drafter = pair(c=0.05, a=0.9)
    with Engine(target, drafter, sp_degree=4, units=1) as engine:
        result = engine.generate(PROMPT, max_tokens=30, algorithm="auto", sp_degree=2)
    assert result.algorithm == "dsi" and result.sp_degree <= 2  # DSI pays here: the cap, not another method


def test_auto_never_considers_hsd_which_an_engine_of_one_drafter_cannot_run():
    target, drafter = pair(c=0.05, a=0.9)
    with Engine(target, drafter, units=1) as engine:
        choice = engine.auto().choose(20, 30)
        with pytest.raises(ConfigError, match="list of drafters"):  # what it would run, had it chosen HSD
            engine.generate(PROMPT, max_tokens=5, algorithm="hsd", buffers=(3,))
    assert "hsd" not in [p.method for p in choice.predictions.best + choice.predictions.tried]
    assert "HSD" not in choice.reason


@pytest.mark.slow
def test_auto_takes_a_profile_file(tmp_path):
    target, drafter = pair(c=0.05, a=0.9)
    # a machine where every pass of two tokens or more costs ten steps: only plain decoding pays
    slow = MachineProfile.from_latency(LatencyProfile(10.0, 10.0, 100.0), LatencyProfile(0.5, 0.5), 0.9)
    slow.save(tmp_path / "m.json")
    with Engine(target, drafter, units=1, profile=str(tmp_path / "m.json")) as engine:
        assert engine.generate(PROMPT, max_tokens=20, algorithm="auto").algorithm == "nonsi"
    with Engine(target, drafter, units=1) as engine:  # control: the models' own costs
        assert engine.generate(PROMPT, max_tokens=20, algorithm="auto").algorithm == "dsi"


@pytest.mark.slow
def test_auto_keeps_its_choices_per_kind_of_request():
    target, drafter = pair(c=0.1, a=0.8)
    with Engine(target, drafter, units=1) as engine:
        auto = engine.auto()
        first = auto.predictions(20, 30)
        assert auto.predictions(31, 30) is first and auto.predictions(33, 30) is not first
        assert bucket(20) == 32 and bucket(1) == 16


@pytest.mark.parametrize("field", [{"tree": "2,1"}, {"proposer": "ngram"}, {"lookahead": 3}])
def test_auto_with_settings_of_its_own_is_one_clear_error(field):
    target, drafter = pair(c=0.1, a=0.8)
    with pytest.raises(ConfigError, match="auto"):
        generate(PROMPT, target, drafter, max_tokens=5, speculative_config=SpeculativeConfig(algorithm="auto",
                                                                                                 **field))  # fmt: skip


def test_vllm_spelling_method_auto():
    assert SpeculativeConfig.coerce({"method": "auto"}).algorithm == "auto"
    target, drafter = pair(c=0.05, a=0.9)
    with Engine(target, drafter, method="auto", units=1) as engine:  # the spelling, as a keyword
        assert engine.generate(PROMPT, max_tokens=10, temperature=0).auto is not None
        assert engine.generate(PROMPT, max_tokens=10, temperature=0, method="nonsi").algorithm == "nonsi"
    with pytest.raises(ConfigError, match="given twice"):
        Engine(target, drafter, method="auto", algorithm="dsi")


def test_the_schedulers_shares_of_an_auto_request_come_from_autos_predictions():
    from specpar.prediction.shares import choice_curve

    target, drafter = pair(c=0.05, a=0.9)
    with Engine(target, drafter, sp_degree=3) as engine:  # 4 units
        choice = engine.auto().choose(20, 30)
        curve = choice_curve(choice, 4, "adaptive")
    assert choice.spec.algorithm == "dsi" and curve.max_units == choice.spec.sp_degree + 1
    top = curve.option(curve.max_units)  # the largest share runs auto's choice, at its predicted time
    assert (top.algorithm, top.sp_degree, top.lookahead) == ("dsi", choice.spec.sp_degree, choice.spec.lookahead)
    assert top.ms_per_token == pytest.approx(choice.chosen.ms / 30)
    rates = [curve.option(u).ms_per_token for u in range(1, curve.max_units + 1)]
    assert rates == sorted(rates, reverse=True) and rates[-1] < rates[-2]  # fewer units: slower, never faster
    assert curve.option(1).algorithm in ("si", "nonsi")
    assert choice_curve(choice, 4, "dsi").min_units == curve.max_units  # a fixed policy: the choice alone


@pytest.mark.parametrize("sampling", [{"top_k": 5}, {"top_p": 0.9}, {"repetition_penalty": 1.2}])
def test_auto_leaves_out_token_trees_for_a_request_with_logits_processors(sampling):
    target, drafter = pair(c=0.05, a=0.5)  # a machine where a token tree is the fastest
    with Engine(target, drafter, algorithm="auto", sp_degree=1, units=1) as engine:
        greedy = engine.generate(PROMPT, SamplingParams(temperature=0, max_tokens=30))
        assert greedy.auto["method"].startswith("tree")  # control: without processors auto picks a tree here
        result = engine.generate(PROMPT, SamplingParams(temperature=0.8, seed=1, max_tokens=30, **sampling))
    assert not result.auto["method"].startswith("tree") and result.auto["method"] != "nonsi"
    assert len(result.tokens) == 30


def test_auto_under_a_fixed_policy_chooses_only_what_the_policy_runs():
    target, drafter = pair(c=0.05, a=0.9)  # DSI pays
    with Engine(target, drafter, algorithm="auto", sp_degree=2, policy="si") as engine:
        result = engine.generate(PROMPT, SamplingParams(temperature=0, max_tokens=30))
    assert result.algorithm == "si" and result.auto["method"] in ("si", "tree-si", "ngram-si")


def test_outputs_past_the_simulated_length_share_one_search_scaled(monkeypatch):
    import specpar.prediction.auto as auto_module
    from specpar.prediction.simulate import MAX_SIMULATED, predicted_ms

    target, drafter = pair(c=0.1, a=0.8)
    searches = []
    search = auto_module.predict_methods
    monkeypatch.setattr(auto_module, "predict_methods", lambda *a, **k: searches.append(a[2]) or search(*a, **k))
    with Engine(target, drafter, units=1) as engine:
        auto = engine.auto()
        long, longer = auto.predictions(20, 200), auto.predictions(20, 300)
    assert searches == [MAX_SIMULATED]  # one search for every output past the simulated length
    assert (long.max_tokens, longer.max_tokens) == (200, 300)
    plain = predicted_ms(auto.profile, SpeculativeConfig(algorithm="nonsi"), 32, 300, auto.shape)
    assert longer.of("nonsi").ms == pytest.approx(plain, rel=1e-9)  # scaled as a search at 300 tokens predicts
    fastest = longer.fastest  # a drafting method's kept time scaled by its own first token's time
    assert fastest.ms == pytest.approx(fastest.first_ms + (long.of(fastest.method).ms - fastest.first_ms) * 299 / 199)


def test_identical_requests_at_once_share_one_search(monkeypatch):
    import threading
    import time

    import specpar.prediction.auto as auto_module

    target, drafter = pair(c=0.1, a=0.8)
    searches, search = [], auto_module.predict_methods

    def slow(*args, **kwargs):
        searches.append(args[1:3])
        time.sleep(0.2)  # long enough for the other threads to ask meanwhile
        return search(*args, **kwargs)

    monkeypatch.setattr(auto_module, "predict_methods", slow)
    with Engine(target, drafter, units=1) as engine:
        auto = engine.auto()
        out = []
        threads = [threading.Thread(target=lambda: out.append(auto.predictions(20, 30))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(searches) == 1 and len(out) == 3 and all(o is out[0] for o in out)


def test_an_engine_of_auto_builds_its_chooser_once_when_it_starts(monkeypatch):
    import threading
    import time

    import specpar.prediction.auto as auto_module

    target, drafter = pair(c=0.1, a=0.8)
    built, build = [], auto_module.for_servers

    def slow(*args, **kwargs):
        built.append(1)
        time.sleep(0.2)
        return build(*args, **kwargs)

    monkeypatch.setattr(auto_module, "for_servers", slow)
    with Engine(target, drafter, algorithm="auto", units=1) as engine:
        assert built == [1]  # made (measured, for real models) as the engine starts, not in a request
        engine.generate(PROMPT, SamplingParams(temperature=0, max_tokens=5))
    with Engine(target, drafter, units=1) as engine:  # another default: made on first need, once
        assert built == [1]
        threads = [threading.Thread(target=engine.auto) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert built == [1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("c", [0.05, 0.2, 0.5])
@pytest.mark.parametrize("a", [0.5, 0.7, 0.8, 0.9])
def test_what_auto_reports_is_what_ran_over_a_grid(a, c):
    target, drafter = pair(c=c, a=a)
    with Engine(target, drafter, algorithm="auto", sp_degree=3) as engine:  # units = 4: the adaptive shares
        result = engine.generate(PROMPT, SamplingParams(temperature=0, max_tokens=40))
    spec = engine.auto().choose(len(PROMPT), 40).spec
    assert (result.algorithm, result.sp_degree if result.algorithm == "dsi" else 1) == (
        spec.algorithm, spec.sp_degree if spec.algorithm == "dsi" else 1)  # fmt: skip
    assert result.auto["label"] == engine.auto().choose(len(PROMPT), 40).chosen.label
    assert "chosen" not in result.auto  # ran as chosen (alone on the engine)


def test_an_auto_request_on_fewer_units_says_what_ran_and_what_was_chosen():
    target, drafter = pair(c=0.05, a=0.9)
    with Engine(target, drafter, algorithm="auto", sp_degree=3) as engine:  # 4 units, 4 requests at once
        results = engine.generate([PROMPT] * 4, SamplingParams(temperature=0, max_tokens=40))
        chosen = engine.auto().choose(len(PROMPT), 40).chosen.label
    for result in results:
        if result.algorithm == "dsi" and result.sp_degree == 3 and "segments" not in result.details:
            assert result.auto["label"] == chosen and "chosen" not in result.auto
        else:  # a share smaller than the choice's: the report names what ran
            assert result.auto["chosen"] == chosen and result.auto["label"] != chosen
    assert any("chosen" in r.auto for r in results)  # four requests cannot all have DSI SP 3's four units


@pytest.mark.parametrize("sp", [1, 2, 4])
def test_a_requests_passes_get_the_threads_its_prediction_gave_them(sp, monkeypatch):
    import dataclasses

    import specpar.entrypoints.requests as requests_module
    from tests.tiny_transformers import tiny_pair

    target, drafter = tiny_pair()  # real models on the CPU: their passes' threads share its cores
    profile = dataclasses.replace(
        MachineProfile.from_latency(LatencyProfile(10.0, 10.0), LatencyProfile(1.0, 1.0), 0.8), cores=12
    )
    monkeypatch.setattr(requests_module, "cpu_cores", lambda: profile.cores)
    with Engine(target, drafter, units=1, sp_degree=4, profile=profile) as engine:
        shape = engine.auto().shape
        for algorithm in ("nonsi", "si", "dsi"):
            spec = SpeculativeConfig(algorithm=algorithm, lookahead=None if algorithm == "nonsi" else 3, sp_degree=sp)
            assert engine.threads_for(algorithm, sp_degree=sp) == shape.threads(profile, spec), algorithm
    assert shape.threads(profile, SpeculativeConfig(algorithm="dsi", lookahead=3, sp_degree=sp)) == 12 // (sp + 1)


def test_auto_chooses_dsi_only_on_as_many_servers_as_the_engines_units_run():
    target, drafter = pair(c=0.05, a=0.9)  # DSI pays: auto would take every target server it may
    with Engine(target, drafter, algorithm="auto", sp_degree=3, units=2) as engine:  # DSI SP s needs s + 1 units
        result = engine.generate(
            PROMPT, SamplingParams(temperature=0, max_tokens=30)
        )  # (it failed: 1 server, 3 needed)
        tried = engine.auto().choose(len(PROMPT), 30).predictions.tried
    assert {p.spec.sp_degree for p in tried if p.spec.algorithm == "dsi"} == {1}  # 2 units: DSI SP 1 at most
    assert result.auto["method"] != "nonsi" and "chosen" not in result.auto  # it ran what it chose
