"""Real wall-clock time: one worker thread per server, tasks handed over through queues.

Cancellation sets the task's event: a queued task is skipped, a running server
sees the event (simulated servers wake from their sleep at once; model servers
check it between forward passes) and its result is discarded. ``close()`` joins
every worker, so nothing is left running after a generation, an error, or a
cancellation.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence

from specpar.errors import ServerError
from specpar.runtimes.base import Pool, Runtime, Task

_STOP = object()


class ThreadRuntime(Runtime):
    """Runtime on OS threads; times are wall-clock ms since construction."""

    name = "threads"

    def __init__(self, pools: Sequence[Pool]):
        super().__init__(pools)
        self._t0 = time.perf_counter()
        self._finished: queue.SimpleQueue = queue.SimpleQueue()
        self._queues = {id(p): queue.SimpleQueue() for p in self.pools}
        self._in_flight = 0
        self._threads = [
            threading.Thread(target=self._work, args=(s, self._queues[id(p)]), name=f"specpar-{s.name}", daemon=True)
            for p in self.pools
            for s in p.servers
        ]
        for t in self._threads:
            t.start()

    def now(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    def _work(self, server, tasks: queue.SimpleQueue) -> None:
        while True:
            task = tasks.get()
            if task is _STOP:
                return
            if task.cancelled:
                continue
            task.server = server
            task.start = self.now()
            try:
                task.result = server.run(task.call, task.cancel_event)
            except BaseException as exc:  # surfaced by wait(), never lost in the worker
                task.error = exc
            task.end = self.now()
            self._finished.put(task)

    def submit(self, pool: Pool, call) -> Task:
        task = Task(pool, call)
        task.cancel_event = threading.Event()
        self.tasks.append(task)
        self._in_flight += 1
        self._queues[id(pool)].put(task)
        return task

    def wait(self) -> Task:
        while True:
            if self._in_flight == 0:
                raise RuntimeError("wait() called with no task in flight (an algorithm bug)")
            task = self._finished.get()
            if task.cancelled:
                continue
            self._in_flight -= 1
            task.done = True
            if task.error is not None:
                raise ServerError(task.server.name, task.call.kind, task.error) from task.error
            return task

    def cancel(self, task: Task) -> None:
        if task.done or task.cancelled:
            return
        task.cancelled = True
        task.cancel_event.set()
        task.done = True
        self._in_flight -= 1

    def close(self) -> None:
        self.cancel_all()
        for p in self.pools:
            for _ in p.servers:
                self._queues[id(p)].put(_STOP)
        for t in self._threads:
            t.join()
