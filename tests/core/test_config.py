"""The configuration objects: one SpeculativeConfig and one RuntimeConfig from the API's edge to the algorithm."""

from __future__ import annotations

import pytest

from specpar import ConfigError, Engine, LatencyProfile, SimulatedModel, generate
from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options

PROMPT = [1, 2, 3]


@pytest.fixture
def pair():
    target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(10.0))
    return target, target.drafter(0.8, LatencyProfile.uniform(1.0), seed=2)


def test_vllm_shape_reads_as_the_config():
    c = SpeculativeConfig.from_vllm({"method": "dsi", "num_speculative_tokens": 5, "sp_degree": 4})
    assert c == SpeculativeConfig(algorithm="dsi", lookahead=5, sp_degree=4)
    assert SpeculativeConfig.coerce('{"method": "si", "num_speculative_tokens": 3}').lookahead == 3
    assert SpeculativeConfig.coerce({"tree": [2, 2, 1], "method": "si"}).tree == (2, 2, 1)
    with pytest.raises(ConfigError, match="unknown SpeculativeConfig key 'draft_model'"):
        SpeculativeConfig.from_vllm({"draft_model": "x"})
    with pytest.raises(ConfigError, match="same setting twice"):
        SpeculativeConfig.from_vllm({"method": "si", "algorithm": "dsi"})
    with pytest.raises(ConfigError, match="not valid JSON"):
        SpeculativeConfig.coerce("{method: dsi}")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"algorithm": "eagle"}, "algorithm must be one of"),
        ({"lookahead": 0}, "lookahead"),
        ({"lookahead": "fast"}, "lookahead"),
        ({"lookahead": True}, "lookahead"),
        ({"sp_degree": 0}, "sp_degree"),
        ({"sp_degree": 100_000}, "sp_degree"),
        ({"tree": [2, 0]}, "width"),
        ({"tree": "2,2", "algorithm": "hsd"}, "token trees"),
        ({"buffers": [2, 0]}, "T_1"),
        ({"buffers": "2,2"}, "buffers"),
        ({"dedicated_cursor": "yes"}, "dedicated_cursor"),
    ],
)
def test_bad_speculative_fields_are_refused_when_made(fields, message):
    with pytest.raises(ConfigError, match=message):
        SpeculativeConfig(**fields)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"name": "gpu"}, "runtime must be one of"),
        ({"cancel_frees": "later"}, "cancel_frees"),
        ({"link_ms": -1.0}, "link_ms"),
        ({"call_timeout_s": 0}, "call_timeout_s"),
        ({"cpus_per_server": float("inf")}, "cpus_per_server"),
        ({"placement": "STRICT"}, "placement"),
        ({"name": "threads", "link_ms": 2.0}, "not on threads"),
        ({"name": "threads", "cancel_frees": "end"}, "virtual clock"),
    ],
)
def test_bad_runtime_fields_are_refused_when_made(fields, message):
    with pytest.raises(ConfigError, match=message):
        RuntimeConfig(**fields)


def test_options_are_split_by_the_object_that_names_them():
    spec, runtime, sampling = split_options(
        {"lookahead": 3, "cancel_frees": "end", "temperature": 0.5}, sampling=("temperature",)
    )
    assert (spec, runtime, sampling) == ({"lookahead": 3}, {"cancel_frees": "end"}, {"temperature": 0.5})
    with pytest.raises(ConfigError, match="unknown option 'lookhead'"):
        split_options({"lookhead": 3})


def test_the_engine_takes_the_vllm_shape_and_a_request_overrides_it(pair):
    target, drafter = pair
    want = target.greedy_tokens(PROMPT, 20)
    with Engine(
        target, drafter, speculative_config={"method": "dsi", "num_speculative_tokens": 5, "sp_degree": 3}
    ) as e:
        assert e.sp_degree == 3 and e.spec.lookahead == 5
        r = e.generate(PROMPT, max_tokens=20, temperature=0)
        assert (r.algorithm, r.lookahead, r.sp_degree, r.tokens) == ("dsi", 5, 3, want)
        r = e.generate(
            PROMPT, max_tokens=20, temperature=0, speculative_config={"method": "si", "num_speculative_tokens": 2}
        )
        assert (r.algorithm, r.lookahead, r.tokens) == ("si", 2, want)
        r = e.generate(PROMPT, max_tokens=20, temperature=0, sp_degree=2, lookahead=4)
        assert (r.algorithm, r.lookahead, r.sp_degree, r.tokens) == ("dsi", 4, 2, want)
        with pytest.raises(ConfigError, match="more than the engine's 3 target servers"):
            e.generate(PROMPT, max_tokens=20, sp_degree=4)
        with pytest.raises(ConfigError, match="cannot change per request"):
            e.generate(PROMPT, max_tokens=20, cancel_frees="end")


