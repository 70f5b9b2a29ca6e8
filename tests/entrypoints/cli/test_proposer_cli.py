"""The proposer and the adaptive lookahead from the command line: `--proposer ngram[:MIN:MAX][+drafter]` on
`generate`, `-k adaptive` on `simulate` (with drifting acceptance) and on real models (from their machine profile)."""

from __future__ import annotations

import json

import pytest

from specpar.backends.transformers_model import TransformersModel
from specpar.entrypoints import cli
from tiny_transformers import reference_greedy, save_tiny_pair

# a profile of the tiny models in specpar's cache would add predictions and an auto row to --compare
pytestmark = pytest.mark.usefixtures("isolated_cache")

PROMPT = "w1 w7 w3 w1 w7 w3 w1"  # repeats itself: the lookups match


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny"))


def _models(pair_dirs):
    return ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]


@pytest.mark.parametrize("proposer,drafter_passes", [("ngram", False), ("ngram:1:2+drafter", True)])
def test_generate_with_the_ngram_proposer_gives_the_targets_greedy_tokens(pair_dirs, capsys, proposer, drafter_passes):
    args = ["generate", PROMPT, "-N", "10", "--proposer", proposer, "-k", "3", "--sp-degree", "2", "--compare"]
    assert cli.main(args + ["--json"] + _models(pair_dirs)) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    target = TransformersModel(pair_dirs[0], dtype="float64")
    expected = reference_greedy(target, target.encode(PROMPT), 10)
    assert {a: r["tokens"] for a, r in results.items()} == {"nonsi": expected, "si": expected, "dsi": expected}
    for algorithm in ("si", "dsi"):
        assert results[algorithm]["drafted"] > 0
        assert (results[algorithm]["drafter_forwards"] > 0) == drafter_passes, (algorithm, results[algorithm])


def test_generate_names_a_bad_proposer(pair_dirs, capsys):
    assert cli.main(["generate", PROMPT, "-N", "4", "--proposer", "ngram:3:1"] + _models(pair_dirs)) == 2
    err = capsys.readouterr().err
    assert "prompt_lookup_min (3) must be at most" in err and "Traceback" not in err


def test_an_adaptive_lookahead_on_real_models_weighs_the_machine_profile(pair_dirs, tmp_path, capsys):
    """Issue 32, 4f: `-k adaptive` was offered by generate, bench and serve but refused for every model they load
    (no latency profile); now it takes the costs of the pair's machine profile (--profile here). The control: the
    same run with `-k auto`, which still has nothing to weigh, is refused before loading."""
    from specpar.core.latency import LatencyProfile
    from specpar.prediction.machine import MachineProfile

    path = tmp_path / "machine.json"
    profile = MachineProfile.from_latency(LatencyProfile(3.0, 2.0, 0.2), LatencyProfile(0.5, 0.3, 0.02), 0.7)
    path.write_text(json.dumps(profile.to_dict()))
    for algorithm in ("si", "dsi"):
        args = ["generate", PROMPT, "-N", "10", "-k", "adaptive", "--algorithm", algorithm, "--profile", str(path)]
        assert cli.main(args + ["--json"] + _models(pair_dirs)) == 0, capsys.readouterr().err
        out = json.loads(capsys.readouterr().out)
        target = TransformersModel(pair_dirs[0], dtype="float64")
        assert out["results"][algorithm]["tokens"] == reference_greedy(target, target.encode(PROMPT), 10)
    assert cli.main(["generate", PROMPT, "-N", "4", "-k", "auto", "--algorithm", "si"] + _models(pair_dirs)) == 2
    assert "-k auto weighs the models' latency profiles" in capsys.readouterr().err


def test_simulate_with_an_adaptive_lookahead_under_drifting_acceptance(capsys):
    args = ["simulate", "--json", "-N", "60", "--repeats", "1", "-k", "adaptive", "--sp-degree", "4"]
    assert cli.main(args + ["--acceptance-regimes", "0.9,0.4:20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["lookahead"] == {"si": "adaptive", "dsi": "adaptive"}
    assert out["config"]["acceptance_regimes"] == "0.9,0.4:20"
    results = out["results"]
    assert all(results[a]["same_tokens_as_nonsi"] for a in ("si", "dsi"))
    assert results["si"]["speedup_vs_nonsi"] > 1 and results["dsi"]["speedup_vs_nonsi"] > 1


def _target_only(pair_dirs):
    return ["--target", pair_dirs[0], "--dtype", "float64", "--devices", "cpu"]


@pytest.mark.parametrize(
    "how",
    [
        ["--proposer", "ngram:1:2"],
        ["--speculative-config", '{"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2}'],
    ],
    ids=["--proposer", "vllm-shape"],
)
def test_the_ngram_proposer_needs_no_drafter_model(pair_dirs, capsys, how):
    """`--proposer ngram` with --target alone (before: "give both --target and --drafter"), and vLLM's n-gram shape
    of --speculative-config (before: "this command does not take 'prompt_lookup_min'"): the drafter is not loaded."""
    args = ["generate", PROMPT, "-N", "10", "-k", "3", "--sp-degree", "2", "--compare", "--json", *how]
    assert cli.main(args + _target_only(pair_dirs)) == 0, capsys.readouterr().err
    results = json.loads(capsys.readouterr().out)["results"]
    target = TransformersModel(pair_dirs[0], dtype="float64")
    expected = reference_greedy(target, target.encode(PROMPT), 10)
    assert {a: r["tokens"] for a, r in results.items()} == {"nonsi": expected, "si": expected, "dsi": expected}
    assert all(results[a]["drafted"] > 0 and results[a]["drafter_forwards"] == 0 for a in ("si", "dsi"))


def test_a_proposer_that_drafts_with_the_model_still_needs_the_drafter(pair_dirs, capsys):
    assert cli.main(["generate", PROMPT, "-N", "4", "--proposer", "ngram+drafter"] + _target_only(pair_dirs)) == 2
    assert "give both --target and --drafter" in capsys.readouterr().err


def test_the_vllm_ngram_shape_keeps_the_algorithm_given(capsys):
    """method "ngram" names the proposer, not the algorithm: `"algorithm": "si"` beside it stays SI."""
    from specpar.entrypoints.cli import arguments
    from specpar.entrypoints.cli.main import build_parser

    args = build_parser().parse_args(
        ["generate", "hi", "--algorithm", "dsi", "--speculative-config",
         '{"method": "ngram", "prompt_lookup_max": 4, "algorithm": "si"}']
    )  # fmt: skip
    arguments.build_all(args)
    assert (args.spec.algorithm, args.spec.proposer) == ("si", "ngram:1:4")
