"""The benchmark runner (benchmarks/runner.py): arms interleaved and rotated per round, one results format (command,
commit, machine, load average, arms with their runs and medians, the benchmark's summary), and the ported benchmarks
running through it."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import sys
import types
from pathlib import Path

import pytest

from benchmarks import runner
from benchmarks.runner import Arm, Benchmark
from test_layers import cycles


@pytest.fixture
def fake_benchmark(monkeypatch):
    """A benchmark module ``benchmarks.fake_bench`` whose arms record the order they ran in."""
    calls = []

    def measure(arm, args, r):
        calls.append((r, arm.name))
        return {"ms": arm.settings["ms"] * (r + 1), "label": f"run {r}"}

    bench = Benchmark(
        description="A fake benchmark.\n\nIt measures nothing.",
        reports={"ms": "time, ms", "label": "a text figure"},
        arms=lambda args: [Arm("a", {"ms": 1.0}), Arm("b", {"ms": args.scale})],
        measure=measure,
        options=lambda p: p.add_argument("--scale", type=float, default=10.0),
        summarize=lambda arms, args: {"b over a": arms[1].figures["ms"] / arms[0].figures["ms"]},
        rounds=3,
    )
    module = types.ModuleType("benchmarks.fake_bench")
    module.BENCHMARK = bench
    monkeypatch.setitem(sys.modules, "benchmarks.fake_bench", module)
    return calls


def test_the_runner_interleaves_rotates_and_writes_one_results_format(fake_benchmark, tmp_path):
    out = tmp_path / "r.json"
    printed = io.StringIO()
    results = runner.run("fake_bench", ["--scale", "4", "-o", str(out)], out=printed)
    # every arm once per round, the first arm of round r the r-th (mod 2): not always a then b
    assert fake_benchmark == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    assert results["command"] == f"python -m benchmarks fake_bench --scale 4 -o {out}"
    assert set(results["machine"]) == {"platform", "python", "cpus", "cpus_usable", "memory_gb", "processor"}
    assert len(results["load_average"]["before"]) == len(results["load_average"]["after"]) == 3
    assert results["options"] == {"rounds": 3, "scale": 4.0}
    a, b = results["arms"]
    assert a["runs"] == [{"ms": 1.0, "label": "run 0"}, {"ms": 2.0, "label": "run 1"}, {"ms": 3.0, "label": "run 2"}]
    assert a["figures"] == {"ms": 2.0, "label": "run 0"}  # the median of numbers; the first of anything else
    assert b["settings"] == {"ms": 4.0} and b["figures"]["ms"] == 8.0
    assert results["summary"] == {"b over a": 4.0}
    text = printed.getvalue()
    assert "b over a: 4" in text and "load average" in text and f"results: {out}" in text


def test_a_session_is_entered_once_around_every_run(fake_benchmark, monkeypatch):
    events = []

    @contextlib.contextmanager
    def session(args):
        events.append("enter")
        yield "the loaded models"
        events.append("exit")

    bench = sys.modules["benchmarks.fake_bench"].BENCHMARK
    seen = []
    measure = lambda arm, args, r: seen.append(args.session) or {"ms": 1.0}  # noqa: E731
    monkeypatch.setattr(sys.modules["benchmarks.fake_bench"], "BENCHMARK",
                        dataclasses.replace(bench, session=session, measure=measure, summarize=None))  # fmt: skip
    runner.run("fake_bench", ["-o", "-"], out=io.StringIO())
    assert events == ["enter", "exit"] and seen == ["the loaded models"] * 6


def test_a_failed_check_is_exit_status_1(fake_benchmark, monkeypatch, capsys):
    module = sys.modules["benchmarks.fake_bench"]
    for differ, status in ((0, 0), (2, 1)):  # the control: the same benchmark passing
        summary = {"differ": differ}
        bench = dataclasses.replace(module.BENCHMARK, summarize=lambda arms, args, s=summary: s,
                                    passed=lambda s: s["differ"] == 0)  # fmt: skip
        monkeypatch.setattr(module, "BENCHMARK", bench)
        assert runner.main(["fake_bench", "--rounds", "1", "-o", "-"]) == status
    assert "differ: 2" in capsys.readouterr().out


def test_rounds_and_output_options(fake_benchmark, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "RESULTS", tmp_path)
    results = runner.run("fake_bench", ["--rounds", "1", "-o", "-"], out=io.StringIO())
    assert [len(arm["runs"]) for arm in results["arms"]] == [1, 1]
    assert list(tmp_path.iterdir()) == []  # "-": nothing written
    with pytest.raises(SystemExit, match="no benchmark 'no_such_bench'"):
        runner.run("no_such_bench", [], out=io.StringIO())


def test_thread_overhead_runs_through_the_runner():
    results = runner.run("thread_overhead", ["--rounds", "1", "-N", "20", "-o", "-"], out=io.StringIO())
    virtual, threads = results["arms"]
    assert (virtual["name"], threads["name"]) == ("virtual", "threads")
    assert threads["figures"]["time_ms"] >= virtual["figures"]["time_ms"] * 0.99  # sleeps cannot beat the prediction
    assert len(results["summary"]["threads_over_virtual_per_seed"]) == 1


HELPERS = {"__init__", "__main__", "runner", "calibration", "llama_cpp_tools"}  # modules the benchmarks import


def not_benchmarks(folder: Path) -> list[str]:
    """The files of ``folder`` outside the one shape: scripts (shell, ...) and modules that declare no BENCHMARK."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file()
        and p.suffix not in (".md",)
        and not (p.suffix == ".py" and (p.stem in HELPERS or "BENCHMARK = Benchmark(" in p.read_text()))
    )


def test_every_module_of_benchmarks_is_a_benchmark_or_a_helper():
    assert not_benchmarks(Path(runner.__file__).parent) == []


def test_control_a_script_outside_the_runner_is_found(tmp_path):
    (tmp_path / "old.py").write_text('import argparse\n\nif __name__ == "__main__":\n    print(1)\n')
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "new.py").write_text("BENCHMARK = Benchmark(description='x', reports={}, arms=None, measure=None)\n")
    assert not_benchmarks(tmp_path) == ["old.py", "run.sh"]


def benchmark_imports(folder: Path) -> dict[str, set[str]]:
    """{module: the modules of the benchmarks package it imports}, read from the source."""
    graph = {}
    for path in folder.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks."))
        graph[path.stem] = found
    return graph


def test_no_import_circle_among_the_benchmarks():
    assert cycles(benchmark_imports(Path(runner.__file__).parent)) == []
    assert cycles({"dsi_gap": {"real_hardware"}, "real_hardware": {"dsi_gap"}}) == [["dsi_gap", "real_hardware"]]


@pytest.mark.slow
def test_every_benchmark_module_declares_one_benchmark():
    listed = runner.benchmarks()
    assert {"thread_overhead", "virtual_throughput", "dsi_equivalence", "trees"} <= set(listed)
    for name, bench in listed.items():
        assert runner.parser(name, bench).format_help(), name
        assert bench.reports, f"{name} reports nothing"
