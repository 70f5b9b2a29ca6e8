"""The command line's flags (issue 20 item 2): one spelling per setting in every command, old spellings that still
work and warn, --speculative-config beside the flags, help that explains every flag and fits 80 columns.

The checks are functions of a parser, each run on specpar's and, as a control, on a small parser built to break it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

import pytest

from cli_check import assert_one_line_error
from specpar.core import config as core_config
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.entrypoints.cli import arguments, serve
from specpar.entrypoints.cli.arguments import ADVANCED, DeprecatedFlag, command_help
from specpar.entrypoints.cli.main import ArgumentParser, all_commands, build_parser, main

COMMANDS = ("simulate", "simulate load", "simulate hsd", "plan", "hsd-plan", "heatmap", "reproduce", "table",
            "generate", "bench", "profile", "predict", "serve")  # fmt: skip


def commands(parser) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, modes too (``simulate load``)."""
    return all_commands(parser)


def shown(p) -> list[argparse.Action]:
    """A command's flags, advanced ones too (--help=all lists them); not its deprecated spellings, nor the global
    -v."""
    return [a for a in p._actions if a.option_strings and (a.help != argparse.SUPPRESS or hasattr(a, ADVANCED))]


def hidden(p) -> list[argparse.Action]:
    """A command's flags --help=all does not list: its deprecated spellings (and the global -v, listed by `specpar
    --help`)."""
    return [a for a in p._actions if a.option_strings and a.help == argparse.SUPPRESS and not hasattr(a, ADVANCED)
            and a.dest != "verbose"]  # fmt: skip


def visible(p) -> list[argparse.Action]:
    """What a command's --help lists (not --help itself)."""
    return [a for a in p._actions if a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help"]


def parse(parser, argv: list[str]):
    """What main does before the command runs: parse, build the config objects; (args, warning lines)."""
    args = parser.parse_args(argv)
    arguments.build_all(args)
    return args, arguments.warnings_of(args)


def values(args) -> dict:
    return {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "func"}


# -- one spelling ------------------------------------------------------------------------------------
def spelling_drifts(parser) -> dict:
    """{dest: {spelling: [commands]}} for each setting (dest) spelled more than one way across commands, and
    {spelling: {dests}} for each spelling that means more than one setting."""
    spellings, meanings = defaultdict(lambda: defaultdict(list)), defaultdict(set)
    for name, p in commands(parser).items():
        for a in shown(p):
            spellings[a.dest][" ".join(a.option_strings)].append(name)
            for s in a.option_strings:
                meanings[s].add(a.dest)
    drifts = {d: dict(s) for d, s in spellings.items() if len(s) > 1}
    drifts.update({s: d for s, d in meanings.items() if len(d) > 1})
    return drifts


def test_every_setting_is_spelled_one_way_in_every_command():
    parser = build_parser()
    assert sorted(commands(parser)) == sorted(COMMANDS)
    assert spelling_drifts(parser) == {}


def test_control_two_spellings_of_one_setting_are_found():
    parser = ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("a").add_argument("--vocab-size", dest="vocab_size")
    sub.add_parser("b").add_argument("--vocab", dest="vocab_size")
    sub.add_parser("c").add_argument("--seed", dest="other")
    sub.add_parser("d").add_argument("--seed", dest="seed")
    assert spelling_drifts(parser) == {
        "vocab_size": {"--vocab-size": ["a"], "--vocab": ["b"]},
        "--seed": {"other", "seed"},
    }


# -- deprecated spellings ----------------------------------------------------------------------------
SAMPLES = {  # a value for each deprecated flag that takes one and has no choices
    "acceptance_rate": "0.6",
    "vocab_size": "16",
    "target_tpot": "2",
    "drafter_tpot": "0.5",
    "algorithms": "nonsi,si",
    "phi3_acceptance_rate": "0.6",
    "max_tokens": "7",
    "starcoder_latency_ratio": "0.1",
    "drafter_latency_ratio": "0.2",
    "output": "out.png",
    "target": "model.gguf",
}

BASE = {"table": ["--target-tpot", "2", "--drafter-tpot", "1", "-a", "0.5"]}  # what a command needs besides


def alias_problems(parser) -> list[str]:
    """For every hidden (deprecated) spelling of every command: the command line with it must parse to what the
    canonical spelling gives, and say so in exactly one warning line that names both; the canonical spelling warns
    not at all."""
    problems = []
    for name, p in commands(parser).items():
        for old in hidden(p):
            positional = [a for a in p._actions if a.dest == old.dest and not a.option_strings]
            canonical = [a for a in shown(p) if a.dest == old.dest] + positional
            if len(canonical) != 1:
                problems.append(f"{name} {old.option_strings}: no visible spelling of {old.dest}")
                continue
            new = canonical[0].option_strings[-1] if not positional else canonical[0].metavar
            if old.nargs == 0:
                value = []
            elif canonical[0].choices:
                value = [list(canonical[0].choices)[1]]
            elif old.dest in SAMPLES:
                value = [SAMPLES[old.dest]]
            else:
                problems.append(f"{name} {old.option_strings}: give SAMPLES a value for {old.dest}")
                continue
            base = BASE.get(name, [])
            for spelling in old.option_strings:
                with_old, warned = parse(parser, [*name.split(), *base, spelling, *value])
                with_new, quiet = parse(parser, [*name.split(), *base, *([] if positional else [new]), *value])
                if values(with_old) != values(with_new):
                    problems.append(f"{name} {spelling}: parses to other values than {new}")
                if len(warned) != 1 or spelling not in warned[0] or new not in warned[0]:
                    problems.append(f"{name} {spelling}: warnings {warned}")
                if quiet:
                    problems.append(f"{name} {new}: warns {quiet}")
    return problems


def test_every_deprecated_spelling_works_and_warns_once_naming_the_new_one():
    parser = build_parser()
    old = {s for p in commands(parser).values() for a in hidden(p) for s in a.option_strings}
    assert old >= {"--algo", "--algos", "--vocab", "--acceptance", "--target-ms", "--drafter-ms", "--phi3-acceptance"}
    assert alias_problems(parser) == []


def test_control_an_alias_that_does_not_warn_or_stores_elsewhere_is_found():
    parser = ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="command")
    quiet = sub.add_parser("quiet")
    quiet.add_argument("--acceptance-rate", dest="acceptance_rate")
    quiet.add_argument("--acceptance", dest="acceptance_rate", help=argparse.SUPPRESS)  # an alias without a warning
    astray = sub.add_parser("astray")
    vocab = astray.add_argument("--vocab-size", type=int, dest="vocab_size")
    astray.add_argument(  # warns, but parses its value otherwise: text, not a number
        "--vocab", action=DeprecatedFlag, canonical=vocab, dest="vocab_size", default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )  # fmt: skip
    assert alias_problems(parser) == [
        "quiet --acceptance: warnings []",
        "astray --vocab: parses to other values than --vocab-size",
    ]


