"""Real wall-clock time: one worker thread per server, tasks handed to the server :meth:`Pool.pick` chooses.

Cancellation sets the task's event (simulated servers wake from their sleep, model servers check it between passes).
A call past its stall limit loses its server, as on Ray; ``close()`` leaves threads still in a call after
``join_timeout_s`` behind as daemons (``left_running``). A later runtime on a server waits for the earlier thread's
call first, so two threads never share a KV cache; at exit :func:`finish_left_calls` waits for the calls left
running, so that no thread is inside a torch forward pass then (exit status 134).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from collections.abc import Sequence

from specpar.core.errors import ConfigError, ServerError
from specpar.core.latency import STALL_FACTOR, STALL_FLOOR_S
from specpar.core.numbers import is_number
from specpar.runtimes import capacity
from specpar.runtimes.base import CallLimits, Pool, Runtime, Task

log = logging.getLogger(__name__)

_STOP = object()
DEFAULT_JOIN_TIMEOUT_S = 0.05


class _Worker(threading.Thread):
    """A server's worker thread; ``until``: the perf_counter time (s) by which the call it runs should end (its
    stall limit), None between calls."""

    until: float | None = None


# server -> the worker thread that last ran it, while that thread may still be running a call
_owners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_owners_lock = threading.Lock()


class ThreadRuntime(Runtime):
    """Runtime on OS threads; times are wall-clock ms since construction.

    call_timeout_s, stall_factor, stall_floor_s: the stall limits (:class:`~specpar.runtimes.base.CallLimits`;
    ``math.inf``: none). join_timeout_s: how long ``close()`` waits for running work to stop before leaving it
    behind. finished: the queue finished tasks are put on (Ray shares one with the pools it runs on threads).
    """

    name = "threads"

    def __init__(
        self,
        pools: Sequence[Pool],
        call_timeout_s: float | None = None,
        join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S,
        finished: queue.SimpleQueue | None = None,
        stall_factor: float = STALL_FACTOR,
        stall_floor_s: float = STALL_FLOOR_S,
    ):
        self.limits = CallLimits(call_timeout_s, stall_factor, stall_floor_s)
        if not is_number(join_timeout_s, 0):
            raise ConfigError(f"join_timeout_s must be a number of seconds >= 0, got {join_timeout_s!r}")
        super().__init__(pools)
        self.call_timeout_s = call_timeout_s
        self.join_timeout_s = join_timeout_s
        self.left_running: list[str] = []  # threads close() left behind (stuck servers)
        self._lost: set = set()
        self._lock = threading.Lock()
        self._finished: queue.SimpleQueue = queue.SimpleQueue() if finished is None else finished
        self._queues({p: p.servers for p in self.pools})
        self._running: set[Task] = set()
        servers = [s for p in self.pools for s in p.servers]
        capacity.check_threads(len(servers))  # one thread each: refused here, not after hundreds started
        self._inbox = {id(s): queue.SimpleQueue() for s in servers}
        self.claim(servers)
        try:
            _wait_for_earlier_owners(servers)
        except BaseException:
            self.release()
            raise
        self._threads = [
            _Worker(target=self._work, args=(p, s, self._inbox[id(s)]), name=f"specpar-{s.name}", daemon=True)
            for p in self.pools
            for s in p.servers
        ]
        with _owners_lock:
            for t, s in zip(self._threads, servers):
                _owners[s] = t
        self._start_threads()
        self._t0 = time.perf_counter()

    def _start_threads(self) -> None:
        """Start a worker per server; if the OS refuses one (a limit check_threads could not read), stop those
        started and refuse the runtime in one ConfigError."""
        started = 0
        try:
            for t in self._threads:
                t.start()
                started += 1
        except RuntimeError as exc:  # "can't start new thread"
            for inbox in self._inbox.values():
                inbox.put(_STOP)
            self.release()
            raise ConfigError(
                f"the threads runtime could start only {started} of the {len(self._threads)} threads its servers "
                f"need ({exc}): lower sp_degree"
            ) from None

    def _work(self, pool: Pool, server, inbox: queue.SimpleQueue) -> None:
        me = threading.current_thread()
        task = inbox.get()
        while task is not _STOP:
            if not task.cancelled:
                self._run(task, server, me)
            with self._lock:
                if task.server is server:  # not handed to another server meanwhile (its server was lost)
                    self._running.discard(task)
                if server in self._lost:
                    return  # a lost server takes no more work; its thread ends with the call it was stuck in
                self._free(pool, server)
            task = inbox.get()

    def _run(self, task: Task, server, me: _Worker) -> None:
        """Run ``task`` on ``server`` and queue it as finished, unless the server was lost meanwhile (then its task
        is another server's, or cancelled, and what this call returns is dropped)."""
        cancelled = task.cancel_event
        task.start = self.now()
        result = error = None
        try:
            task.cached = server.cached_len(task.call.context)
            task.limit_s = self.limits.limit_s(task, server.latency)
            me.until = time.perf_counter() + task.limit_s
            result = server.run(task.call, cancelled)
        except BaseException as exc:  # surfaced by wait(), never lost in the worker
            error = exc
        me.until = None
        with self._lock:
            if server in self._lost:
                return
            task.result, task.error, task.end = result, error, self.now()
        if error is None and not task.cancelled:
            self.limits.record(task)
        self._finished.put(task)

    def submit(self, pool: Pool, call) -> Task:
        task = Task(pool, call)
        task.cancel_event = threading.Event()
        self.tasks.append(task)
        self._in_flight += 1
        with self._lock:
            self._dispatch(task)
        return task

    def _start(self, task: Task, server) -> None:
        """Hand ``task`` to ``server``'s thread (under the lock)."""
        task.server = server
        self._running.add(task)
        self._inbox[id(server)].put(task)

    def wait(self) -> Task:
        while True:
            task = self._finished_item()
            if not task.cancelled:
                return self._returned(task)

    def _watched(self) -> list[Task]:
        """The running calls whose stall would hold the generation up: those it waits for, and cancelled ones that
        work queued on their pool waits behind."""
        with self._lock:
            waiting = self._waiting()
            return [t for t in self._running if t.limit_s is not None and (not t.cancelled or t.pool in waiting)]

    def _lose_stuck(self) -> None:
        """Lose the server of each watched call past its stall limit; a ServerError if work is left waiting on a
        pool with no live server (the generation cannot go on)."""
        for task in sorted(self.limits.stalled(self._watched(), self.now()), key=lambda t: t.start):
            server, pool = task.server, task.pool
            task.cancel_event.set()  # the stalled call may still see it
            with self._lock:
                self._lost.add(server)
                self._running.discard(task)
                stuck = all(s in self._lost for s in pool.servers) and (
                    not task.cancelled or any(not t.cancelled for t in self._queued[pool])
                )
                cause = TimeoutError(self.limits.stall(task, "the server is stalled"))
                if not task.cancelled:
                    task.cancel_event = threading.Event()
                self._lose(task, server.name, self.limits.stall(task))
            if stuck:
                raise ServerError(server.name, task.call.kind, cause) from cause

    def cancel(self, task: Task) -> None:
        if self._cancelled_now(task):
            task.cancel_event.set()

    def close(self) -> None:
        self.cancel_all()
        for s in (s for p in self.pools for s in p.servers):
            self._inbox[id(s)].put(_STOP)
        deadline = time.perf_counter() + self.join_timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.perf_counter()))
        self.left_running = [t.name for t in self._threads if t.is_alive()]
        self.release()  # a later runtime on these servers waits for the threads left running (one call each)
        if self.left_running:
            log.info(
                "left %d worker thread(s) finishing a cancelled call after close: %s (each ends when its call "
                "returns; a later run on the same server waits for it)",
                len(self.left_running),
                ", ".join(self.left_running),
            )


