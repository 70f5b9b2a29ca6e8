"""The commands' comparison tables read whole at 80 columns (turned, one row per metric, when the table is wider),
their footnotes define exactly the metric columns they show, and DSI's tokens per target pass is not printed as if
it were how much DSI accepted (its "run len" is)."""

from __future__ import annotations

import io
import re

import pytest

from specpar.core.results import METRICS, metrics_footnote
from specpar.entrypoints import cli

# a profile of the tiny models in specpar's cache would add predictions and an auto row to --compare
pytestmark = pytest.mark.usefixtures("isolated_cache")


def defined_terms(text: str) -> set[str]:
    return {term for term in METRICS if f"{term} = " in text}


def shown_terms(text: str) -> set[str]:
    return {term for term in METRICS if re.search(rf"[│┃] {re.escape(term)} +[│┃]|[│┃] +{re.escape(term)} [│┃]", text)}


def check_table(text: str) -> None:
    lines = text.splitlines()
    assert "…" not in text, text  # no header or cell cut short
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert shown_terms(text) == defined_terms(text) and shown_terms(text), text  # footnote = metric columns
    assert "mean accept len" not in text  # the old column: DSI's read as if it accepted less


def test_simulate_at_80_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["simulate", "-N", "30", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    check_table(out)
    assert "run len" in out and "tokens/pass" in out


def test_generate_compare_at_80_columns(pair_dirs, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    models = ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]
    assert cli.main(["generate", "w1 w7 w3", "-N", "8", "-k", "2", "--sp-degree", "2", "--compare"] + models) == 0
    err = capsys.readouterr().err
    table = err[err.index("same prompt") :]
    check_table(table)
    words = " ".join(err.split())
    assert "run length" in words and "tokens per target pass" in words  # the first line's statistics, named alike


def test_bench_at_80_columns(pair_dirs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('"w1 w2 w3"\n')
    models = ["--target", pair_dirs[0], "--drafter", pair_dirs[1], "--dtype", "float64", "--devices", "cpu"]
    assert cli.main(["bench", "--dataset", str(prompts), "-n", "1", "-N", "6", "-k", "2"] + models) == 0
    check_table(capsys.readouterr().out)


def test_a_footnote_defines_the_columns_it_is_given_in_their_order():
    note = metrics_footnote(["algorithm", "run len", "accept rate"])
    assert note.index("run len = ") < note.index("accept rate = ") and "tokens/pass = " not in note


def test_the_conversion_shows_a_spinner_and_its_time_not_a_byte_count_that_never_moves():
    from rich.console import Console

    from specpar.backends.weights import _progress

    for counted, expect in ((False, "converting"), (True, "joining")):
        with _progress(True, counted=counted) as bar:
            bar.add_task(f"{expect} the model", total=None if not counted else 1000)
            out = io.StringIO()
            Console(file=out, width=100, force_terminal=False).print(bar.make_tasks_table(bar.tasks))
        text = out.getvalue()
        assert expect in text and "?" not in text, text
        assert bool(re.search(r"\d/\d", text)) == counted, text  # a count of bytes only where there is one
