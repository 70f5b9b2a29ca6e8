"""The virtual clock: a discrete-event simulation of the runtime contract. Nothing sleeps.

A task's duration is its server's ``duration_ms(call)`` when it starts; its result is computed when the clock reaches
its end. Ties (to 1e-9 ms) go by the order of the pools in ``pools``, then submission: runs are deterministic. Put
drafters first, so that a draft finishing with a verification is seen first, as on a real clock a moment later.
"""

from __future__ import annotations

import gc
import heapq
import threading
from collections.abc import Callable, Mapping, Sequence

from specpar.core.config import check_cancel_frees, check_link_ms
from specpar.core.errors import ServerError
from specpar.core.latency import check_contention, slowdown
from specpar.runtimes.base import Pool, Runtime, Task


class collector_paused:  # noqa: N801 (used as a function: ``with collector_paused():``)
    """The cyclic garbage collector off inside (when ``pause``), as timeit does; its state restored on the way out.

    A virtual-clock run allocates millions of short-lived, acyclic objects that reference counting frees at once;
    the collector would only traverse them (5-22% of a DSI run: python -m benchmarks virtual_throughput). A class, not
    a generator, so that re-enabling is the last thing its exit does. Pauses in several threads share one count under
    a lock: the collector comes back on when the last ends.
    """

    __slots__ = ("pause", "entered")

    def __init__(self, pause: bool = True):
        self.pause = pause
        self.entered = False

    def __enter__(self):
        global _pauses, _was_enabled
        if self.pause and not self.entered:
            with _pause_lock:
                if _pauses == 0:
                    _was_enabled = gc.isenabled()
                    gc.disable()
                _pauses += 1
            self.entered = True
        return self

    def __exit__(self, *exc) -> None:
        global _pauses
        if self.entered:  # a second exit (or one without an enter) changes nothing
            self.entered = False
            with _pause_lock:
                _pauses -= 1
                if _pauses == 0 and _was_enabled:
                    gc.enable()


_pause_lock = threading.Lock()
_pauses = 0  # collector_paused blocks open, in every thread
_was_enabled = False  # the collector's state when the first of them opened


class Contention:
    """Passes slowed by the servers busy at once (a machine profile's contention), as processor sharing: while n
    tasks hold servers each advances at 1 / f(n) of its speed (:func:`specpar.core.latency.slowdown`), so when n
    changes every running task's remaining time is scaled by f(new) / f(old). A cancelled task counts while it keeps
    its server.

    running: task -> the function that puts its (new) end on its clock's heap; the stale entries left there are
    skipped (:meth:`stale`).
    """

    __slots__ = ("factors", "running")

    def __init__(self, factors):
        self.factors = check_contention(factors)
        self.running: dict[Task, Callable[[Task], None]] = {}

    def _rescale(self, now: float, before: int, after: int) -> None:
        ratio = slowdown(self.factors, after) / slowdown(self.factors, before)
        if ratio != 1.0:
            for task, push in self.running.items():
                task.end = now + (task.end - now) * ratio
                push(task)

    def start(self, task: Task, now: float, push: Callable[[Task], None]) -> None:
        """``task`` starts at ``now``, its ``end`` set at its own speed: the others slow down, it runs at the new
        count's speed; every end goes on the heap through ``push``."""
        n = len(self.running)
        self._rescale(now, n, n + 1)
        task.end = now + (task.end - now) * slowdown(self.factors, n + 1)
        self.running[task] = push
        push(task)

    def stop(self, task: Task, now: float) -> None:
        """``task`` no longer holds its server (it ended, or was cancelled and freed it): the others speed up."""
        if self.running.pop(task, None) is not None:
            n = len(self.running)
            self._rescale(now, n + 1, n)

    @staticmethod
    def stale(entry) -> bool:
        """Whether a heap entry (end in ns, ..., task at [3]) is no longer its task's end."""
        return entry[0] != int(entry[3].end * 1e9 + 0.5)


