"""tests/processes.py: a test's subprocesses end whatever happens (timeout, teardown, the test process killed), and
do not inherit the launching shell's ignored signals (the Ctrl-C tests hung, and their `simulate -N 10^7` child grew
to 11.8 GB, when the suite was launched with SIGINT ignored)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import processes as procs

REPORT_SIGINT = (
    "import signal, time; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True); "
    "time.sleep(60)"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_child_gets_sigint_at_its_default_when_the_launching_shell_ignores_it(processes):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup` or a shell's background job leaves it
    try:
        plain = subprocess.Popen([sys.executable, "-c", REPORT_SIGINT], stdout=subprocess.PIPE, text=True)
        child = processes.start([sys.executable, "-c", REPORT_SIGINT], stdout=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert plain.stdout.readline() == "False\n"  # the control: a plain child inherits the ignored SIGINT
    finally:
        procs.end(plain)
    assert child.stdout.readline() == "True\n"
    child.send_signal(signal.SIGINT)
    assert child.wait(10) == -signal.SIGINT  # Ctrl-C ends it


def test_ending_a_process_ends_what_it_started(processes):
    child = processes.start(
        [
            sys.executable,
            "-c",
            "import subprocess, time; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    grandchild = int(child.stdout.readline())
    procs.end(child)
    assert _gone(child.pid) and _gone(grandchild)


def test_run_kills_the_group_on_its_timeout_and_fails_the_test(tmp_path):
    """The child it started is found by the pid the run reported (a file), not by its command line: a `sleep` with
    the same arguments in another suite on the machine was once taken for it."""
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="still running after 3 s: killed with its group"):
        procs.run_python(code, timeout=3)  # time to start and write the file, even on a loaded machine
    assert time.monotonic() - t0 < 15
    assert pid_file.exists(), "the child never started its own child: the test tested nothing"
    grandchild = int(pid_file.read_text())
    assert _gone(grandchild), "its child was left running"


@pytest.mark.slow
def test_a_child_dies_with_the_process_that_started_it(processes):
    """What pytest-timeout's thread method or a kill of pytest leaves: the kernel ends the children (PDEATHSIG)."""
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import time, processes; "
        "p = processes.start(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert _gone(child)
