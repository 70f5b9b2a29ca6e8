"""Ctrl-C: a long command stops at once with one line, "interrupted", and exit status 130 (no traceback).

Each case is a real process running the command line's main; it says "ready" once its imports are done (a
Ctrl-C during Python's own start-up is the interpreter's), works for a moment, then gets SIGINT as from a
terminal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cli_check import assert_one_line_error

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

HUGE = ["-N", "10000000", "--repeats", "1"]  # hours of work: only Ctrl-C ends it
CASES = {
    "virtual clock": ["simulate", *HUGE, "-k", "4"],
    "threads": ["simulate", *HUGE, "-k", "4", "--runtime", "threads", "--target-tpot", "1"],
    "choosing the lookahead": ["simulate", *HUGE],
    "hsd": ["simulate", "hsd", *HUGE],
    "heatmap": ["heatmap", "--resolution", "200", "-o", os.devnull + "/never"],
}
STARTED = (
    "from specpar.entrypoints.cli import entry; print('ready', flush=True); entry()"  # the executable, once imported
)


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_ctrl_c_stops_a_long_command_in_one_line(argv, tmp_path, processes):
    """The command runs with SIGINT at its default whatever the shell that launched the suite ignores, and is
    killed with its process group at teardown whatever happens (tests/processes.py)."""
    if argv[0] == "heatmap":
        argv = [*argv[:-1], str(tmp_path / "fig")]
    p = processes.start(
        [sys.executable, "-c", STARTED, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout.readline() == "ready\n"
    time.sleep(1.0)  # into the work
    assert p.poll() is None, "the command ended by itself"
    p.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, err = p.communicate(timeout=30)
    stopped_in = time.monotonic() - t0
    command = " ".join(argv[:2]) if argv[1] == "hsd" else argv[0]
    assert_one_line_error(p.returncode, err, f"specpar {command}: interrupted", status=130)
    assert stopped_in < 5, f"took {stopped_in:.1f} s to stop"
    assert out == ""


def test_a_huge_request_shows_its_progress_in_tokens_on_a_terminal():
    """On a terminal, simulate -N 10^7 counts the tokens of its runs as they come, and Ctrl-C takes the bar down."""
    import pty
    import re
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: the command line on a pseudo-terminal, SIGINT at its default (not the shell's)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.environ["COLUMNS"] = "120"
        os.execv(sys.executable, [sys.executable, "-c", STARTED, "simulate", *HUGE, "-k", "4"])
    screen, t0, interrupted = b"", time.monotonic(), None
    try:
        while time.monotonic() - t0 < 30:
            if interrupted is None and re.search(rb"[1-9][\d,]* ?/ ?30,?000,?000", screen):
                os.kill(pid, signal.SIGINT)  # the count is shown and above 0: enough
                interrupted = time.monotonic()
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
    finally:
        if interrupted is None:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    text = screen.decode(errors="replace")
    assert interrupted is not None, f"no token count on the terminal: {text[-500:]!r}"
    assert "simulating 3 runs" in text and "tokens" in text
    assert os.waitstatus_to_exitcode(status) == 130 and "Traceback" not in text
    assert text.rstrip().endswith("specpar simulate: interrupted")
