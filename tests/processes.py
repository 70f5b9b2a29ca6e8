"""Subprocesses that end whatever happens, and that do not inherit the launching shell's signal dispositions.

Every process a test starts goes through :func:`start` (or :func:`run`, :func:`run_python`):

* it leads a process group of its own (a new session), so that :func:`end` kills it and everything it started
  (a Ray, a server's workers) with one signal, and a Ctrl-C at the terminal running pytest does not reach it;
* SIGINT, SIGTERM, SIGHUP and SIGQUIT are at their defaults in it, whatever the shell that launched the suite
  ignores (a child inherits ignored signals: a test sending SIGINT to a command would then wait forever);
* the kernel kills it if the test process dies first (PR_SET_PDEATHSIG), e.g. when pytest-timeout ends pytest;
* :func:`run` kills the group on its timeout, and in any case before it returns; the ``processes`` fixture
  (tests/conftest.py) kills the group of every process a test started at teardown, pass or fail.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

import pytest

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_DEFAULTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _in_child() -> None:
    """Run in the child between fork and exec: default signal dispositions, and die with the parent."""
    for sig in _DEFAULTS:
        signal.signal(sig, signal.SIG_DFL)
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start(argv, **kw) -> subprocess.Popen:
    """Popen(argv, **kw) in a process group of its own, with default signal dispositions (see the module)."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=_in_child, **kw)


def end(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s process group (it and what it started) and reap it; nothing if already ended and reaped."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # not a group leader (a plain Popen), or gone
        if proc.poll() is None:
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL does not end
        pass
    for f in (proc.stdout, proc.stderr, proc.stdin):
        if f is not None:
            f.close()


def run(argv, timeout: float, env=None, cwd=None) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end (stdout and stderr captured as text); past ``timeout`` seconds its group is killed
    and the test fails. Its group is killed before this returns, whatever happens."""
    proc = start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end(proc)
        pytest.fail(f"{' '.join(map(str, argv))[:200]} still running after {timeout:g} s: killed with its group")
    finally:
        end(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_python(code: str, timeout: float, env=None) -> subprocess.CompletedProcess:
    """``python -c code`` with :func:`run`."""
    return run([sys.executable, "-c", code], timeout, env=env)


class Processes:
    """The processes one test started (the ``processes`` fixture); each one's group is killed at teardown."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, argv, **kw) -> subprocess.Popen:
        proc = start(argv, **kw)
        self.started.append(proc)
        return proc

    def end_all(self) -> None:
        for proc in self.started:
            end(proc)
