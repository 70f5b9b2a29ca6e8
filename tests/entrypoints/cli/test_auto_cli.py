"""`specpar predict` and --algorithm auto on the command line (tiny transformers models saved to disk, machine
profiles written by hand: what auto chooses follows the profile, the tokens stay the target's)."""

from __future__ import annotations

import json

import pytest

from specpar.core.latency import LatencyProfile
from specpar.entrypoints import cli
from specpar.prediction.machine import MachineProfile
from tiny_transformers import reference_greedy

# a profile of the tiny models in specpar's cache would add predictions and an auto row to --compare
pytestmark = pytest.mark.usefixtures("isolated_cache")

PROMPT = "w1 w7 w3 w9 w2"


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """(a machine where a pass over k tokens costs k steps: plain decoding wins; a GPU-like one: DSI wins)."""
    d = tmp_path_factory.mktemp("profiles")
    cpu = MachineProfile.from_latency(LatencyProfile(5.0, 5.0, 5.0), LatencyProfile(2.0, 2.0, 1.0), 0.3)
    gpu = MachineProfile.gpu_like(5.0, 0.05, 0.9)
    cpu.save(d / "cpu.json")
    gpu.save(d / "gpu.json")
    return str(d / "cpu.json"), str(d / "gpu.json")


def models(pair_dirs):
    return ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]


@pytest.mark.slow
def test_predict_lists_every_method_fastest_first_and_what_auto_runs(profiles, capsys):
    assert cli.main(["predict", "--profile", profiles[1], "--prompt-length", "20", "-N", "30", "--sp-degree", "7",
                     "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    times = [m["predicted_ms"] for m in out["methods"]]
    assert times == sorted(times) and {m["method"] for m in out["methods"]} >= {"nonsi", "si", "dsi", "tree-dsi"}
    assert out["methods"][0]["method"] in ("dsi", "tree-dsi") and out["auto"] == out["methods"][0]["label"]
    assert cli.main(["predict", "--profile", profiles[0], "--prompt-length", "20", "-N", "30"]) == 0
    assert "--algorithm auto runs: non-SI" in capsys.readouterr().out


@pytest.mark.slow
def test_generate_auto_runs_the_predicted_fastest_and_says_so(pair_dirs, profiles, capsys):
    for profile, ran in ((profiles[0], "non-SI"), (profiles[1], "DSI")):
        code = cli.main(["generate", PROMPT, "-N", "30", "--algorithm", "auto", "--profile", profile, "--json",
                         "--sp-degree", "6"] + models(pair_dirs))  # fmt: skip
        assert code == 0
        result = json.loads(capsys.readouterr().out)["results"]["auto"]
        assert result["auto"]["label"].startswith(ran) and result["auto"]["predicted_ms"] > 0
        from specpar.backends.transformers_model import TransformersModel

        target = TransformersModel(pair_dirs[0], dtype="float64")
        assert result["tokens"] == reference_greedy(target, target.encode(PROMPT), 30)
    assert cli.main(["generate", PROMPT, "-N", "6", "--algorithm", "auto", "--profile", profiles[0]]
                    + models(pair_dirs)) == 0  # fmt: skip
    assert "auto ran non-SI: predicted" in capsys.readouterr().err


def test_generate_compare_has_a_predicted_column_and_an_auto_row(pair_dirs, profiles, capsys):
    assert cli.main(["generate", PROMPT, "-N", "6", "--compare", "--profile", profiles[1], "--json"]
                    + models(pair_dirs)) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert set(out["results"]) == {"nonsi", "si", "dsi", "auto"} == set(out["predicted_ms"])
    assert all(ms > 0 for ms in out["predicted_ms"].values())


def test_bench_runs_an_auto_arm_and_sums_its_predictions(pair_dirs, profiles, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"w1 w7 w3"\n"w4 w4 w5"\n')
    assert cli.main(["bench", "--dataset", str(prompts), "-n", "2", "-N", "6", "--algorithms", "nonsi,auto",
                     "--profile", profiles[0], "--json"] + models(pair_dirs)) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["auto"]["auto"]["ran"] == {"non-SI": 2} and summary["auto"]["same_tokens_as_nonsi"] is True
    assert summary["auto"]["auto"]["predicted_s"] > 0
    assert summary["auto"]["auto"]["why"].startswith("non-SI: predicted")
    assert cli.main(["bench", "--dataset", str(prompts), "-n", "2", "-N", "6", "--algorithms", "nonsi,auto",
                     "--profile", profiles[0]] + models(pair_dirs)) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert "why (its most frequent choice): non-SI: predicted" in printed.out + printed.err


def test_a_bad_profile_file_is_one_clear_error(pair_dirs, tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"format": "specpar-machine/1", "target": {"prefill_ms": [], "pass_ms": {}}}')
    assert cli.main(["generate", PROMPT, "-N", "4", "--algorithm", "auto", "--profile", str(tmp_path / "bad.json")]
                    + models(pair_dirs)) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "machine profile" in err[0]


def test_generate_compare_predicts_from_a_profile_already_cached(pair_dirs, profiles, capsys, monkeypatch):
    """--compare measures nothing, but a profile of the models in specpar's cache gives it predictions and an auto
    row (control: the isolated cache without it gives neither), read once (the models' files fingerprinted once)."""
    from specpar.backends.transformers_model import TransformersModel
    from specpar.prediction import profile_cache
    from specpar.prediction.machine import MachineProfile, default_key

    argv = ["generate", PROMPT, "-N", "6", "--compare", "--json"] + models(pair_dirs)
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["predicted_ms"] == {}  # control: nothing cached
    target, drafter = (TransformersModel(d, dtype="float64") for d in pair_dirs)
    key = default_key(target, drafter)
    data = {**MachineProfile.load(profiles[1]).to_dict(), "key": key}
    profile_cache.write(profile_cache.cache_path(key), data)
    keys, profile_key = [], profile_cache.profile_key
    monkeypatch.setattr(profile_cache, "profile_key", lambda *a, **k: keys.append(1) or profile_key(*a, **k))
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["results"]) == {"nonsi", "si", "dsi", "auto"} == set(out["predicted_ms"])
    assert len(keys) == 1  # one look at the cache: the profile found there is the one auto predicts from
