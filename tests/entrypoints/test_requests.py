"""The engine's request threads: ``in_threads`` runs a list of prompts' generations on a few threads."""

import signal
import threading
import time

import pytest

from specpar.entrypoints.requests import in_threads


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, frame):
    raise Interrupted


def _wait_for_request_threads(timeout_s: float = 5.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [t for t in threading.enumerate() if t.name.startswith("specpar-request")]
        if not left:
            return []
        time.sleep(0.01)
    return left


def test_results_come_in_order_and_the_first_error_by_call_is_raised():
    assert in_threads([lambda i=i: i * i for i in range(7)], 3) == [0, 1, 4, 9, 16, 25, 36]

    def fail(i):
        raise ValueError(i)

    with pytest.raises(ValueError, match="^1$"):
        in_threads([lambda: 0, lambda: fail(1), lambda: fail(2)], 3)


def test_an_interrupt_while_waiting_starts_no_further_call():
    """Ctrl-C (here a signal whose handler raises) in the caller's thread reaches the caller at once; the calls
    already running finish, and no queued call starts after it (the control: without the interrupt all 8 run)."""
    release = threading.Event()
    started = []
    two_running = threading.Barrier(3)

    def call(i):
        started.append(i)
        if i < 2:
            two_running.wait(5)
        release.wait(5)
        return i

    assert in_threads([lambda i=i: i for i in range(8)], 2) == list(range(8))

    def interrupt_when_both_run():
        two_running.wait(5)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, _raise_interrupted)
    try:
        threading.Thread(target=interrupt_when_both_run, daemon=True).start()
        with pytest.raises(Interrupted):
            in_threads([lambda i=i: call(i) for i in range(8)], 2)
    finally:
        release.set()
        signal.signal(signal.SIGUSR1, old)
    assert _wait_for_request_threads() == []
    assert sorted(started) == [0, 1]
