"""Output paths: every command that writes refuses a path it cannot write, in one line, before any work starts.

Each case names the command's output flag with one kind of bad path. The commands behind them take minutes
(profile, bench load models; reproduce measures a grid), so a case that passes quickly also shows the check
came first: profile and bench would otherwise fail on the absent model packages with another message.
"""

from __future__ import annotations

import os

import pytest

from cli_check import assert_one_line_error, run_cli
from specpar.entrypoints.cli import main

QUICK = ["-N", "5", "--repeats", "1", "-k", "2"]  # simulate flags that make a run take milliseconds


@pytest.fixture
def places(tmp_path):
    """Paths of each kind: a file, a directory, a missing directory, and one this process cannot write in."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    if os.geteuid() == 0:  # root writes through permission bits: take a directory no one can create files in
        readonly = "/proc"
    else:
        readonly = tmp_path / "readonly"
        readonly.mkdir(mode=0o500)
    return {"file": str(a_file), "dir": str(tmp_path), "missing": str(tmp_path / "missing"), "readonly": str(readonly)}


CASES = [
    # (argv with {placeholders}, what the one line must say)
    (["simulate", *QUICK, "-o", "{missing}/t.png"], "does not exist"),
    (["simulate", *QUICK, "-o", "{dir}"], "is a directory: give a file name"),
    (["simulate", *QUICK, "-o", "{dir}/t.xyz"], "unknown file extension '.xyz'"),
    (["simulate", *QUICK, "-o", "{file}/t.png"], "is a file, not a directory"),
    (["simulate", *QUICK, "-o", "{readonly}/t.png"], "cannot write in directory"),
    (["heatmap", "--resolution", "2", "-o", "{missing}/fig"], "does not exist"),
    (["heatmap", "--resolution", "2", "-o", "{file}/fig"], "is a file, not a directory"),
    (["heatmap", "--resolution", "2", "-o", "{readonly}/fig"], "cannot write in directory"),
    (["reproduce", "-o", "{file}"], "is a file, not a directory"),
    (["reproduce", "-o", "{readonly}/figures"], "cannot write in directory"),
    (["profile", "-o", "{missing}/p.json"], "does not exist"),
    (["profile", "-o", "{dir}/"], "is a directory: give a file name"),
    (["profile", "-o", "{readonly}/p.json"], "cannot write in directory"),
    (["bench", "-o", "{file}/b.jsonl"], "is a file, not a directory"),
    (["bench", "-o", "{dir}"], "is a directory: give a file name"),
]


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_a_bad_output_path_is_one_line_before_any_work(argv, needle, places, capsys):
    code = main([a.format(**places) for a in argv])
    err = capsys.readouterr().err
    assert_one_line_error(code, err, needle)
    assert os.listdir(places["dir"]) == ["a_file"] or "readonly" in os.listdir(places["dir"])  # nothing written


@pytest.mark.slow
def test_the_installed_command_says_it_in_one_line(places):
    """The same through a real process: exit status 2, one line, no traceback."""
    p = run_cli("simulate", *QUICK, "-o", f"{places['dir']}/t.xyz")
    assert_one_line_error(p.returncode, p.stderr, "unknown file extension '.xyz'; use one of .png, ")
    p = run_cli("profile", "-o", f"{places['missing']}/p.json")
    assert_one_line_error(p.returncode, p.stderr, "does not exist")


@pytest.mark.slow
def test_heatmap_into_a_directory_names_the_files_it_wrote(tmp_path, capsys):
    argv = ["heatmap", "--resolution", "2", "-N", "8", "--repeats", "1", "--lookaheads", "1-4"]
    assert main([*argv, "-o", f"{tmp_path}/"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert f"wrote {tmp_path}/dsi-fig2.png and {tmp_path}/dsi-fig2.csv" in out
    assert sorted(os.listdir(tmp_path)) == ["dsi-fig2.csv", "dsi-fig2.png"]


def test_a_timeline_without_an_extension_is_a_png_and_says_so(tmp_path, capsys):
    assert main(["simulate", *QUICK, "-o", str(tmp_path / "timeline")]) == 0
    assert f"written to {tmp_path / 'timeline.png'}" in capsys.readouterr().out
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
