"""Stopping: at a stop id, at end of text, at a stop string spanning tokens; nothing after the stop, no work after it."""

import pytest
from transformers import GenerationConfig

from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel
from specpar.backends.transformers_model import TransformersModel
from specpar.core.stopping import end_of_text_ids
from tiny_transformers import tiny_module, tiny_tokenizer


def sim_pair(a=1.0):
    target = SimulatedModel(16, seed=4, latency=LatencyProfile(ttft_ms=1.0, tpot_ms=1.0))
    return target, target.drafter(a, LatencyProfile(ttft_ms=0.1, tpot_ms=0.1), seed=3)


@pytest.mark.parametrize("algorithm", ["nonsi", "si", "dsi", "hsd"])
def test_a_stop_id_inside_an_accepted_draft_run_ends_the_output_there(algorithm):
    target, drafter = sim_pair(a=1.0)  # every draft accepted: the stop falls inside a run of accepted drafts
    full = target.greedy_tokens([1], 30)
    j = next(i for i in range(2, 30) if full[i] not in full[:i])  # its first occurrence, inside a lookahead window
    with Engine(target, [drafter] if algorithm == "hsd" else drafter, sp_degree=3) as engine:
        out = engine.generate(
            [1],
            SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[full[j]]),
            algorithm=algorithm,
            lookahead=6,
        )
        assert out.tokens == full[: j + 1] and out.finish_reason == "stop"
        more = engine.generate([1], max_tokens=30, algorithm=algorithm, lookahead=6, temperature=0)
        assert more.tokens == full and more.finish_reason == "length"


def test_dsi_does_no_work_after_the_stop():
    target, drafter = sim_pair(a=0.8)
    full = target.greedy_tokens([1], 40)
    j = next(i for i in range(12, 40) if full[i] not in full[:i])
    with Engine(target, drafter, sp_degree=4) as engine:
        out = engine.generate([1], max_tokens=40, stop_token_ids=[full[j]], lookahead=3, temperature=0)
        whole = engine.generate([1], max_tokens=40, lookahead=3, temperature=0)
    assert out.tokens == full[: j + 1] and out.time_ms < whole.time_ms
    for r in out.timeline:  # times from the generation's start; the stop is at time_ms
        assert r.start_ms <= out.time_ms
        assert r.cancelled or r.end_ms <= out.time_ms
    assert any(r.cancelled for r in out.timeline)  # the tasks in flight at the stop were cancelled


@pytest.fixture(scope="module")
def worded():
    """A tiny target and drafter with a word-level tokenizer (tokens w0 .. w47, joined with spaces)."""
    module = tiny_module(48, seed=6)
    tok = tiny_tokenizer(48)
    target = TransformersModel(module, tok, name="tiny-target")
    drafter = TransformersModel(tiny_module(48, seed=6, scale=0.8), tok, name="tiny-drafter")
    return target, drafter


@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_a_stop_string_split_across_two_tokens(worded, algorithm):
    with Engine(*worded, sp_degree=2) as engine:
        full = engine.generate([3, 4], max_tokens=12, algorithm=algorithm, lookahead=3, temperature=0)
        words = full.text.split()
        assert len(words) == 12
        stop = words[4][-1] + " " + words[5][:2]  # the end of token 5 and the start of token 6
        cut = full.text.index(stop)
        out = engine.generate([3, 4], max_tokens=12, stop=[stop], algorithm=algorithm, lookahead=3, temperature=0)
        assert out.finish_reason == "stop"
        assert out.tokens == full.tokens[:6]
        assert out.text == full.text[:cut]
        assert (
            "".join(engine.stream([3, 4], max_tokens=12, stop=[stop], algorithm=algorithm, temperature=0)) == out.text
        )


@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_end_of_text_inside_a_draft_chunk_ends_the_output_unless_ignore_eos(worded, algorithm):
    target, drafter = worded
    with Engine(target, drafter, sp_degree=2) as engine:
        full = engine.generate([3, 4], max_tokens=16, algorithm=algorithm, lookahead=4, temperature=0)
        j = next(i for i in range(2, 16) if full.tokens[i] not in full.tokens[:i])
        target.module_on("cpu").generation_config = GenerationConfig(eos_token_id=full.tokens[j])
        engine.end_of_text = end_of_text_ids(target)
        try:
            out = engine.generate([3, 4], max_tokens=16, algorithm=algorithm, lookahead=4, temperature=0)
            assert out.tokens == full.tokens[: j + 1] and out.finish_reason == "stop"
            kept = engine.generate(
                [3, 4], max_tokens=16, algorithm=algorithm, lookahead=4, ignore_eos=True, temperature=0
            )
            assert kept.tokens == full.tokens and kept.finish_reason == "length"
        finally:
            target.module_on("cpu").generation_config = GenerationConfig()
            engine.end_of_text = end_of_text_ids(target)


def test_every_end_of_text_id_the_tokenizer_and_generation_config_name():
    """Like the default pair: the config names <|im_end|>, completions end with <|endoftext|>: both stop."""
    tok = tiny_tokenizer(8)
    tok.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_end|>"]})
    module = tiny_module(16, seed=1)
    endoftext, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    module.generation_config = GenerationConfig(eos_token_id=im_end)
    assert end_of_text_ids(TransformersModel(module, tok)) == {endoftext, im_end}
    assert end_of_text_ids(TransformersModel(tiny_module(16, seed=1), tiny_tokenizer(8))) == set()
    plain = tiny_tokenizer(8)
    plain.add_tokens(["<|endoftext|>"])  # added, not flagged special (as a GGUF conversion may leave it)
    assert end_of_text_ids(TransformersModel(tiny_module(16, seed=1), plain)) == {
        plain.convert_tokens_to_ids("<|endoftext|>")
    }


def test_stop_strings_need_a_tokenizer():
    target, drafter = sim_pair()
    with Engine(target, drafter) as engine, pytest.raises(Exception, match="stop strings need a tokenizer"):
        engine.generate([1], stop=["x"])
