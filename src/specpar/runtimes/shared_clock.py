"""One virtual clock for many generations at once: the discrete-event simulation of a server under load.

Each generation runs in its own greenlet with a :class:`ClockRuntime`, a VirtualRuntime over one event heap that every
generation shares; its ``wait()`` hands control to the hub (:meth:`SharedClock.run`), which pops the earliest event
and resumes its generation. The clock advances only once every generation waits, and runs are deterministic (ties as
on a VirtualRuntime, wake-ups first). The hub also starts greenlets (:meth:`SharedClock.spawn`), wakes sleepers
(:meth:`SharedClock.sleep`) and waiters on events (:meth:`SharedClock.event`). A cancelled pass that runs to its end
keeps its server busy for the next generation too (``busy_until``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from greenlet import getcurrent, greenlet

from specpar.runtimes.base import Pool, Task
from specpar.runtimes.virtual import Contention, VirtualRuntime

_WAKE_RANK = -1  # wake-ups sort before task ends at the same time


class _Wake:
    """A greenlet to resume (or start, with ``args``) at ``time`` ms."""

    __slots__ = ("time", "glet", "args")

    def __init__(self, time: float, glet: greenlet, args: tuple):
        self.time, self.glet, self.args = time, glet, args


class SharedClock:
    """The hub: one event heap and one clock (ms) for every :class:`ClockRuntime` and greenlet on it.

    Heap entries are (time in integer ns, rank, sequence number, payload, owner): a task's end (payload the
    Task, owner its ClockRuntime; rank its pool's, sequence its id) or a wake-up (payload a _Wake).
    """

    def __init__(self):
        self._now = 0.0
        self._heap: list = []
        self._seq = itertools.count()
        self._hub: greenlet | None = None
        self.busy_until: dict = {}  # server -> ms until which a cancelled pass keeps it (cancel_frees="end")
        self.contention: Contention | None = None  # the machine's, shared by every generation (ClockRuntime)
        self.events = 0  # entries the hub has handled (the simulator's cost is per event)

    def now(self) -> float:
        return self._now

    # -- greenlets -------------------------------------------------------------------------------
    def spawn(self, fn: Callable, *args, at: float | None = None) -> greenlet:
        """Run ``fn(*args)`` in a greenlet of its own from time ``at`` (default now); its parent is the hub, so
        when it returns (or raises) control goes back to the hub."""
        glet = greenlet(fn)
        self._push(self._now if at is None else max(at, self._now), glet, args)
        return glet

    def sleep(self, ms: float) -> None:
        """Suspend the calling greenlet for ``ms`` of virtual time."""
        self._push(self._now + ms, getcurrent(), ())
        self._suspend()

    def event(self) -> ClockEvent:
        """An event whose ``wait()`` suspends the calling greenlet until another sets it (threading.Event's
        interface, on this clock)."""
        return ClockEvent(self)

    def _push(self, time: float, glet: greenlet, args: tuple) -> None:
        heapq.heappush(self._heap, (int(time * 1e9 + 0.5), _WAKE_RANK, next(self._seq), _Wake(time, glet, args), None))

    def _suspend(self):
        """Hand control to the hub until it resumes this greenlet; returns what it was resumed with."""
        if self._hub is None or getcurrent() is self._hub:
            raise RuntimeError("a wait on the shared clock outside a greenlet it runs (call it from spawn()ed code)")
        return self._hub.switch()

    # -- the event loop ----------------------------------------------------------------------------
    def run(self, until: float | None = None) -> None:
        """Handle events in time order until none is left (or the next is after ``until`` ms).

        An exception raised in a greenlet ends the run here (generations catch their own errors)."""
        self._hub = hub = getcurrent()
        heap, pop = self._heap, heapq.heappop
        try:
            while heap:
                entry = heap[0]
                payload = entry[3]
                if until is not None and entry[0] > until * 1e9:
                    break
                pop(heap)
                self.events += 1
                if type(payload) is _Wake:
                    self._now = max(self._now, payload.time)
                    glet = payload.glet
                    if glet.dead:
                        continue
                    if not glet:  # not started yet: it returns to the hub when it ends
                        glet.parent = hub
                    glet.switch(*payload.args)
                    continue
                task: Task = payload
                if task.done:  # cancelled with cancel_frees="now": its server is already free
                    continue
                if self.contention is not None:
                    if self.contention.stale(entry):  # its end moved: a later entry holds it
                        continue
                    self.contention.stop(task, task.end)
                self._now = task.end
                task.done = True
                owner: ClockRuntime = entry[4]
                owner._live.discard(task)
                if task.cancelled:  # cancelled with cancel_frees="end": the server was busy until now
                    owner._free(task.pool, task.server)
                    continue
                owner._greenlet.switch(task)  # its wait() returns the task; back here at its next wait
        finally:
            self._hub = None


class ClockEvent:
    """threading.Event on a SharedClock: ``wait()`` suspends the calling greenlet until ``set()``; waiters resume
    at the time it is set, in the order they began waiting."""

    __slots__ = ("clock", "_flag", "_waiters")

    def __init__(self, clock: SharedClock):
        self.clock, self._flag, self._waiters = clock, False, []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        clock = self.clock
        for glet in self._waiters:
            clock._push(clock._now, glet, ())
        self._waiters.clear()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self._flag:
            self._waiters.append(getcurrent())
            self.clock._suspend()
        return True


class ClockRuntime(VirtualRuntime):
    """A VirtualRuntime whose tasks run on a :class:`SharedClock` (one generation among many).

    Made in the greenlet of the generation it serves (``make_runtime`` with ``options={"clock": clock}``); its
    ``wait()`` suspends that greenlet until the hub hands it the next of its tasks to finish.
    """

    name = "virtual"

    def __init__(self, pools, cancel_frees="now", link_ms=0.0, contention=None, *, clock: SharedClock):
        super().__init__(pools, cancel_frees, link_ms, contention)
        self.clock = clock
        if self._contention is not None:  # one machine: every generation on the clock slows the others
            if clock.contention is None:
                clock.contention = self._contention
            self._contention = clock.contention
        self._heap, self._busy_until, self._owner = clock._heap, clock.busy_until, self
        self._greenlet = getcurrent()
        self._live: set[Task] = set()  # submitted, neither finished nor cancelled

    def now(self) -> float:
        return self.clock._now

    def submit(self, pool: Pool, call) -> Task:
        task = super().submit(pool, call)
        self._live.add(task)
        return task

    def wait(self) -> Task:
        if not self._live:
            raise RuntimeError("wait() called with no task in flight (an algorithm bug)")
        return self._finish(self.clock._suspend())

    def cancel(self, task: Task) -> None:
        self._live.discard(task)
        super().cancel(task)

    def cancel_all(self) -> None:
        for task in sorted(self._live, key=lambda t: (t.server is not None, t.id)):  # queued ones first
            self.cancel(task)
