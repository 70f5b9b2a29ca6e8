"""The scheduler: owns the processing units and splits them among the requests, at safe points.

Requests queue in arrival order. Whenever one arrives, leaves or reaches a safe point, the policy
(:func:`specpar.planning.load.allocate`) says how many units each should have: a waiting request gets free units
at once (those whose servers hold most of its sequence) and starts at its smallest share; a running one whose share
changes is asked to pause at its next safe point (:class:`~specpar.scheduling.pausing.Pausable`), where it gives back
or takes units (those kept for it wait, at most a round, so no later request takes them first).

Nothing blocks while holding the lock; ``take`` waits on an event of the clock it was given (a :class:`WallClock`,
or a :class:`~specpar.runtimes.shared_clock.SharedClock`'s greenlets): one Scheduler serves threads and the simulator.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from specpar.core.calls import Context
from specpar.core.errors import ConfigError
from specpar.planning.load import KEEP_BONUS, Option, ShareCurve, allocate
from specpar.scheduling.pausing import Pausable
from specpar.scheduling.units import Placement, Unit, place

GOODPUT_WINDOW_MS = 10_000.0
MAX_PLACEMENTS = 4096  # pools kept per scheduler (options x unit sets met so far)
GOODPUT_BIN_MS = GOODPUT_WINDOW_MS / 100  # tokens recorded within one bin share an entry: at most ~100 entries


class WallClock:
    """Real time for a Scheduler: ms from perf_counter, threading events."""

    def now(self) -> float:
        return time.perf_counter() * 1000.0

    def event(self) -> threading.Event:
        return threading.Event()


class Ticket:
    """A request in the scheduler's queue. held: the units it owns (in use, and any kept for its next configuration).
    in_use: how many its running generation uses (0 while it waits). target: the policy's share. used: the units it
    ran on. switches: configurations after the first. ready: what arrive() started it on, for its first take()."""

    __slots__ = ("id", "curve", "pausable", "event", "arrival_ms", "started_ms", "held", "in_use", "target", "context",
                 "used", "switches", "ready")  # fmt: skip

    def __init__(self, id: int, curve: ShareCurve, pausable: Pausable, arrival_ms: float, context: Context | None):
        self.id, self.curve, self.pausable, self.arrival_ms, self.context = id, curve, pausable, arrival_ms, context
        self.event = self.started_ms = self.ready = None
        self.held: list[Unit] = []
        self.in_use = self.target = self.switches = 0
        self.used: list[Unit] = []

    @property
    def running(self) -> bool:
        return self.in_use > 0

    def __repr__(self) -> str:
        return f"Ticket({self.id}, held {len(self.held)}, in use {self.in_use}, target {self.target})"


@dataclass(frozen=True)
class LoadMetrics:
    """The scheduler's state, for an exporter (vLLM's names where it has one).

    units_per_request: the mean over running requests (0 when none runs). output_tokens: verified since the start.
    goodput_tokens_per_s: output tokens per second over the last ``window_s`` seconds. switches: configuration
    changes at safe points since the start.
    """

    requests_running: int
    requests_waiting: int
    units: int
    units_in_use: int
    units_per_request: float
    output_tokens: int
    goodput_tokens_per_s: float
    window_s: float
    switches: int

    def to_dict(self) -> dict:
        return asdict(self)


class Scheduler:
    """Processing ``units`` shared by requests (see the module docstring). clock: ``now()`` in ms and ``event()``
    (default: a WallClock)."""

    def __init__(self, units: Sequence[Unit], clock=None):
        if not units:
            raise ConfigError("a scheduler needs at least one processing unit")
        self.units = list(units)
        self.clock = clock or WallClock()
        self._lock = threading.Lock()
        self._free: list[Unit] = list(self.units)
        self._queue: list[Ticket] = []  # arrival order, until each leaves
        self._ids = itertools.count()
        self._t0 = self.clock.now()
        self._tokens = 0
        self._recent: deque = deque()  # [latest ms, tokens] per GOODPUT_BIN_MS bin of the goodput window
        self._switches = 0
        # units whose servers' times depend on what they hold (else their order does not matter: see Unit.cached)
        self._caching = any(u.caching for u in self.units)
        self._placements: dict = {}

    def _by_cache(self, units: list[Unit], context: Context) -> None:
        """Sort ``units`` by how much of ``context`` their servers hold, most first (stable: ties keep their order)."""
        if self._caching and len(units) > 1:
            cached = {id(u): u.cached(context) for u in units}
            units.sort(key=lambda u: cached[id(u)], reverse=True)

    # -- a request's life ------------------------------------------------------------------------------
    def arrive(self, curve: ShareCurve, pausable: Pausable, context: Context | None = None) -> Ticket:
        """Queue a request (its units come with :meth:`take`). Alone, it starts here on its first share, with no
        policy run (what :func:`~specpar.planning.load.allocate` gives a queue of one)."""
        if curve.min_units > len(self.units):
            raise ConfigError(
                f"the request needs {curve.min_units} processing units; this scheduler has {len(self.units)}"
            )
        with self._lock:
            now = self.clock.now()
            ticket = Ticket(next(self._ids), curve, pausable, now, context)
            queue = self._queue
            queue.append(ticket)
            if len(queue) > 1:
                self._rebalance()
            else:
                n = ticket.target = ticket.in_use = curve.first_share(len(self.units))
                free = self._free
                if context is not None and len(free) > n:
                    self._by_cache(free, context)
                held = ticket.held = free[:n]
                del free[:n]
                ticket.used = units = list(held)
                ticket.started_ms = now
                pausable.arm()
                ticket.ready = curve.option(n), units
        return ticket

    def take(self, ticket: Ticket, context: Context) -> tuple[Option, list[Unit]]:
        """At the start and at each safe point: give back what the request no longer needs, wait until it holds at
        least its smallest share, and return its option and units (those holding most of ``context`` first)."""
        ready = ticket.ready
        if ready is not None:  # started in arrive()
            ticket.ready = None
            return ready
        waited = False
        while True:
            with self._lock:
                if ticket not in self._queue:
                    raise ConfigError("this request has left the scheduler")
                was, held = ticket.in_use, ticket.held
                ticket.context, ticket.in_use = context, 0
                extra = len(held) - ticket.target
                if extra > 0:
                    self._by_cache(held, context)
                    self._free.extend(held[-extra:])
                    del held[-extra:]
                if extra or len(self._queue) > 1:
                    self._rebalance()  # (alone with its target's units, the policy would change nothing)
                    held = ticket.held
                if len(held) >= ticket.curve.min_units:
                    self._by_cache(held, context)
                    ticket.in_use = len(held)
                    ticket.used = [*ticket.used, *held]  # (a new list: the first is also returned)
                    if was:
                        ticket.switches += 1
                        self._switches += 1
                    elif ticket.started_ms is None:
                        ticket.started_ms = self.clock.now() if waited else ticket.arrival_ms
                    ticket.pausable.arm()
                    return ticket.curve.option(len(held)), list(held)
                if ticket.event is None:
                    ticket.event = self.clock.event()
                ticket.event.clear()
            ticket.event.wait()
            waited = True

    def leave(self, ticket: Ticket, tokens: int = 0) -> float:
        """The request is over (done, failed or cancelled): its units go to the others at once; ``tokens`` more
        output tokens verified (as :meth:`record`). Returns the clock's time."""
        now = self.clock.now()
        with self._lock:
            if tokens:
                self._record(now, tokens)
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._free.extend(ticket.held)
                ticket.held, ticket.in_use = [], 0
                if self._queue:
                    self._rebalance()
        return now

    def placement(self, option: Option, units: Sequence[Unit]) -> Placement:
        """The pools of ``option`` on ``units`` (:func:`~specpar.scheduling.units.place`), made once per algorithm
        and units (pools hold no state of a run)."""
        key = (option.algorithm, *units)
        placement = self._placements.get(key)
        if placement is None:
            if len(self._placements) >= MAX_PLACEMENTS:
                self._placements.clear()
            placement = self._placements[key] = place(option, units)
        return placement

    def record(self, tokens: int) -> None:
        """``tokens`` more output tokens verified (for the goodput)."""
        now = self.clock.now()
        with self._lock:
            self._record(now, tokens)

    def _record(self, now: float, tokens: int) -> None:
        self._tokens += tokens
        recent = self._recent
        last = recent[-1] if recent else None
        if last is not None and now // GOODPUT_BIN_MS == last[0] // GOODPUT_BIN_MS:
            last[0], last[1] = now, last[1] + tokens
        else:
            recent.append([now, tokens])
        while recent[0][0] < now - GOODPUT_WINDOW_MS:  # kept for the longest window metrics() reads
            recent.popleft()

    # -- the policy --------------------------------------------------------------------------------
    def _rebalance(self) -> None:
        """Targets from the policy; free units to the requests short of theirs, in arrival order; a pause asked of
        every running request whose units should change."""
        queue = self._queue
        if not queue:
            return
        targets = allocate([t.curve for t in queue], [len(t.held) for t in queue], len(self.units), KEEP_BONUS)
        for ticket, n in zip(queue, targets):
            ticket.target = n
        for ticket in queue:
            want = ticket.target - len(ticket.held)
            if want > 0 and self._free:
                if ticket.context is not None and len(self._free) > want:
                    self._by_cache(self._free, ticket.context)
                ticket.held.extend(self._free[:want])
                del self._free[:want]
                if not ticket.running and ticket.event is not None:
                    ticket.event.set()  # it waits in take()
            if ticket.running and (len(ticket.held) != ticket.in_use or ticket.target < ticket.in_use):
                ticket.pausable.ask()  # units kept for it, or some to give back: at its next safe point

    # -- metrics -----------------------------------------------------------------------------------
    def metrics(self, window_ms: float = GOODPUT_WINDOW_MS) -> LoadMetrics:
        """The state now; goodput over the last ``window_ms`` (at most GOODPUT_WINDOW_MS)."""
        now = self.clock.now()
        window_ms = min(window_ms, GOODPUT_WINDOW_MS)
        with self._lock:
            recent = [(t, n) for t, n in self._recent if t >= now - window_ms]
            span = min(window_ms, now - self._t0)
            running = [t for t in self._queue if t.running]
            return LoadMetrics(
                requests_running=len(running),
                requests_waiting=len(self._queue) - len(running),
                units=len(self.units),
                units_in_use=len(self.units) - len(self._free),
                units_per_request=sum(t.in_use for t in running) / len(running) if running else 0.0,
                output_tokens=self._tokens,
                goodput_tokens_per_s=sum(n for _, n in recent) / (span / 1000.0) if span > 0 else 0.0,
                window_s=span / 1000.0,
                switches=self._switches,
            )
