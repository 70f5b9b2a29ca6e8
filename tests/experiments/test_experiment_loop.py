"""The one experiment loop: interleaving, the one speedup definition, the inconclusive rule, the load warning,
and the one JSON writer under a command."""

from __future__ import annotations

import json
import math
import os
import statistics

import pytest

from specpar.core.json_output import JsonLines, dumps
from specpar.entrypoints.cli import comparison, main, real_models
from specpar.experiments import loop


def test_arms_are_interleaved_over_repeats_and_each_repeat_is_set_up_once():
    order, setups = [], []

    def setup(r):
        setups.append(r)
        return f"models {r}"

    runs = loop.run_arms(
        ["nonsi", "si", "dsi"], 2, lambda arm, x: (arm, x), setup=setup, on_result=lambda a, r, _: order.append((a, r))
    )
    assert order == [("nonsi", 0), ("si", 0), ("dsi", 0), ("nonsi", 1), ("si", 1), ("dsi", 1)]
    assert setups == [0, 1]
    assert runs["si"] == [("si", "models 0"), ("si", "models 1")]


def test_speedup_is_the_ratio_of_mean_latencies_with_the_paired_ratios_as_its_spread():
    base, arm = [10.0, 20.0, 30.0], [5.0, 10.0, 20.0]
    s = loop.speedup(base, arm)
    assert s.value == pytest.approx(60 / 35)  # not the mean of the ratios, (2 + 2 + 1.5) / 3 = 1.833
    assert s.value != pytest.approx(statistics.fmean([2.0, 2.0, 1.5]))
    assert s.ratios == (2.0, 2.0, 1.5)
    d = s.to_dict()
    assert d["ratio_min"] == 1.5 and d["ratio_max"] == 2.0 and d["repeats"] == 3
    assert d["ratio_std"] == pytest.approx(statistics.stdev([2.0, 2.0, 1.5]))
    assert math.isnan(loop.speedup([1.0], [0.0]).value)  # no time elapsed: undefined, not infinite
    with pytest.raises(ValueError):
        loop.speedup([1.0, 2.0], [1.0])  # unpaired


def test_a_ratio_is_inconclusive_exactly_when_its_paired_ratios_straddle_one():
    assert loop.speedup([10.0, 10.0, 10.0], [5.0, 20.0, 8.0]).inconclusive is True  # 2x, 0.5x, 1.25x
    assert loop.speedup([10.0, 10.0], [5.0, 9.0]).inconclusive is False  # both faster
    assert loop.speedup([10.0, 10.0], [20.0, 11.0]).inconclusive is False  # both slower: a conclusive slowdown
    assert loop.speedup([10.0, 10.0], [10.0, 5.0]).inconclusive is False  # 1x and 2x: never slower
    assert loop.speedup([10.0], [5.0]).inconclusive is None  # one run: no spread to judge
    line = loop.inconclusive_line("DSI", "SI", loop.speedup([10.0, 10.0], [5.0, 20.0]).to_dict())
    assert (
        line == "DSI vs SI: 0.80x is inconclusive: its 2 paired repeats range from 0.50x to 2.00x, on both sides of 1"
    )
    assert loop.inconclusive_line("DSI", "SI", loop.speedup([10.0, 10.0], [5.0, 6.0]).to_dict()) is None


def test_the_commands_note_only_the_inconclusive_ratios_against_the_baselines():
    class Run:
        def __init__(self, ms):
            self.time_ms = ms

    by_algo = {
        "nonsi": [Run(10.0), Run(10.0)],
        "si": [Run(5.0), Run(20.0)],  # straddles 1 against non-SI
        "dsi": [Run(4.0), Run(8.0)],  # faster than non-SI both times, and faster than SI both times
    }
    summary = {a: comparison.speedups_of(by_algo, a) for a in by_algo}
    assert summary["si"]["speedup_vs_nonsi"] == pytest.approx(20 / 25)
    assert comparison.inconclusive_lines(summary) == [
        "SI vs non-SI: 0.80x is inconclusive: its 2 paired repeats range from 0.50x to 2.00x, on both sides of 1"
    ]


def test_the_load_warning_fires_only_when_the_load_average_exceeds_the_cores(monkeypatch, capsys):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 0.5, 0.0, 0.0))
    assert f"exceeds this machine's {cores} cores" in loop.load_warning()
    real_models.warn_load()
    assert capsys.readouterr().err.startswith("warning: load average")
    monkeypatch.setattr(os, "getloadavg", lambda: (cores - 0.5, 0.0, 0.0))
    assert loop.load_warning() is None
    real_models.warn_load()
    assert capsys.readouterr().err == ""


def test_simulate_json_goes_through_the_one_writer_with_the_one_speedup(monkeypatch, capsys):
    written = []

    def spy(obj, indent=2):
        written.append(obj)
        return dumps(obj, indent)

    monkeypatch.setattr("specpar.core.json_output.dumps", spy)
    assert main(["simulate", "--json", "-N", "20", "--repeats", "3", "-a", "0.7", "-c", "0.2", "--sp-degree", "4"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))
    assert len(written) == 1 and written[0]["results"].keys() == out["results"].keys()
    res = out["results"]
    for algo in ("si", "dsi"):
        base, mine = res["nonsi"]["time_ms"], res[algo]["time_ms"]
        assert res[algo]["speedup_vs_nonsi"] == pytest.approx(statistics.fmean(base) / statistics.fmean(mine))
        spread = res[algo]["speedup_vs_nonsi_spread"]
        assert spread["repeats"] == 3 and spread["ratio_min"] <= spread["ratio_mean"] <= spread["ratio_max"]
    assert res["nonsi"]["acceptance_rate"] is None  # nothing drafted: nan written as null


def test_json_lines_are_standard_json_one_record_per_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    with JsonLines(str(path)) as out:
        out.write({"a": 1.0, "b": float("nan")})
        out.write({"a": [float("inf")]})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"a": 1.0, "b": None}, {"a": [None]}]