def test_old_spellings_run_a_command_as_the_new_ones_do(capsys):
    quick = ["-N", "12", "--repeats", "1", "-k", "2", "--json"]
    assert (
        main(["simulate", *quick, "--vocab-size", "16", "-a", "0.6", "--target-tpot", "2", "--drafter-tpot", "0.5"])
        == 0
    )
    new = capsys.readouterr()
    assert new.err == ""
    assert (
        main(["simulate", *quick, "--vocab", "16", "--acceptance", "0.6", "--target-ms", "2", "--drafter-ms", "0.5"])
        == 0
    )
    old = capsys.readouterr()
    assert json.loads(old.out) == json.loads(new.out)
    lines = old.err.splitlines()
    assert len(lines) == 4 and all(line.startswith("specpar simulate: warning: --") for line in lines)
    for was, now in [("--vocab", "--vocab-size"), ("--acceptance", "--acceptance-rate"),
                     ("--target-ms", "--target-tpot"), ("--drafter-ms", "--drafter-tpot")]:  # fmt: skip
        assert sum(f"{was} is deprecated" in line and line.endswith(f"use {now}") for line in lines) == 1


@pytest.mark.parametrize(
    "old, new",
    [
        (["simulate", "--algo", "compare"], ["simulate"]),
        (["simulate", "--algorithm=dsi"], ["simulate"]),
        (["simulate", "--algorithm", "hsd"], ["simulate", "hsd"]),
        pytest.param(
            ["simulate", "--load", "1x", "--requests", "4"],
            ["simulate", "load", "--load", "1x", "--requests", "4"],
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["simulate", "--units", "2", "--clients", "1"],
            ["simulate", "load", "--units", "2", "--clients", "1"],
            marks=pytest.mark.slow,
        ),
    ],
)
def test_simulate_modes_spelled_as_before_run_as_the_subcommands_with_one_warning(old, new, capsys):
    quick = ["-N", "8", "--repeats", "1", "--json"] if "load" not in new else ["-N", "8", "--json"]
    assert main([*new, *quick]) == 0
    now = capsys.readouterr()
    assert main([*old, *quick]) == 0
    before = capsys.readouterr()
    assert json.loads(before.out) == json.loads(now.out) and now.err == ""
    [line] = before.err.splitlines()
    assert "is deprecated" in line and line.endswith(f"use specpar {' '.join(new[: 2 if len(new) > 1 else 1])}")


