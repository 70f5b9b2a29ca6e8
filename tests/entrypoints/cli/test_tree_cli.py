"""`specpar simulate --tree` and `specpar generate --tree`: chains and trees side by side, bad trees named."""

from __future__ import annotations

import json

import pytest

from specpar.backends.transformers_model import TransformersModel
from specpar.entrypoints import cli
from tiny_transformers import reference_greedy, save_tiny_pair

# a profile of the tiny models in specpar's cache would add predictions and an auto row to --compare
pytestmark = pytest.mark.usefixtures("isolated_cache")

PROMPT = "w1 w7 w3 w9 w2"


def test_simulate_runs_si_and_dsi_over_the_tree_beside_the_chains(capsys):
    args = ["simulate", "--json", "-N", "40", "--repeats", "2", "-a", "0.6", "-k", "3", "--sp-degree", "4"]
    assert cli.main(args + ["--tree", "3,2,1"]) == 0
    out = json.loads(capsys.readouterr().out)
    res = out["results"]
    assert set(res) == {"nonsi", "si", "dsi", "si-tree", "dsi-tree"} and out["config"]["tree"] == [3, 2, 1]
    assert all(res[a]["same_tokens_as_nonsi"] for a in ("si", "dsi", "si-tree", "dsi-tree"))
    assert res["si-tree"]["mean_acceptance_length"] > res["si"]["mean_acceptance_length"]
    assert res["dsi-tree"]["speedup_vs_nonsi"] >= 1


@pytest.mark.parametrize(
    "tree,words",
    [("2,0", "k2 must be a positive integer"), ("2,x", "comma-separated"), ("9,9,9", "more than the 512")],
)
def test_simulate_names_a_bad_tree(capsys, tree, words):
    assert cli.main(["simulate", "-N", "10", "--repeats", "1", "--tree", tree]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def _models(pair_dirs):
    return ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]


def test_generate_over_a_tree_equals_the_targets_greedy(pair_dirs, capsys):
    args = ["generate", PROMPT, "-N", "10", "--tree", "2,2,1", "--sp-degree", "2", "--compare", "--json"]
    assert cli.main(args + _models(pair_dirs)) == 0
    out = json.loads(capsys.readouterr().out)
    target = TransformersModel(pair_dirs[0], dtype="float64")
    expected = reference_greedy(target, target.encode(PROMPT), 10)
    assert {a: r["tokens"] for a, r in out["results"].items()} == {"dsi": expected, "nonsi": expected, "si": expected}
    assert out["results"]["si"]["lookahead"] == 3


def test_generate_refuses_a_tree_past_the_context_window(pair_dirs, capsys):
    long_prompt = " ".join(["w3"] * 120)  # the window is 128 tokens
    assert cli.main(["generate", long_prompt, "-N", "4", "--tree", "1,1,1,1,1,1,1,1,1,1"] + _models(pair_dirs)) == 2
    assert "reaches past the context" in capsys.readouterr().err


def test_bench_over_a_tree_records_tokens_per_target_pass(pair_dirs, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"w1 w7 w3 w9 w2"\n"w4 w4 w5"\n')
    out = tmp_path / "rows.jsonl"
    args = ["bench", "--dataset", str(prompts), "-n", "2", "-N", "8", "--algos", "nonsi,si", "--tree", "2,1"]
    assert cli.main(args + ["-o", str(out), "--json"] + _models(pair_dirs)) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["config"]["tree"] == [2, 1]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["algorithm"] for r in rows] == ["nonsi", "si"] * 2
    assert all(r["same_tokens_as_nonsi"] for r in rows if r["algorithm"] == "si")


def test_bench_arms_put_chains_and_best_first_trees_side_by_side(pair_dirs, tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('"w1 w7 w3 w9 w2"\n')
    arms = ["--arm", "nonsi", "--arm", "si k=4", "--arm", "si tree=best:4", "--arm", "dsi tree=2,1"]
    args = ["bench", "--dataset", str(prompts), "-n", "1", "-N", "8", "--sp-degree", "2", *arms, "--json"]
    assert cli.main(args + _models(pair_dirs)) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert list(summary) == ["nonsi", "si k=4", "si tree=best:4", "dsi tree=2,1"]
    assert all(summary[a]["same_tokens_as_nonsi"] for a in list(summary)[1:])
    assert summary["si tree=best:4"]["tokens_per_target_pass"] == 8 / summary["si tree=best:4"]["target_forwards"]
    for bad, words in [
        ("si k=0", "k=K"),
        ("hsd", "ALGO"),
        ("nonsi tree=2", "tree=SHAPE"),
        ("si tree=best:0", "budget"),
    ]:
        assert cli.main(["bench", "--dataset", str(prompts), "--arm", bad] + _models(pair_dirs)) == 2
        assert words in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["gguf", "transformers"])
def test_a_tree_deeper_than_the_context_is_refused_before_the_models_load(tmp_path, capsys, monkeypatch, kind):
    """The context window is read from the files (a GGUF header, config.json) before any weights load; before, the
    engine refused the tree only after loading the pair."""
    import specpar.backends.loading as loading

    if kind == "gguf":
        pytest.importorskip("gguf")
        from tiny_gguf import write_tiny_gguf

        paths = [str(write_tiny_gguf(tmp_path / f"{n}.gguf", context=16, seed=i)) for i, n in enumerate("td")]
        window = 16
    else:
        paths, window = list(save_tiny_pair(tmp_path)), 128
    assert loading.context_window_of(paths[0]) == window

    def no_loading(*a, **k):
        raise AssertionError("the models were loaded")

    monkeypatch.setattr(loading, "load_pair", no_loading)
    deep = ",".join(["1"] * window)  # window nodes: a chain one position too deep for a one-token prompt
    args = ["generate", "hi", "--tree", deep, "--target", paths[0], "--drafter", paths[1]]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"tree depth {window} reaches past the context: only {window - 1} position(s)" in err, err