class VirtualRuntime(Runtime):
    """Discrete-event runtime.

    cancel_frees: "now" frees a cancelled task's server at once (a preemptible server, the paper's assumption); "end"
        keeps it busy until the task would have finished (a forward pass that cannot be stopped); or {pool name:
        mode}, "now" for the pools not named.
    link_ms: one-way latency between the driver and the servers, in ms: a number, or {pool name: ms}. A task takes
        its server's duration plus 2 x link_ms, and its server takes the next task only once the result is back.
    contention: None, or a machine's slowdown factors (f(1) = 1.0, f(2), ...): :class:`Contention`.
    """

    name = "virtual"

    def __init__(
        self,
        pools: Sequence[Pool],
        cancel_frees: str | Mapping[str, str] = "now",
        link_ms: float | Mapping[str, float] = 0.0,
        contention: Sequence[float] | None = None,
    ):
        check_cancel_frees(cancel_frees)
        check_link_ms(link_ms)
        modes = cancel_frees if isinstance(cancel_frees, Mapping) else {p.name: cancel_frees for p in pools}
        links = link_ms if isinstance(link_ms, Mapping) else {p.name: link_ms for p in pools}
        super().__init__(pools)
        self.cancel_frees = cancel_frees
        self.link_ms = link_ms
        self._rank = {p: i for i, p in enumerate(self.pools)}  # ties on the clock go to the lower rank
        self._round_trip = {p: 2.0 * links.get(p.name, 0.0) for p in self.pools}
        self._linked = any(self._round_trip.values())
        self._frees_now = {p: modes.get(p.name, "now") == "now" for p in self.pools}
        self._now = 0.0
        self._heap: list = []  # (end in integer ns, pool rank, task id, task, owner) of started tasks
        self._owner = None  # the runtime a shared clock's heap entry names (ClockRuntime)
        self._busy_until: dict = {}  # server -> ms until which a cancelled pass keeps it (cancel_frees="end")
        self._queues({p: p.servers for p in self.pools})
        # pools whose servers' times cannot depend on their caches (the paper's time-unit model): the one idle longest
        # is taken without comparing caches (a shortcut of Pool.pick: 1.2x the simulator's speed)
        self._any_replica = {
            p: all(s.latency is not None and not s.latency.cache_matters for s in p.servers) for p in self.pools
        }
        self._contention = None if contention is None else Contention(contention)
        self._paused = None
        self.claim([s for p in self.pools for s in p.servers])

    def __enter__(self):
        """Pause the cyclic garbage collector until exit (:func:`collector_paused`)."""
        self._paused = collector_paused().__enter__()
        return self

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            if self._paused is not None:
                self._paused.__exit__()
                self._paused = None

    def now(self) -> float:
        return self._now

    def submit(self, pool: Pool, call) -> Task:
        task = Task(pool, call)
        self.tasks.append(task)
        idle = self._idle[pool]
        if idle and self._any_replica[pool]:
            self._start(task, idle.pop(0))
        else:
            self._dispatch(task)
        return task

    def _start(self, task: Task, server) -> None:
        """Start ``task`` on ``server`` now, or once a cancelled pass still running there ends (``_busy_until``)."""
        task.server = server
        now = start = self.now()
        busy = self._busy_until.get(server) if self._busy_until else None
        if busy is not None and busy > now:
            start = busy
        task.start = start
        end = start + server.duration_ms(task.call)
        if self._linked:
            end += self._round_trip[task.pool]
        task.end = end
        if self._contention is not None:  # (a start delayed by busy_until is slowed from now on: an approximation)
            self._contention.start(task, now, self._push)
        else:
            self._push(task)

    def _push(self, task: Task) -> None:
        """Put ``task``'s end on the heap (again: under contention ends move), on a 1e-9 ms grid so that float sums
        such as 5 x 0.2 do not decide ties."""
        heapq.heappush(self._heap, (int(task.end * 1e9 + 0.5), self._rank[task.pool], task.id, task, self._owner))

    def _finish(self, task: Task) -> Task:
        """``task`` ends now: its result computed (a ServerError if its server raised) and its server free."""
        try:
            task.result = task.server.compute(task.call)
        except Exception as exc:
            task.error = exc
            self._free(task.pool, task.server)
            raise ServerError(task.server.name, task.call.kind, exc) from exc
        self._free(task.pool, task.server)
        return task

    def wait(self) -> Task:
        heap, contention = self._heap, self._contention
        while heap:
            entry = heapq.heappop(heap)
            task = entry[3]
            if task.done:  # cancelled with cancel_frees="now": its server is already free
                continue
            if contention is not None:
                if contention.stale(entry):  # its end moved: a later entry holds it
                    continue
                contention.stop(task, task.end)
            self._now = task.end
            task.done = True
            if task.cancelled:  # cancelled with cancel_frees="end": the server was busy until now
                self._free(task.pool, task.server)
                continue
            return self._finish(task)
        raise RuntimeError("wait() called with no task in flight (an algorithm bug)")

    def cancel_all(self) -> None:
        """Cancel what is queued or running; only those are in the queues or the heap, so finished tasks are
        not visited. Queued tasks first: a server freed by a cancel then has nothing left to start."""
        for queued in self._queued.values():
            for task in queued:
                self.cancel(task)
        for entry in list(self._heap):
            self.cancel(entry[3])

    def cancel(self, task: Task) -> None:
        if task.done or task.cancelled:
            return
        task.cancelled = True
        if task.server is None:  # still queued: dropped lazily by _free
            task.done = True
        elif self._frees_now[task.pool]:
            task.end = self.now()
            task.done = True
            if self._contention is not None:
                self._contention.stop(task, task.end)
            self._free(task.pool, task.server)
        else:  # its server stays busy until the task's end (on a shared clock: for whichever generation uses it next)
            self._busy_until[task.server] = task.end