def test_a_bad_value_is_one_line_naming_the_flag_and_no_warning(capsys):
    for argv, needle in [
        (["serve", "--simulated", "--acceptance", "2"], "acceptance rate a must be in [0, 1], got 2.0"),
        (["serve", "--simulated", "--vocab", "1000000000"], "--vocab-size must be at most 1,000,000"),
        (["simulate", "--runtime", "threads", "--cancel-frees", "end"], "--cancel-frees is a setting of the virtual"),
        (["generate", "hi", "--tree", "2,0"], "k2 must be a positive integer"),
        (["table", "--drafter-tpot", "1"], "a pair given by numbers needs --target-tpot, --drafter-tpot and -a/"),
    ]:
        assert_one_line_error(main(argv), capsys.readouterr().err, needle)


# -- the objects the flags build ----------------------------------------------------------------------
def test_the_commands_that_run_generations_build_their_config_objects():
    parser = build_parser()
    args, _ = parse(parser, ["simulate", "--runtime", "threads", "--call-timeout", "9", "--tree", "2,1"])
    assert args.spec == SpeculativeConfig(algorithm="dsi", lookahead="auto", sp_degree=7, tree=(2, 1))
    assert args.runtime_config == RuntimeConfig(name="threads", call_timeout_s=9.0)
    args, _ = parse(parser, ["simulate", "--link-ms", "3"])  # the target servers' link (the drafter is local)
    assert args.runtime_config.link_ms == {"target": 3.0} and args.link_ms == 3.0
    args, _ = parse(parser, ["bench", "--tree", "best:4", "--no-prefill-replicas", "--runtime", "ray"])
    assert (args.spec.tree, args.spec.prefill_replicas, args.spec.sp_degree) == (args.tree, False, 2)
    assert args.runtime_config.name == "ray" and args.runtime == "ray"
    args, _ = parse(parser, ["table", "--target-tpot", "2", "--drafter-tpot", "1", "-a", "0.5"])
    assert args.pair.latencies()[1].tpot_ms == 1.0 and args.runtime_config.name == "threads"
    args, _ = parse(parser, ["table"])
    assert args.pair is None


def test_speculative_config_wins_over_the_flags_and_says_so():
    args, warned = parse(
        build_parser(),
        ["serve", "--simulated", "-k", "3", "--speculative-config", '{"method": "si", "num_speculative_tokens": 7}'],
    )
    assert (args.spec.algorithm, args.spec.lookahead, args.spec.sp_degree) == ("si", 7, 2)
    assert args.lookahead == 7 and args.algorithm == "si"
    assert warned == ["--speculative-config's num_speculative_tokens 7 overrides --lookahead 3"]
    engine, _ = serve.build_engine(args)
    with engine:
        r = engine.generate([1, 2, 3], max_tokens=12, temperature=0)
        target = engine.target_model
        assert (r.algorithm, r.lookahead, r.tokens) == ("si", 7, target.greedy_tokens([1, 2, 3], 12))


def test_serve_takes_its_model_as_vllm_serve_does_and_the_drafter_from_the_speculative_config():
    spec = '{"model": "drafter.gguf", "method": "si", "num_speculative_tokens": 3}'
    args, warned = parse(build_parser(), ["serve", "target.gguf", "--speculative-config", spec])
    assert (args.target, args.drafter, args.spec.algorithm, args.spec.lookahead) == ("target.gguf", "drafter.gguf",
                                                                                      "si", 3)  # fmt: skip
    assert warned == []
    args, warned = parse(build_parser(), ["serve", "t.gguf", "--drafter", "d.gguf", "--speculative-config", spec])
    assert args.drafter == "drafter.gguf" and warned == [
        "--speculative-config's model drafter.gguf overrides --drafter d.gguf"
    ]
    args, _ = parse(build_parser(), ["bench", "--speculative-config", '{"model": "d.gguf"}'])
    assert args.drafter == "d.gguf"