def _wait_for_earlier_owners(servers) -> None:
    """Wait until no thread of an earlier runtime is still running a call on one of ``servers`` (each up to the
    stall limit of the call it runs); a ServerError names a server still busy after that."""
    with _owners_lock:
        earlier = [(s, _owners.get(s)) for s in servers]
    for server, thread in earlier:
        if thread is None or not thread.is_alive():
            continue
        log.info("waiting for %s to finish a call from an earlier run", server.name)
        if not _join(thread):
            cause = TimeoutError("still busy past its stall limit in a call from an earlier run")
            raise ServerError(server.name, "earlier", cause) from cause


def _join(thread: _Worker) -> bool:
    """Wait until a worker is in no call, as long as the call it runs is within its stall limit; False if it is
    still in one past that limit."""
    while thread.is_alive():
        until = thread.until
        if until is None:  # in no call: ending, or idle in a runtime nobody closed
            return True
        left = until - time.perf_counter()
        if left <= 0:
            return False
        thread.join(min(left, 0.5))
    return True


@atexit.register
def finish_left_calls() -> None:
    """At the interpreter's exit, wait for the calls worker threads were left running (each up to its stall limit):
    a thread still inside a torch forward pass when the process ends aborts it ("terminate called without an active
    exception", exit status 134) after a correct result. A call still running past its limit is logged."""
    with _owners_lock:
        left = [(s, t) for s, t in _owners.items() if t.is_alive()]
    for server, thread in left:
        if not _join(thread):
            log.warning("%s is still busy in a call past its stall limit at exit", server.name)
