"""Edge values: numbers and prompts that used to crash deep inside are refused up front, in one line, exit 2.

The command-line cases run ``specpar.entrypoints.cli.main`` in this process (a real process for a few, at the end); the
library cases call ``generate`` as a user of the API does.
"""

from __future__ import annotations

import math
import re

import pytest

from cli_check import assert_one_line_error, run_cli
from conftest import make_pair
from specpar import ConfigError, LatencyProfile, SimulatedModel, generate
from specpar.entrypoints.cli import main
from specpar.experiments.prompts import Prompt

QUICK = ["-N", "5", "--repeats", "1", "-k", "2"]
DEEP = '{"a": ' * 5000 + "1" + "}" * 5000
DEEP_LIST = "[" * 5000 + "]" * 5000

CLI_CASES = [
    (["simulate", *QUICK, "--target-tpot", "1e308"], "--target-tpot must be a latency in [0, 1e+09] ms"),
    (["simulate", *QUICK, "--drafter-tpot", "1e308"], "--drafter-tpot must be a latency in [0, 1e+09] ms"),
    (["simulate", *QUICK, "--target-per-token", "1e999"], "argument --target-per-token: must be a finite number"),
    (["simulate", *QUICK, "-c", "1e308"], "drafter latency fraction c must be >= 0 and give a drafter latency"),
    (["simulate", *QUICK, "--temperature", "inf"], "argument --temperature: must be a finite number"),
    (["simulate", *QUICK, "--temperature", "nan"], "argument --temperature: must be a finite number"),
    (["simulate", *QUICK, "--temperature", "-1"], "temperature must be a finite number >= 0"),
    (["simulate", *QUICK, "--seed", "1.5"], "argument --seed: a seed must be an integer >= 0, got '1.5'"),
    (["simulate", *QUICK, "--prompt-length", "100000000"], "--prompt-length must be at most 1,000,000"),
    (["heatmap", "--seed", "-1"], "argument --seed: a seed must be an integer >= 0, got '-1'"),
    (["heatmap", "--resolution", "100000"], "resolution must be an integer in [2, 1000]"),
    (["reproduce", "--resolution", "100000"], "resolution must be an integer in [2, 1000]"),
    (["plan", "--target-tpot", "1e300"], "--target-tpot must be a latency in [0, 1e+09] ms"),
    (["table", "--no-default-pair", "--target-tpot", "1e300", "--drafter-tpot", "1", "-a", "0.5"], "1e+09"),
    (["hsd-plan", "--costs", "inf,1", "--alpha", "x"], "argument --costs"),
    (
        ["hsd-plan", "--costs", "1,2", "--alpha", "x", "--t-max", "99999999999999999999"],
        "must be an integer of at most",
    ),
    (
        ["simulate", "hsd", "--costs", "1,2", "--chain", "0.5", "--t-max", "2147483647"],
        "T_max must be at most",
    ),
    (["simulate", "--sp-degree", "99999"], "argument --sp-degree: at most 1024 servers"),
    (["simulate", "hsd", "--levels", "x"], "argument --levels: must be integers separated by commas"),
    (["reproduce", "--table2-row", "x", "inf", "0.5"], "Table 2 row needs 0 < c <= 1"),
    # real-model commands: refused before any model loads (the model packages are not installed here, so
    # loading first would end in another message)
    (["generate", ""], "give a prompt text, or --dataset SOURCE"),
    (["generate", "--devices", ",", "hi"], "--devices must name at least one device"),
    (["generate", "--temperature", "inf", "hi"], "argument --temperature: must be a finite number"),
    (["bench", "--devices", " , ", "-n", "1"], "--devices must name at least one device"),
    (["generate", "--repeats", "3", "hi"], "--repeats is for --compare"),
    (["generate", "--repeats", "0", "--compare", "hi"], "--repeats must be >= 1, got 0"),  # an IndexError before
    # -k auto weighs latency profiles that a pair loaded from files has not: refused before loading (serve started
    # and refused every request, generate failed after loading); -k adaptive takes them from the machine profile
    (["generate", "-k", "auto", "hi"], "-k auto weighs the models' latency profiles"),
    (["bench", "-k", "auto", "-n", "1"], "--algorithm auto chooses the algorithm and lookahead"),
    (["serve", "-k", "auto"], "-k auto weighs the models' latency profiles"),
    (["generate", "--tree", "2,2", "--top-p", "0.5", "--temperature", "1", "hi"], "token trees (tree=) do not take"),
    # issue 32, 4d: 5,000 levels of nesting were a RecursionError traceback (generate, bench, serve)
    (["generate", "--speculative-config", DEEP, "hi"], "--speculative-config is nested too deeply to read"),
    (["bench", "--speculative-config", DEEP, "-n", "1"], "--speculative-config is nested too deeply to read"),
    (["serve", "--speculative-config", DEEP_LIST], "--speculative-config is nested too deeply to read"),
    # 4g: simulate load's empty and out-of-range values (each exit 0 or another flag's error before); the flags
    # that did nothing under --load are the mode's parser's unknown arguments since `simulate load` is a subcommand
    (["simulate", "load", "--clients", ""], "--clients needs at least one number of clients"),
    (["simulate", "load", "--load", "1", "--policies", " , "], "--policies needs at least one of adaptive"),
    (["simulate", "load", "--load", "1e9"], "argument --load: a rate must be > 0 and below 1e+09, got '1e9'"),
    (["simulate", "load", "--load", "1", "--units", "100000"], "--units must be in [1, 1024], got 100000"),
    (["simulate", "load", "--load", "1", "--sp-degree", "3"], "unrecognized arguments: --sp-degree 3"),
    # 4h
    (["heatmap", "--check-cells", "-1"], "argument --check-cells: must be in [0, 10000], got '-1'"),
    (
        ["profile", "--seed", "1"],
        "specpar profile: error: unrecognized arguments: --seed 1 (see `specpar profile --help`)",
    ),
    (
        ["simulate", "--bogus"],
        "specpar simulate: error: unrecognized arguments: --bogus (see `specpar simulate --help`)",
    ),
]