def test_speculative_config_mistakes_are_one_line(capsys):
    for argv, needle in [
        (["serve", "--speculative-config", "{method: dsi}"], "--speculative-config is not valid JSON"),
        (["serve", "--speculative-config", '{"draft_model": "x"}'], "unknown SpeculativeConfig key 'draft_model'"),
        (["bench", "--speculative-config", '{"method": "si"}'], "this command does not take 'method'"),
        (
            ["generate", "hi", "--speculative-config", '{"method": "hsd"}'],
            "method must be one of nonsi, si, dsi, auto here",
        ),
        (["serve", "--speculative-config", '{"model": 3}'], "--speculative-config: model is a path"),
        (["serve", "--simulated", "--speculative-config", '{"model": "d.gguf"}'], "give either --simulated or a MODEL"),
    ]:
        assert_one_line_error(main(argv), capsys.readouterr().err, needle)


@pytest.mark.parametrize(
    "flags, algorithm, lookahead",
    [
        (["--algorithm", "hsd", "--buffers", "3"], "hsd", 3),
        (["--algorithm", "si", "--tree", "2,1"], "si", 2),
        (["--algorithm", "dsi", "--sp-degree", "3", "--no-dedicated-cursor", "-k", "4"], "dsi", 4),
    ],
)
def test_serve_takes_hsd_tree_and_dsi_options(flags, algorithm, lookahead):
    args, _ = parse(build_parser(), ["serve", "--simulated", "--vocab-size", "16", *flags])
    engine, name = serve.build_engine(args)
    with engine:
        r = engine.generate([1, 2, 3], max_tokens=20, temperature=0)
        assert name == "specpar-simulated" and engine.runtime == "threads"
        assert (r.algorithm, r.lookahead) == (algorithm, lookahead)
        assert r.tokens == engine.target_model.greedy_tokens([1, 2, 3], 20)


def test_the_metadata_choices_are_the_values_the_configs_accept():
    spec = {f.name: f.metadata for f in core_config.fields(SpeculativeConfig)}
    runtime = {f.name: f.metadata for f in core_config.fields(RuntimeConfig) if f.metadata}
    assert tuple(spec["algorithm"]["choices"]) == (*core_config.ALGORITHMS, core_config.AUTO)
    assert tuple(runtime["name"]["choices"]) == core_config.RUNTIMES
    assert tuple(runtime["cancel_frees"]["choices"]) == core_config.CANCEL_MODES
    assert tuple(runtime["placement"]["choices"]) == core_config.PLACEMENTS
    assert tuple(runtime["drafter_placement"]["choices"]) == core_config.DRAFTER_PLACEMENTS


# -- help ---------------------------------------------------------------------------------------------
def unexplained(parser) -> list[str]:
    return [f"{name} {a.option_strings}" for name, p in commands(parser).items() for a in shown(p)
            if a.dest != "help" and not (a.help and len(a.help) > 10)]  # fmt: skip


def too_wide(parser, columns: int = 80, which: str | None = None) -> list[str]:
    return [f"{name}: {line}" for name, p in {"": parser, **commands(parser)}.items()
            for line in command_help(p, which).splitlines() if len(line) > columns]  # fmt: skip


def test_every_flag_of_every_command_is_explained_and_every_help_fits_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    assert unexplained(parser) == []
    assert too_wide(parser) == [] and too_wide(parser, which="all") == []


