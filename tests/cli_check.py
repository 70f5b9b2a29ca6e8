"""Running the ``specpar`` command line as a user does, and checking that a mistake ends in one clear line."""

from __future__ import annotations

import os
import subprocess
import sys

from processes import run


def run_cli(*argv: str, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
    """``python -m specpar ARGV`` in a subprocess (stdout and stderr captured as text), ended with its process group
    on the timeout (the test then fails) and in any case (tests/processes.py)."""
    env = dict(os.environ, COLUMNS="120")
    return run([sys.executable, "-m", "specpar", *argv], timeout, env=env, cwd=cwd)


def error_line(stderr: str) -> str:
    """The one line a failed command printed (progress bars of loaders may precede it), with no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    return lines[-1]


def assert_one_line_error(code: int, stderr: str, needle: str, status: int = 2) -> None:
    """Exit status ``status``, exactly one line on stderr, and it contains ``needle``."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == status, f"exit {code}, stderr: {stderr}"
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