@pytest.mark.parametrize("argv,needle", CLI_CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CLI_CASES])
def test_an_edge_value_on_the_command_line_is_one_line(argv, needle, capsys):
    assert_one_line_error(main(argv), capsys.readouterr().err, needle)


@pytest.mark.slow
def test_the_installed_command_says_it_in_one_line():
    for argv, needle in [
        (["simulate", *QUICK, "--target-tpot", "1e308"], "--target-tpot must be a latency in [0, 1e+09] ms"),
        (["heatmap", "--seed", "-1"], "a seed must be an integer >= 0"),
        (["generate", ""], "give a prompt text, or --dataset SOURCE"),
    ]:
        p = run_cli(*argv)
        assert_one_line_error(p.returncode, p.stderr, needle)


def test_a_heatmap_with_more_repeats_than_its_batches_hold():
    """More runs per cell than a batch takes (20,000) once left batches empty, and an empty batch crashed."""
    from specpar.experiments.heatmap import compute_heatmap

    h = compute_heatmap(2, n=3, repeats=7000, sp_degree=2, lookaheads=(1, 2))  # 3 acceptance rates x 7000 runs
    assert h.dsi.shape == (2, 3) and (h.dsi <= h.nonsi).all()


def test_undefined_metrics_print_as_a_dash(capsys):
    """N = 1: SI and DSI draft nothing, so acceptance rates are undefined: "-" in the table, null in JSON."""
    assert main(["simulate", "-N", "1", "--repeats", "1", "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower() and re.search(r"│ +- +│", out)
    assert main(["simulate", "-N", "1", "--repeats", "1", "-k", "2", "--json"]) == 0
    assert "NaN" not in capsys.readouterr().out


@pytest.fixture(scope="module")
def pair():
    return make_pair()


API_CASES = [
    (dict(prompt=["a", "b"]), "a text prompt needs a target with a tokenizer"),  # a list of prompts, as text
    (dict(prompt=[1, 2.5]), "position 1 holds 2.5"),
    (dict(prompt=[3, -1]), "position 1 holds -1"),
    (dict(prompt="hello"), "a text prompt needs a target with a tokenizer"),
    (dict(seed=1.5), "seed must be an integer, got 1.5"),
    (dict(seed="7"), "seed must be an integer, got '7'"),
    (dict(temperature=math.inf), "temperature must be a finite number >= 0"),
    (dict(temperature=math.nan), "temperature must be a finite number >= 0"),
    (dict(temperature="1"), "temperature must be a finite number >= 0"),
    (dict(logit_bias={99: 1.0}), "logit_bias names token 99"),  # a ServerError from the first task before
]


@pytest.mark.parametrize("algorithm", ["dsi", "hsd"])
@pytest.mark.parametrize("kw,needle", API_CASES, ids=[str(kw) for kw, _ in API_CASES])
def test_an_edge_value_in_the_api_is_a_config_error(pair, algorithm, kw, needle):
    target, drafter = pair
    kw = {"prompt": [1, 2], **kw}
    with pytest.raises(ConfigError) as info:
        generate(kw.pop("prompt"), target, [drafter] if algorithm == "hsd" else drafter, algorithm=algorithm, **kw)
    assert needle in str(info.value)


def test_a_token_id_beyond_a_transformers_vocabulary_is_refused():
    """A transformers model's embedding has vocab_size rows: a larger id would fail inside its forward pass."""
    from tiny_transformers import tiny_pair

    target, drafter = tiny_pair(vocab=16)
    with pytest.raises(ConfigError, match=r"integers in \[0, 15\]; position 1 holds 16"):
        generate([3, 16], target, drafter, max_tokens=2, runtime="threads")
    assert len(generate([3, 15], target, drafter, max_tokens=2, runtime="threads").tokens) == 2


def test_a_drafter_with_another_vocabulary_is_refused_when_sampling(pair):
    target, _ = pair
    other = SimulatedModel(16, latency=LatencyProfile.uniform(1.0)).drafter(0.8, LatencyProfile.uniform(0.1))
    with pytest.raises(ConfigError, match="the drafter's vocabulary has 16 tokens but the target's has 8"):
        generate([1, 2], target, other, temperature=1.0, max_tokens=4)
    assert len(generate([1, 2], target, other, max_tokens=4).tokens) == 4  # greedy compares token ids only


def test_a_prompt_that_encodes_to_nothing_is_named():
    class Blank:  # a tokenizer with nothing to say about whitespace
        name = "blank-model"

        def encode(self, text):
            return []

    with pytest.raises(ConfigError, match="prompt p1 encodes to no tokens for blank-model"):
        Prompt("p1", text="   ").token_ids(Blank())


def test_the_measured_costs_line_keeps_sub_millisecond_steps():
    """A tiny model's decode step of 0.3 ms printed as "decode step 0 ms ... (= 9.90 decode steps)"."""
    from types import SimpleNamespace

    from specpar.entrypoints.cli.real_models import why_line

    def result(kind_ms, lookahead=3):
        timeline = [SimpleNamespace(kind=k, server=s, start_ms=0.0, end_ms=ms, cancelled=False) for k, s, ms in kind_ms]
        return SimpleNamespace(timeline=timeline, lookahead=lookahead)

    line = why_line(
        {
            "nonsi": [result([("verify", "target0", 0.3)])],
            "si": [result([("verify", "target0", 2.97), ("draft", "drafter0", 0.9)])],
        }
    )
    assert "decode step 0.3 ms" in line and "up to 4 tokens 3 ms (= 9.90 decode steps)" in line
    assert "drafter about 0.3 ms/token (c = 1.00)" in line
    big = why_line(
        {"nonsi": [result([("verify", "target0", 1234.0)])], "si": [result([("verify", "target0", 2500.0)])]}
    )
    assert "decode step 1234 ms" in big and "tokens 2500 ms" in big


def test_loading_errors_in_the_api_name_its_keywords_not_the_flags(capsys):
    """generate(prompt, None, drafter) said "give both --target and --drafter"; the command line still says so."""
    with pytest.raises(ConfigError) as info:
        generate([1, 2], None, "drafter.gguf")
    assert "give both target= and drafter=" in str(info.value) and "--" not in str(info.value)
    assert main(["generate", "hi", "--drafter", "drafter.gguf"]) == 2
    assert "give both --target and --drafter (or neither" in capsys.readouterr().err


def test_a_json_profile_nested_too_deeply_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text(DEEP_LIST)
    assert main(["simulate", "--profile", str(path), *QUICK]) == 2
    assert f"profile '{path}' is nested too deeply to read" in capsys.readouterr().err