def test_the_commands_list_at_most_160_flags_and_help_all_lists_the_finer_controls(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    parser = build_parser()
    listed = {name: visible(p) for name, p in commands(parser).items()}
    assert sum(map(len, listed.values())) <= 160
    serve = commands(parser)["serve"]
    advanced = {a.option_strings[-1] for a in shown(serve) if a not in listed["serve"] and a.dest != "help"}
    assert {"--algorithm", "--lookahead", "--sp-degree", "--target-tpot", "--ray-address"} <= advanced
    text, everything = command_help(serve), command_help(serve, "all")
    assert f"{len(advanced)} more flags for finer control: `specpar serve --help=all`" in text
    assert not advanced & flags_in(text) and advanced <= flags_in(everything)
    about = flags_in(command_help(serve, "ray"))  # a word: the flags that mention it, advanced or not
    assert {"--ray-address", "--cpus-per-server"} <= about and "--api-key" not in about
    assert main(["serve", "--help=all"]) == 0 and "--placement" in capsys.readouterr().out


OPTION_LINE = re.compile(r"^  (?:-\w[^,\n]*, )?(--[\w-]+)(?: \S+)?(?:, (--[\w-]+))?", re.M)


def flags_in(text: str) -> set[str]:
    """The flags a help text lists, every spelling of each (``--x, --no-x``)."""
    return {flag for m in OPTION_LINE.finditer(text) for flag in m.groups() if flag}


def test_control_a_count_that_took_the_finer_controls_would_be_over():
    parser = build_parser()
    assert sum(len(shown(p)) - 1 for p in commands(parser).values()) > 160  # -1: --help


def test_control_a_flag_without_words_and_a_help_too_wide_are_found(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parser = ArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("c", description="x " * 60, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--terse", help="k")
    assert unexplained(parser) == ["c ['--terse']"]
    assert len(too_wide(parser)) == 1


@pytest.mark.slow
def test_generate_takes_the_speculative_config_on_real_models(tmp_path_factory, capsys):
    from specpar.backends.transformers_model import TransformersModel
    from tiny_transformers import reference_greedy, save_tiny_pair

    target_dir, drafter_dir = save_tiny_pair(tmp_path_factory.mktemp("tiny"))
    models = ["--target", target_dir, "--drafter", drafter_dir, "--dtype", "float64", "--devices", "cpu"]
    spec = '{"method": "si", "num_speculative_tokens": 3}'
    assert main(["generate", "w1 w7 w3 w9", "-N", "8", "-k", "2", "--speculative-config", spec, "--json", *models]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)["results"]
    target = TransformersModel(target_dir, dtype="float64")
    assert list(result) == ["si"] and result["si"]["lookahead"] == 3
    assert result["si"]["tokens"] == reference_greedy(target, target.encode("w1 w7 w3 w9"), 8)
    assert "num_speculative_tokens 3 overrides --lookahead 2" in out.err
    spec = json.dumps({"model": drafter_dir, "method": "si", "num_speculative_tokens": 3})  # vLLM's key for the drafter
    models = ["--target", target_dir, "--dtype", "float64", "--devices", "cpu"]
    assert main(["generate", "w1 w7 w3 w9", "-N", "8", "--speculative-config", spec, "--json", *models]) == 0
    assert json.loads(capsys.readouterr().out)["results"]["si"]["tokens"] == result["si"]["tokens"]


def test_a_simulated_pair_makes_its_models_prompt_and_latencies():
    import random

    from specpar.backends import LatencyProfile, SimulatedPair
    from specpar.core.errors import ConfigError

    pair = SimulatedPair(target_tpot_ms=10, target_ttft_ms=40, drafter_latency=0.2, acceptance_rate=0.7, vocab_size=16)
    target, drafter = pair.models(seed=5)
    assert (target.seed, drafter.seed, target.vocab_size, drafter.acceptance_rate) == (5, 5 + 7919, 16, 0.7)
    assert target.latency == LatencyProfile(40, 10) and drafter.latency == LatencyProfile(8, 2)
    rng = random.Random(3)
    assert pair.prompt(3) == [rng.randrange(16) for _ in range(8)]
    measured = pair.with_latencies(LatencyProfile(5, 4, 1), LatencyProfile(0.5, 0.4, 0.1), 0.9)
    assert measured.latencies() == (LatencyProfile(5, 4, 1), LatencyProfile(0.5, 0.4, 0.1))
    assert measured.acceptance_rate == 0.9 and measured.models()[1].latency == LatencyProfile(0.5, 0.4, 0.1)
    for bad, words in [
        ({"target_tpot_ms": -1}, "target_tpot_ms must be a latency"),
        ({"acceptance_rate": 1.5}, "acceptance rate a must be in [0, 1]"),
        ({"vocab_size": 1}, "vocab_size must be >= 2"),
        ({"prompt_length": 10**7}, "prompt_length must be at most 1,000,000"),
        ({"drafter_latency": 1e300}, "drafter latency fraction c"),
    ]:
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            SimulatedPair(**bad)


def test_serve_takes_units_and_policy():
    args, _ = parse(build_parser(), ["serve", "--simulated", "--units", "5", "--policy", "si"])
    engine, _ = serve.build_engine(args)
    with engine:
        assert (len(engine.units), engine.policy, engine.load_metrics().units) == (5, "si", 5)
    args, _ = parse(build_parser(), ["serve", "--simulated"])
    engine, _ = serve.build_engine(args)
    with engine:  # the default: sp_degree + 1 units, the adaptive policy
        assert (len(engine.units), engine.policy) == (engine.sp_degree + 1, "adaptive")


def test_verbose_logging_ends_with_its_command(capsys):
    """-v logs to the stderr of its own command only: a second main() in the same process (a test, a notebook)
    found the first one's handler still attached, writing to a stream that pytest had closed ("--- Logging
    error ---" in the next command's output)."""
    import logging

    logger = logging.getLogger("specpar")
    handlers, level = list(logger.handlers), logger.level
    for _ in range(2):
        assert main(["simulate", "-N", "5", "--repeats", "1", "-v"]) == 0
        capsys.readouterr()
    assert logger.handlers == handlers and logger.level == level
