"""The virtual clock: a discrete-event simulation of the runtime contract. Nothing sleeps.

A task's duration is its server's ``duration_ms(call)`` at the moment it starts;
its result is computed (instantly) when the clock reaches its end.

Ties: tasks ending at the same time (to 1e-9 ms, so that float sums such as
5 x 0.2 do not decide) are returned in the order of their pools in ``pools``,
then in submission order. Runs are deterministic. Put drafters first: a draft
finishing together with a verification is then seen first, and the verifier's
row can judge it at once, as it would on a real clock a moment later.
"""

from __future__ import annotations

import gc
import heapq
import threading
from collections.abc import Callable, Mapping, Sequence

from specpar.core.errors import ConfigError, ServerError
from specpar.core.latency import check_contention, slowdown
from specpar.runtimes.base import Pool, Runtime, Task

CANCEL_MODES = ("now", "end")


class collector_paused:  # noqa: N801 (used as a function: ``with collector_paused():``)
    """The cyclic garbage collector off inside (when ``pause``), as timeit does; its state restored on the way out,
    exceptions included. Nested pauses restore it only at the outermost one.

    A virtual-clock run allocates millions of short-lived, acyclic objects (tasks, calls, contexts) that reference
    counting frees at once; the collector would only traverse them, which costs 5-12% of a DSI run at N = 200 and
    20-22% at N = 1000 (python -m benchmarks virtual_throughput). Callers that wrap a run (``generate``, an engine's
    request) pause it for the whole call, so that their own bookkeeping after the run does not set off a collection
    while the run's tasks are still referenced (one per generation otherwise: 3% of the simulator's instructions).
    A class, not a generator: re-enabling is the last thing its exit does (a generator's StopIteration would be
    allocated after it, and could itself set off that collection). Pauses in several threads at once share one
    count under a lock, so the collector comes back on when the last of them ends (each thread reading and
    setting the collector's state alone could leave it off for good).
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
    tasks hold servers, each advances at 1 / f(n) of its own speed (f: :func:`specpar.core.latency.slowdown`), so
    when n changes every running task's remaining time is stretched or shrunk by f(new) / f(old). A cancelled task
    counts while it keeps its server (cancel_frees="end"). Runs without contention never make one (their times
    stay those of the paper's model, bit for bit).

    running: task -> the function that puts the task's (new) end on its clock's heap; ends rescheduled this way
    leave stale entries on the heap, which the clock skips (their time is no longer the task's end).
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

    cancel_frees: "now" frees a cancelled task's server at the cancel time (a
        preemptible server, the paper's assumption); "end" keeps it busy until the
        task would have finished (a GPU kernel that cannot be stopped; a transformers
        server's verification, one forward pass, on threads and Ray); or
        {pool name: mode}, "now" for the pools not named (e.g. {"target": "end"}:
        a drafter stops between its passes, a target pass runs to its end).
    link_ms: one-way latency between the driver and the servers, in ms (servers on
        other nodes): a number for every pool, or {pool name: ms} (e.g. {"target": 5}:
        the drafter beside the driver, as on Ray by default). Each call's request and
        result cross the link, so a task takes its server's duration plus 2 x link_ms,
        and its server takes the next task only once the result is back (as on Ray).
        Cancellation is taken as immediate.
    contention: None (every pass takes its server's duration), or a machine's slowdown factors (f(1) = 1.0,
        f(2), ...): while n servers are busy at once each pass runs f(n) times slower (:class:`Contention`;
        with link_ms, the round trip is stretched with the pass).
    """

    name = "virtual"

    def __init__(
        self,
        pools: Sequence[Pool],
        cancel_frees: str | Mapping[str, str] = "now",
        link_ms: float | Mapping[str, float] = 0.0,
        contention: Sequence[float] | None = None,
    ):
        modes = cancel_frees if isinstance(cancel_frees, Mapping) else {p.name: cancel_frees for p in pools}
        for mode in modes.values():
            if mode not in CANCEL_MODES:
                raise ConfigError(f"cancel_frees must be one of {CANCEL_MODES} (or a mapping to them), got {mode!r}")
        links = link_ms if isinstance(link_ms, Mapping) else {p.name: link_ms for p in pools}
        for ms in links.values():
            if not isinstance(ms, (int, float)) or not 0 <= ms < float("inf"):
                raise ConfigError(f"link_ms must be a finite number of ms >= 0, got {ms!r}")
        super().__init__(pools)
        self.cancel_frees = cancel_frees
        self.link_ms = link_ms
        self._rank = {p: i for i, p in enumerate(self.pools)}  # ties on the clock go to the lower rank
        self._round_trip = {p: 2.0 * links.get(p.name, 0.0) for p in self.pools}
        self._linked = any(self._round_trip.values())
        self._frees_now = {p: modes.get(p.name, "now") == "now" for p in self.pools}
        self._now = 0.0
        self._heap: list = []  # (end in integer ns, pool rank, task id, task) of started tasks
        self._queues({p: p.servers for p in self.pools})
        # pools whose servers' times cannot depend on their caches (LatencyProfile.cache_matters False, the
        # paper's time-unit model): every choice of replica gives the same times and tokens here, so the one idle
        # longest is taken without comparing caches (a shortcut of Pool.pick: 1.2x the simulator's speed)
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
        server = idle.pop(0) if idle and self._any_replica[pool] else self._take_idle(task)
        if server is not None:
            self._start(task, server)
        return task

    def _start(self, task: Task, server) -> None:
        task.server = server
        task.start = now = self._now
        end = now + server.duration_ms(task.call)
        if self._linked:
            end += self._round_trip[task.pool]
        task.end = end
        if self._contention is not None:
            self._contention.start(task, now, self._push)
            return
        # ends are compared on a 1e-9 ms grid, so that float sums such as 5 x 0.2 do not decide ties
        heapq.heappush(self._heap, (int(end * 1e9 + 0.5), self._rank[task.pool], task.id, task))

    def _push(self, task: Task) -> None:
        """Put ``task``'s end on the heap (again: under contention ends move)."""
        heapq.heappush(self._heap, (int(task.end * 1e9 + 0.5), self._rank[task.pool], task.id, task))

    def _free(self, pool: Pool, server) -> None:
        task = self._next_queued(pool, server)
        if task is not None:
            self._start(task, server)

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
            return
        if self._frees_now[task.pool]:
            task.end = self._now
            task.done = True
            if self._contention is not None:
                self._contention.stop(task, self._now)
            self._free(task.pool, task.server)
