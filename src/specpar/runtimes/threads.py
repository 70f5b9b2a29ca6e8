"""Real wall-clock time: one worker thread per server, tasks handed to the server :meth:`Pool.pick` chooses.

Cancellation sets the task's event: a queued task is skipped, a running server
sees the event (simulated servers wake from their sleep at once; model servers
check it between forward passes) and its result is discarded.

Nothing hangs:

* a call that runs longer than ``call_timeout_s`` is a :class:`ServerError` naming its server (a stuck
  server is treated as lost; the algorithms never wait on it again);
* ``close()`` abandons every task no longer needed at once and gives running work ``join_timeout_s`` (50 ms by
  default: idle workers and cancelled sleeps end in microseconds) to stop, then leaves the threads that did not
  (a model server finishing the forward pass it was in, or a server stuck in a call that ignores cancellation)
  behind as daemons, listed in ``left_running`` and logged; each ends on its own once its call returns. Their
  servers stay reserved: a later runtime on the same server waits for the old thread first (up to
  ``call_timeout_s``), so two threads never share a KV cache. So a generation returns as soon as its last
  token is known, whatever a stalled server is doing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence

from specpar.core.errors import ConfigError, ServerError
from specpar.runtimes.base import Pool, Runtime, Task

log = logging.getLogger(__name__)

_STOP = object()
DEFAULT_CALL_TIMEOUT_S = 600.0  # generous: a cold prefill of a long prompt on a CPU takes tens of seconds
DEFAULT_JOIN_TIMEOUT_S = 0.05

# server -> the worker thread that last ran it, while that thread may still be running a call
_owners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_owners_lock = threading.Lock()


class ThreadRuntime(Runtime):
    """Runtime on OS threads; times are wall-clock ms since construction.

    call_timeout_s: a call running longer than this raises ServerError from ``wait()`` (None: no limit).
    join_timeout_s: how long ``close()`` waits for running work to stop before leaving it behind.
    finished: the queue finished tasks are put on (default: its own); a runtime that runs some pools on these
        threads and others elsewhere (Ray) shares one, and waits on it instead of calling ``wait()``.
    """

    name = "threads"

    def __init__(
        self,
        pools: Sequence[Pool],
        call_timeout_s: float | None = DEFAULT_CALL_TIMEOUT_S,
        join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S,
        finished: queue.SimpleQueue | None = None,
    ):
        if call_timeout_s is not None and not call_timeout_s > 0:
            raise ConfigError(f"call_timeout_s must be > 0 seconds (or None for no limit), got {call_timeout_s!r}")
        super().__init__(pools)
        self.call_timeout_s = call_timeout_s
        self.join_timeout_s = join_timeout_s
        self.left_running: list[str] = []  # threads close() left behind (stuck servers)
        self._lock = threading.Lock()
        self._finished: queue.SimpleQueue = queue.SimpleQueue() if finished is None else finished
        self._idle = {p: list(p.servers) for p in self.pools}  # in the order they became idle
        self._queued = {p: deque() for p in self.pools}
        self._running: set[Task] = set()
        self._in_flight = 0
        servers = [s for p in self.pools for s in p.servers]
        self._inbox = {id(s): queue.SimpleQueue() for s in servers}
        _wait_for_earlier_owners(servers, call_timeout_s)
        self._threads = [
            threading.Thread(target=self._work, args=(p, s, self._inbox[id(s)]), name=f"specpar-{s.name}", daemon=True)
            for p in self.pools
            for s in p.servers
        ]
        with _owners_lock:
            for t, s in zip(self._threads, servers):
                _owners[s] = t
        for t in self._threads:
            t.start()
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    def _work(self, pool: Pool, server, inbox: queue.SimpleQueue) -> None:
        task = inbox.get()
        while task is not _STOP:
            if not task.cancelled:
                task.start = self.now()
                try:
                    task.cached = server.cached_len(task.call.context)
                    task.result = server.run(task.call, task.cancel_event)
                except BaseException as exc:  # surfaced by wait(), never lost in the worker
                    task.error = exc
                task.end = self.now()
                self._finished.put(task)
            with self._lock:
                self._running.discard(task)
                task = self._next_queued(pool)
                if task is None:
                    self._idle[pool].append(server)
                else:
                    task.server = server
                    self._running.add(task)
            if task is None:
                task = inbox.get()

    def _next_queued(self, pool: Pool) -> Task | None:
        queued = self._queued[pool]
        while queued:
            task = queued.popleft()
            if not task.cancelled:
                return task
        return None

    def submit(self, pool: Pool, call) -> Task:
        task = Task(pool, call)
        task.cancel_event = threading.Event()
        self.tasks.append(task)
        self._in_flight += 1
        with self._lock:
            idle = self._idle[pool]
            if not idle:
                self._queued[pool].append(task)
                return task
            server = idle.pop(pool.pick(idle, call))
            task.server = server
            self._running.add(task)
        self._inbox[id(server)].put(task)
        return task

    def wait(self) -> Task:
        while True:
            if self._in_flight == 0:
                raise RuntimeError("wait() called with no task in flight (an algorithm bug)")
            try:
                task = self._finished.get(timeout=self._time_left())
            except queue.Empty:
                self._raise_stuck()
                continue
            if task.cancelled:
                continue
            self._in_flight -= 1
            task.done = True
            if task.error is not None:
                raise ServerError(task.server.name, task.call.kind, task.error) from task.error
            return task

    def _time_left(self) -> float | None:
        """Seconds until the oldest running call passes call_timeout_s (None: no limit)."""
        if self.call_timeout_s is None:
            return None
        with self._lock:
            starts = [t.start for t in self._running if t.start is not None and not t.cancelled]
        if not starts:
            return self.call_timeout_s
        return max(0.0, self.call_timeout_s - (self.now() - min(starts)) / 1000.0) + 1e-3

    def _raise_stuck(self) -> None:
        limit_ms = self.call_timeout_s * 1000.0
        with self._lock:
            stuck = [
                t for t in self._running if t.start is not None and not t.cancelled and self.now() - t.start >= limit_ms
            ]
        if stuck:
            task = min(stuck, key=lambda t: t.start)
            self.cancel(task)
            cause = TimeoutError(f"no answer after {self.call_timeout_s:g} s (call_timeout_s); the server is stuck")
            raise ServerError(task.server.name, task.call.kind, cause) from cause

    def cancel(self, task: Task) -> None:
        if task.done or task.cancelled:
            return
        task.cancelled = True
        task.cancel_event.set()
        task.done = True
        self._in_flight -= 1

    def close(self) -> None:
        self.cancel_all()
        for s in (s for p in self.pools for s in p.servers):
            self._inbox[id(s)].put(_STOP)
        deadline = time.perf_counter() + self.join_timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.perf_counter()))
        self.left_running = [t.name for t in self._threads if t.is_alive()]
        if self.left_running:
            log.info(
                "left %d worker thread(s) finishing a cancelled call after close: %s (each ends when its call "
                "returns; a later run on the same server waits for it)",
                len(self.left_running),
                ", ".join(self.left_running),
            )


def _wait_for_earlier_owners(servers, timeout_s: float | None) -> None:
    """Wait until no thread of an earlier runtime is still running a call on one of ``servers``."""
    with _owners_lock:
        earlier = [(s, _owners.get(s)) for s in servers]
    for server, thread in earlier:
        if thread is None or not thread.is_alive():
            continue
        log.info("waiting for %s to finish a call from an earlier run", server.name)
        thread.join(timeout_s)
        if thread.is_alive():
            cause = TimeoutError(f"still busy after {timeout_s:g} s in a call from an earlier run")
            raise ServerError(server.name, "earlier", cause) from cause
