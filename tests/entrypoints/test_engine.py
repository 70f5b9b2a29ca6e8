"""The Engine: loads once, serves many requests, one or a list, from many threads, never interleaved on a cache."""

import threading

import pytest

from specpar import ConfigError, Engine, LatencyProfile, SamplingParams, SimulatedModel, generate
from tiny_transformers import tiny_pair

PROMPTS = [[1, 2], [3], [4, 5, 6], [2, 2], [7]]


def requests(n: int = 12):
    """(prompt, params, algorithm) for 5 requests (and a sixth): greedy and sampled, every algorithm."""
    return [
        (PROMPTS[0], SamplingParams(temperature=0, max_tokens=n), "dsi"),
        (PROMPTS[1], SamplingParams(max_tokens=n - 2, temperature=0.8, seed=5, top_k=3), "si"),
        (PROMPTS[2], SamplingParams(temperature=0, max_tokens=n - 3, repetition_penalty=1.3), "nonsi"),
        # DSI sampled on threads is exact in distribution but not reproducible per seed (whether a position is
        # decided by a draft's test or by the target alone depends on timing): sampled requests use SI here
        (PROMPTS[3], SamplingParams(max_tokens=n - 1, temperature=1.0, seed=2, top_p=0.8), "si"),
        (PROMPTS[3], SamplingParams(temperature=0, max_tokens=n - 1, repetition_penalty=0.9), "dsi"),
        (PROMPTS[4], SamplingParams(temperature=0, max_tokens=n - 4, stop_token_ids=[3]), "si"),
    ]


def hammer(engine, n_threads=8, n=12):
    """8 threads x 5 requests at once on one engine; every output must equal its single-call output."""
    single = [engine.generate(p, params, algorithm=a, lookahead=3).tokens for p, params, a in requests(n)]
    outputs, errors = {}, []

    def client(t):
        try:
            for i, (p, params, a) in enumerate(requests(n)):
                outputs[t, i] = engine.generate(p, params, algorithm=a, lookahead=3).tokens
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(outputs[t, i] == single[i] for t in range(n_threads) for i in range(len(single)))


@pytest.mark.parametrize("runtime", ["virtual", "threads"])
def test_many_threads_on_one_engine_of_simulated_models(runtime):
    target = SimulatedModel(8, seed=1, latency=LatencyProfile.uniform(0.05 if runtime == "threads" else 1.0))
    with Engine(target, target.drafter(0.7, LatencyProfile.uniform(0.01), seed=2), sp_degree=3, runtime=runtime) as e:
        hammer(e)


@pytest.mark.slow
def test_many_threads_on_one_engine_of_tiny_transformers_models():
    target, drafter = tiny_pair(vocab=32, seed=2)
    with Engine(target, drafter, sp_degree=2) as engine:
        assert engine.runtime == "threads"  # real models default to real time
        hammer(engine, n=7)


def test_a_list_of_prompts_gives_the_outputs_of_single_calls():
    target = SimulatedModel(8, seed=3)
    drafter = target.drafter(0.6, seed=1)
    params = SamplingParams(max_tokens=15, temperature=0.7, seed=4, min_p=0.1)
    with Engine(target, drafter) as engine:
        assert engine.runtime == "virtual"  # simulated models default to the virtual clock
        batch = engine.generate(PROMPTS[:3], params)
        assert [r.tokens for r in batch] == [engine.generate(p, params).tokens for p in PROMPTS[:3]]
    assert [r.tokens for r in batch] == [
        generate(p, target, drafter, max_tokens=15, temperature=0.7, seed=4, min_p=0.1).tokens for p in PROMPTS[:3]
    ]


def test_stream_gives_token_ids_without_a_tokenizer_and_stops_when_closed():
    target = SimulatedModel(8, seed=3)
    with Engine(target, target.drafter(0.6, seed=1)) as engine:
        whole = engine.generate([1], max_tokens=20, lookahead=2, temperature=0)
        runs = list(engine.stream([1], max_tokens=20, lookahead=2, temperature=0))
        assert [t for run in runs for t in run] == whole.tokens
        it = engine.stream([1], max_tokens=20, lookahead=2, temperature=0)
        next(it)
        it.close()  # the generation ends; the engine serves the next request
        assert engine.generate([1], max_tokens=20, lookahead=2, temperature=0).tokens == whole.tokens


def test_text_in_text_out_with_a_tokenizer(tmp_path):
    from tiny_transformers import save_tiny_pair

    target_dir, drafter_dir = save_tiny_pair(tmp_path)
    with Engine(target_dir, drafter_dir, sp_degree=2) as engine:
        out = engine.generate("w3 w4", max_tokens=6, algorithm="si", lookahead=2, temperature=0)
        assert out.text == "".join(engine.stream("w3 w4", max_tokens=6, algorithm="si", lookahead=2, temperature=0))
        assert len(out.text.split()) == 6


def test_engine_errors():
    target = SimulatedModel(8, seed=3)
    engine = Engine(target)
    with pytest.raises(ConfigError, match="needs a drafter"):
        engine.generate([1], max_tokens=4, temperature=0)
    with pytest.raises(ConfigError, match="tokenizer"):
        engine.generate("some text", algorithm="nonsi")
    with pytest.raises(ConfigError, match="unknown sampling parameter"):
        engine.generate([1], algorithm="nonsi", top_q=3)
    engine.close()
    with pytest.raises(ConfigError, match="closed"):
        engine.generate([1], algorithm="nonsi")


def test_a_result_without_local_forward_passes_has_no_overhead_figure():
    """Simulated servers (and Ray actors) log no forward passes in this process: overhead is None, not missing
    (`specpar bench --runtime ray` read it and crashed)."""
    target = SimulatedModel(8, seed=3)
    with Engine(target, target.drafter(0.6, seed=1)) as engine:
        assert engine.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=5)).overhead is None


def test_a_request_without_sampling_params_warns_once_that_it_samples():
    """Issue 32, item 6: generate() is greedy, an Engine request samples (vLLM's default); a user moving from one to
    the other is told once per engine, and not when the request says what it wants."""
    import warnings

    from specpar import SamplingDefaultWarning

    target = SimulatedModel(16, seed=1, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(0.1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        generate([1, 2], target, drafter, max_tokens=4)  # greedy by default: nothing to say
        with Engine(target, drafter) as engine:
            engine.generate([1, 2], SamplingParams(max_tokens=4))  # params given: what the user asked for
            engine.generate([1, 2], max_tokens=4, temperature=0)
            assert not [w for w in caught if w.category is SamplingDefaultWarning]
            engine.generate([1, 2], max_tokens=4)  # no params, no temperature: it samples at 1
            list(engine.stream([1, 2], max_tokens=4))
            engine.generate([[1, 2], [3]], max_tokens=4)
    said = [w for w in caught if w.category is SamplingDefaultWarning]
    assert len(said) == 1 and "samples at temperature 1" in str(said[0].message)
    assert said[0].filename == __file__  # it points at the caller's line
