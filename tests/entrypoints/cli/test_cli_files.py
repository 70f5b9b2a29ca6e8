"""Input files: a missing, binary, truncated or empty input is one line naming the file and the problem, exit 2."""

from __future__ import annotations

import json

import pytest

from cli_check import assert_one_line_error, run_cli
from specpar.entrypoints.cli import main
from specpar.prediction.pair_profile import FORMAT


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    (d / "binary").write_bytes(bytes(range(256)) * 4)
    (d / "folder.jsonl").mkdir()
    (d / "tag_only.json").write_text(json.dumps({"format": FORMAT}))
    (d / "no_tpot.json").write_text(
        json.dumps({"format": FORMAT, "target": {"ttft_ms": 1.0}, "drafter": {}, "acceptance_rate": {}})
    )
    (d / "text_tpot.json").write_text(
        json.dumps(
            {
                "format": FORMAT,
                "target": {"ttft_ms": 1.0, "tpot_ms": "fast"},
                "drafter": {"ttft_ms": 0.1, "tpot_ms": 0.1},
                "acceptance_rate": {"geometric": 0.8},
            }
        )
    )
    (d / "cut.json").write_text('{"target": {"ttft_ms": 1.0, "tp')
    (d / "empty_prompt.jsonl").write_text('{"prompt": "def f():"}\n{"prompt": ""}\n')
    (d / "model").mkdir()  # a model directory whose weights file was cut short
    (d / "model" / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": 32,
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
            }
        )
    )
    (d / "model" / "model.safetensors").write_bytes(b'\x40\x00\x00\x00\x00\x00\x00\x00{"weight": {"dty')
    return {p.stem: str(p) for p in d.iterdir()} | {"missing": str(d / "missing.json")}


CASES = [
    (["simulate", "--profile", "{binary}"], "is not a text file"),
    (["simulate", "--profile", "{folder}"], "is a directory, not a file"),
    (["simulate", "--profile", "{missing}"], "does not exist"),
    (["simulate", "--profile", "{tag_only}"], "it is incomplete"),
    (["plan", "--profile", "{no_tpot}"], "it is incomplete"),
    (["simulate", "--profile", "{text_tpot}"], "target.tpot_ms must be a number"),
    (["table", "--no-default-pair", "--profile", "{cut}"], "is not valid JSON"),
    (["hsd-plan", "--costs", "1,2", "--alpha", "{binary}"], "is not a text file"),
    (["hsd-plan", "--costs", "1,2", "--alpha", "{folder}"], "is a directory, not a file"),
    (["simulate", "hsd", "--costs", "1,2", "--alpha", "{missing}"], "does not exist"),
    (["profile", "--dataset", "{binary}"], "prompt file"),
    (["generate", "--dataset", "{folder}", "0"], "is a directory, not a file"),
    (["bench", "--dataset", "{empty_prompt}"], "the prompt is empty"),
    (["generate", "--target", "{model}", "--drafter", "{model}", "--devices", "cpu", "hi"], "cannot load a model"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_a_bad_input_file_is_one_line(argv, needle, files, capsys):
    code = main([a.format(**files) for a in argv])
    assert_one_line_error(code, capsys.readouterr().err, needle)


def test_the_installed_command_says_it_in_one_line(files):
    p = run_cli("simulate", "--profile", files["tag_only"])
    assert_one_line_error(p.returncode, p.stderr, f"profile {files['tag_only']!r} has no")