def test_a_request_for_non_si_or_hsd_leaves_the_engines_tree_and_ngram_proposer(pair):
    """An engine (or `specpar serve --tree ...`) whose default speculation drafts trees or n-grams still serves a
    request for non-SI (and HSD): they were refused ("token trees work with algorithm 'si' or 'dsi'"), so a server
    started with --tree answered every {"speculative": {"algorithm": "nonsi"}} with a 400. A tree or proposer the
    request names itself is still checked."""
    target, drafter = pair
    want = target.greedy_tokens(PROMPT, 12)
    for defaults in ({"tree": (2, 2, 1)}, {"proposer": "ngram"}):
        with Engine(target, drafter, sp_degree=2, **defaults) as e:
            r = e.generate(PROMPT, max_tokens=12, temperature=0, algorithm="nonsi")
            assert (r.algorithm, r.tokens) == ("nonsi", want)
            assert e.generate(PROMPT, max_tokens=12, temperature=0).tokens == want  # the defaults still apply
            with pytest.raises(ConfigError, match="not 'nonsi'"):
                e.generate(PROMPT, max_tokens=12, algorithm="nonsi", **defaults)
    spec = SpeculativeConfig(algorithm="dsi", tree=(2, 2), proposer="ngram+drafter")
    assert spec.for_request(algorithm="hsd").tree is None
    assert spec.for_request(algorithm="si") == spec.replace(algorithm="si")  # a tree stays for SI and DSI


def test_generate_takes_config_objects_or_their_fields(pair):
    target, drafter = pair
    want = target.greedy_tokens(PROMPT, 16)
    by_fields = generate(PROMPT, target, drafter, max_tokens=16, algorithm="dsi", lookahead=3, sp_degree=2)
    by_object = generate(
        PROMPT,
        target,
        drafter,
        max_tokens=16,
        speculative_config=SpeculativeConfig(algorithm="dsi", lookahead=3, sp_degree=2),
        runtime=RuntimeConfig(name="virtual", cancel_frees="end"),
    )
    assert by_fields.tokens == by_object.tokens == want
    assert by_object.time_ms >= by_fields.time_ms  # a cancelled pass holds its server to the end of the pass


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t, d: generate(None, t, d), "prompt must be text or a list of token ids"),
        (lambda t, d: generate(PROMPT, t, 5), "drafter must be a model"),
        (lambda t, d: generate(PROMPT, 5, d), "target must be a model"),
        (lambda t, d: generate(PROMPT, t, d, stream=5), "stream must be a function"),
        (lambda t, d: generate(PROMPT, t, d, runtime=3), "runtime must be a name"),
        (lambda t, d: generate(PROMPT, t, d, speculative_config=[1]), "speculative_config must be"),
    ],
)
def test_wrong_types_at_the_api_are_one_clear_error(pair, call, message):
    with pytest.raises(ConfigError, match=message):
        call(*pair)


def test_an_explicit_dedicated_cursor_reaches_the_default_lookahead():
    """Eq. 1 counts one verifying server less where DSI keeps one for the cursor (App. D: 5 at 5% and SP 4; 7 with
    the cursor's server kept)."""
    target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(20.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=2)
    plain = generate(PROMPT, target, drafter, max_tokens=8, sp_degree=4)
    kept = generate(PROMPT, target, drafter, max_tokens=8, sp_degree=4, dedicated_cursor=True)
    assert (plain.lookahead, kept.lookahead) == (5, 7)


def test_latencies_given_as_numpy_floats_resolve_dsi_modes_as_plain_bools():
    """A profile refit with NumPy (benchmarks' calibration) gave NumPy floats, whose comparisons made DSI's
    prefill rule a NumPy bool that SpeculativeConfig then refused; the profile keeps plain floats."""
    import numpy as np

    from specpar.algorithms.defaults import prefill_pays_off, verification_costs_grow

    lat = LatencyProfile(np.float64(30.0), np.float64(20.0), np.float64(1.5))
    assert type(lat.ttft_ms) is float and type(lat.per_token_ms) is float
    target = SimulatedModel(8, seed=0, latency=lat)
    assert prefill_pays_off(target) is True and verification_costs_grow(target) is True


def test_a_request_for_auto_that_names_a_setting_gets_the_designed_error_not_a_type_error(pair):
    """for_request(algorithm="auto", lookahead=5) passed lookahead twice to dataclasses.replace (a TypeError, a 500
    on the server); it keeps what the request names, and auto's check refuses it saying why."""
    spec = SpeculativeConfig(algorithm="dsi", lookahead=3)
    assert spec.for_request(algorithm="auto").lookahead is None
    assert spec.for_request(algorithm="auto", lookahead=5).lookahead == 5
    target, drafter = pair
    with Engine(target, drafter, sp_degree=2, lookahead=3) as e:
        with pytest.raises(ConfigError, match="chooses the method and its settings: give no lookahead"):
            e.generate(PROMPT, max_tokens=4, temperature=0, algorithm="auto", lookahead=5)
