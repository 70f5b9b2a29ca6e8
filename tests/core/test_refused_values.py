"""Values that used to pass every check and give garbage: temperatures so small that logits / T overflowed (every
token the last id, acceptance 0), and prompt ids outside a simulated model's vocabulary. Each gets the right answer
or one clear error, in generate(), the command line and the server alike (they all build a Decoding)."""

from __future__ import annotations

import pytest

from cli_check import assert_one_line_error
from conftest import make_pair
from specpar import ConfigError, SamplingParams, generate
from specpar.core.decoding import MIN_TEMPERATURE, Decoding
from specpar.entrypoints import cli
from tiny_transformers import tiny_pair


@pytest.fixture(scope="module")
def peaked_pair():
    """A tiny transformers pair whose logits reach about 2400: logits / T overflowed below T = 1.3e-305."""
    return tiny_pair(vocab=64, seed=0, scale=1000.0)


@pytest.mark.parametrize("temperature", [1e-250, 1e-305, MIN_TEMPERATURE])
@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_a_tiny_temperature_samples_the_targets_most_likely_tokens(peaked_pair, temperature, algorithm):
    target, drafter = peaked_pair
    greedy = generate([1, 2, 3], target, None, algorithm="nonsi", max_tokens=10, runtime="threads").tokens
    out = generate([1, 2, 3], target, drafter, algorithm=algorithm, max_tokens=10, temperature=temperature, sp_degree=2)
    assert out.tokens == greedy
    if algorithm == "si":  # every position decided by a draft test: some drafts are accepted, as when greedy
        assert out.acceptance_rate > 0


@pytest.mark.parametrize("temperature", [MIN_TEMPERATURE / 2, 5e-324])
def test_a_subnormal_temperature_is_refused_everywhere_with_one_message(temperature, capsys):
    target, drafter = make_pair()
    match = r"temperature .* is below 2.2250738585072014e-308, the smallest normal float.*give 0"
    for make in (
        lambda: Decoding(temperature),
        lambda: SamplingParams(temperature=temperature),
        lambda: generate([1], target, drafter, max_tokens=2, temperature=temperature),
    ):
        with pytest.raises(ConfigError, match=match):
            make()
    code = cli.main(["simulate", "-N", "4", "--temperature", repr(temperature)])
    assert_one_line_error(code, capsys.readouterr().err, "is below 2.2250738585072014e-308")


def test_prompt_ids_outside_a_simulated_vocabulary_are_refused():
    target, drafter = make_pair(vocab=8)
    for prompt in ([1, 8], [-1], [2**64]):
        with pytest.raises(ConfigError, match=r"token ids must be integers in \[0, 7\]"):
            generate(prompt, target, drafter, max_tokens=2)
    assert generate([0, 7], target, drafter, max_tokens=2).tokens == target.greedy_tokens([0, 7], 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(stop=5), "stop must be a string or a list of strings, got 5"),
        (dict(stop_token_ids=3), "stop_token_ids must be a list of token ids, got 3"),
        (dict(stop_token_ids="12"), "stop_token_ids must be a list of token ids, got '12'"),
    ],
)
def test_stops_of_the_wrong_type_are_named_not_a_type_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SamplingParams(**kwargs)


def test_a_drafter_latency_so_small_that_eq1_overflows_is_one_line(capsys):
    code = cli.main(["simulate", "-N", "4", "--drafter-tpot", "1e-320"])
    assert_one_line_error(code, capsys.readouterr().err, "a drafter with a latency of 1e-320 ms drafts infinitely fast")


def test_an_unknown_runtime_option_is_named_not_a_type_error():
    target, drafter = make_pair()
    with pytest.raises(
        ConfigError, match=r"the threads runtime takes no option 'bogus': its options are .*stall_floor_s"
    ):
        generate([1], target, drafter, max_tokens=2, runtime="threads", runtime_options={"bogus": 1})
    out = generate([1], target, drafter, max_tokens=2, runtime="threads", runtime_options={"stall_floor_s": 5})
    assert out.tokens == target.greedy_tokens([1], 2)


def test_max_tokens_past_what_the_command_line_takes_is_refused():
    """10^30 new tokens of a simulated model (no context window) ran forever."""
    with pytest.raises(ConfigError, match="must be at most 2147483647"):
        SamplingParams(max_tokens=10**30)
    target, drafter = make_pair()
    with pytest.raises(ConfigError, match="must be at most 2147483647"):
        generate([1], target, drafter, max_tokens=2**63)
