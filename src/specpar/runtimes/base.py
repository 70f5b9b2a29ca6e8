"""The runtime contract: pools of servers, tasks, and the four operations every runtime provides."""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specpar.core.errors import ConfigError, ServerError
from specpar.core.latency import STALL_FACTOR, STALL_FLOOR_S, LatencyProfile, stall_limit_s
from specpar.core.model import Model, Server, as_model, as_server
from specpar.core.numbers import is_number
from specpar.core.results import TaskRecord

log = logging.getLogger(__name__)


class Pool:
    """Interchangeable servers (e.g. sp_degree replicas of the target); a task runs on an idle one, chosen by
    :meth:`pick` (the same rule on every runtime)."""

    def __init__(self, servers: Sequence[Server], name: str, model: Model | None = None):
        """model: what the servers were made from (default: the first server's model)."""
        if not servers:
            raise ValueError(f"pool {name!r} needs at least one server")
        self.servers = [as_server(s) for s in servers]
        self.name = name
        if model is None:  # the servers' model, else the first server seen as one (what it has, defaults for the rest)
            model = self.servers[0].model or as_model(self.servers[0])
        self.model = model

    def __len__(self) -> int:
        return len(self.servers)

    @staticmethod
    def pick(idle: Sequence[Server], call) -> int:
        """Which idle server runs ``call``: its index in ``idle`` (in the order they became idle): the one whose cache
        covers most of the call's context (no replica pays to catch up on tokens another has seen); ties go to the
        server idle longest."""
        if len(idle) == 1:
            return 0
        context = call.context
        best, most = 0, -1
        for i, server in enumerate(idle):
            n = server.cached_len(context)
            if n > most:
                best, most = i, n
        return best

    def __repr__(self) -> str:
        return f"Pool({self.name}, {len(self.servers)} servers)"


def model_of(source) -> Model | None:
    """The model behind a model or a Pool (the model its servers were made from); None for None."""
    if isinstance(source, Pool):
        return source.model
    return None if source is None else as_model(source)


def latency_of(source) -> LatencyProfile | None:
    """The LatencyProfile of a model or of a Pool's servers; None when unknown (or for None)."""
    if isinstance(source, Pool):
        return source.servers[0].latency
    return None if source is None else as_model(source).latency


_ids = itertools.count()


@dataclass(frozen=True)
class LostReplica:
    """A replica that died or stalled (threads, Ray): its name, its pool, when (ms on the runtime's clock), why, and
    the time its unfinished call had run (``lost_ms``, work redone elsewhere; 0 for a cancelled call)."""

    server: str
    pool: str
    at_ms: float
    lost_ms: float
    reason: str


class Task:
    """One call submitted to a pool. Times are ms on the runtime's clock."""

    __slots__ = (
        "pool",
        "call",
        "id",
        "server",
        "start",
        "end",
        "result",
        "error",
        "cancelled",
        "done",
        "cancel_event",
        "cached",
        "limit_s",
    )

    def __init__(self, pool: Pool, call):
        self.pool = pool
        self.call = call
        self.id = next(_ids)
        self.server = self.start = self.end = self.result = self.error = self.cancel_event = None
        self.cancelled = self.done = False
        # cached: tokens of the context the server held when the call started; limit_s: its stall limit (CallLimits).
        # Set by the real runtimes when it starts, None on the virtual clock
        self.cached = self.limit_s = None

    def __repr__(self) -> str:
        return f"Task({self.id}, {getattr(self.call, 'kind', '?')} on {self.pool.name})"


class CallLimits:
    """How long each call may run on a real runtime before its server counts as stalled (seconds).

    timeout_s: a fixed limit for every call; None (the default): ``factor`` x the expected time, at least ``floor_s``
        (:func:`specpar.core.latency.stall_limit_s`), the expected time the longest of the server's latency profile's
        prediction and the longest call of the same kind its pool has completed so far.
    """

    def __init__(self, timeout_s: float | None = None, factor: float = STALL_FACTOR, floor_s: float = STALL_FLOOR_S):
        for name, v in (("call_timeout_s", timeout_s), ("stall_factor", factor), ("stall_floor_s", floor_s)):
            if v is None and name == "call_timeout_s":
                continue
            if not is_number(v, 0, lo_open=True):
                what = " (or None: derived from the servers' latency)" if name == "call_timeout_s" else ""
                raise ConfigError(f"{name} must be a number of seconds > 0{what}, got {v!r}")
        self.timeout_s, self.factor, self.floor_s = timeout_s, float(factor), float(floor_s)
        self._longest: dict[tuple[str, str], float] = {}  # (pool, kind) -> the longest completed call, ms

    def record(self, task: Task) -> None:
        """A call completed (not cancelled, no error): remember how long it took."""
        key = (task.pool.name, task.call.kind)
        ms = task.end - task.start
        if ms > self._longest.get(key, 0.0):
            self._longest[key] = ms

    def expected_ms(self, task: Task, latency) -> float | None:
        """How long ``task``'s call should take (ms), or None when nothing tells; latency: its server's profile."""
        measured = self._longest.get((task.pool.name, task.call.kind))
        predicted = None
        if latency is not None:
            cached = task.cached or 0
            try:
                predicted = latency.call_ms(task.call, cached if latency.cache_matters else 0)
            except (AttributeError, TypeError):  # a call the profile cannot price
                predicted = None
        known = [x for x in (measured, predicted) if x is not None]
        return max(known) if known else None

    def limit_s(self, task: Task, latency) -> float:
        """The stall limit of ``task``'s call, in seconds (set when it starts)."""
        if self.timeout_s is not None:
            return self.timeout_s
        return stall_limit_s(self.expected_ms(task, latency), self.factor, self.floor_s)

    def wait_s(self, running: Iterable[Task], now_ms: float) -> float | None:
        """Seconds to wait for a finished task before looking for stalled calls among ``running`` (started, their
        limits set): until the first passes its limit, and at most a second (a call that starts meanwhile may have a
        shorter limit); None: no limit (wait as long as it takes)."""
        if self.timeout_s == math.inf:
            return None
        ends = [t.start + t.limit_s * 1000.0 for t in running]
        if not ends:
            return 1.0
        return min(1.0, max(0.0, (min(ends) - now_ms) / 1000.0) + 1e-3)

    def stalled(self, running: Iterable[Task], now_ms: float) -> list[Task]:
        """The calls among ``running`` that have run past their limits at ``now_ms``."""
        return [t for t in running if now_ms - t.start >= t.limit_s * 1000.0]

    def stall(self, task: Task, what: str = "stalled") -> str:
        """Why ``task``'s server counts as stalled, for messages."""
        which = "call_timeout_s" if self.timeout_s is not None else "its stall limit"
        return f"no answer after {task.limit_s:.3g} s ({which}): {what}"


_claims: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id(server) -> the runtime that claimed it
_claims_lock = threading.Lock()


def _with_parts(servers) -> list:
    """Servers and the servers they are made of (a merge of drafters, HSD's levels: their ``parts``)."""
    out = []
    for s in servers:
        out.append(s)
        out.extend(_with_parts(s.parts))
    return out


class Runtime(ABC):
    """Runs tasks on pools of servers; see the package docstring for the contract.

    A server belongs to one runtime at a time (:meth:`claim` when made, released at :meth:`close`): a second runtime
    on a server still claimed by an open one (whose caches would interleave: wrong tokens) is a ConfigError.
    """

    name = "runtime"
    options_type: type | None = None  # a dataclass of its options (Ray's), else its constructor's keywords are
    left_running: Sequence[str] = ()  # threads close() left behind, finishing a call (threads)

    def __init__(self, pools: Sequence[Pool]):
        self.pools = list(pools)
        self.tasks: list[Task] = []  # every task submitted, in order
        self.lost: list[LostReplica] = []  # servers lost during the generation (threads, Ray), in order
        self.closed = False
        self._claimed: list = []
        self._in_flight = 0  # tasks submitted, neither returned by wait() nor cancelled (threads, Ray)

    def claim(self, servers) -> None:
        """Make ``servers`` (and those they are made of) this runtime's until :meth:`close`; a ConfigError if an
        open runtime holds one."""
        servers = _with_parts(servers)
        with _claims_lock:
            for server in servers:
                owner = _claims.get(id(server))
                if owner is not None and owner is not self and not owner.closed:
                    raise ConfigError(
                        f"server {getattr(server, 'name', server)!r} is already running another generation (on a "
                        f"{owner.name} runtime not yet closed): servers, and so Pools, cannot be shared by generations "
                        "running at once (their caches would mix); give each thread its own servers, or send the "
                        "requests to one Engine, which runs them in turn"
                    )
            for server in servers:
                _claims[id(server)] = self
                self._claimed.append(server)  # alive while claimed, so its id stays its own

    # -- dispatch: the same queue on every runtime -----------------------------------------------------------
    def _queues(self, servers: Mapping[Pool, Sequence]) -> None:
        """Each pool's idle servers (``servers``: all of them, at the start), in the order they became idle, and
        its queue of tasks waiting for one (first come, first served)."""
        self._idle = {p: list(s) for p, s in servers.items()}
        self._queued = {p: deque() for p in servers}

    def _dispatch(self, task: Task, first: bool = False) -> None:
        """Start ``task`` on the idle server of its pool that :meth:`Pool.pick` chooses, else queue it (last, or
        ``first`` for a task whose server was lost)."""
        pool = task.pool
        idle = self._idle[pool]
        if idle:
            self._start(task, idle.pop(pool.pick(idle, task.call)))
        elif first:
            self._queued[pool].appendleft(task)
        else:
            self._queued[pool].append(task)

    def _free(self, pool: Pool, server) -> None:
        """``server`` of ``pool`` is free: it starts the first queued task not cancelled, or waits idle."""
        queued = self._queued[pool]
        while queued:
            task = queued.popleft()
            if not task.cancelled:
                self._start(task, server)
                return
        self._idle[pool].append(server)

    def _start(self, task: Task, server) -> None:
        """Run ``task`` on ``server`` (each runtime its own way)."""
        raise NotImplementedError

    def _waiting(self) -> list[Pool]:
        """The pools where a task not cancelled waits for a server, in order."""
        return [p for p, queued in self._queued.items() if any(not t.cancelled for t in queued)]

    def _cancelled_now(self, task: Task) -> bool:
        """Mark a task in flight cancelled and done (real runtimes); False for one already finished or cancelled."""
        if task.done or task.cancelled:
            return False
        task.cancelled = task.done = True
        self._in_flight -= 1
        return True

    # -- the real runtimes' waits and faults (threads, Ray) ----------------------------------------------
    def _finished_item(self):
        """The next item of the queue of finished work (a task, or a Ray ObjectRef), losing the servers of watched
        calls past their stall limits while it waits; a RuntimeError when nothing is in flight."""
        while True:
            if self._in_flight == 0:
                raise RuntimeError("wait() called with no task in flight (an algorithm bug)")
            self._check_pools()
            try:
                return self._finished.get(timeout=self.limits.wait_s(self._watched(), self.now()))
            except queue.Empty:
                self._lose_stuck()

    def _check_pools(self) -> None:
        """A ServerError when work waits on a pool with no live server left (Ray's check; threads raise on a loss)."""
        return None

    def _returned(self, task: Task) -> Task:
        """``task`` finished and not cancelled: done and out of flight; a ServerError if its server raised."""
        task.done = True
        self._in_flight -= 1
        if task.error is not None:
            raise ServerError(task.server.name, task.call.kind, task.error) from task.error
        return task

    def _lose(self, task: Task, server_name: str, reason: str) -> None:
        """``task``'s server died or stalled: record it in ``lost`` (with the time its unfinished call had run) and
        send ``task`` (unless cancelled) to the first live server of its pool to be free."""
        lost_ms = 0.0 if task.cancelled else self.now() - task.start
        self.lost.append(LostReplica(server_name, task.pool.name, self.now(), lost_ms, reason))
        log.warning("lost %s of %s (%s); %.1f ms of work redone", server_name, task.pool.name, reason, lost_ms)
        if not task.cancelled:
            task.server = task.start = task.limit_s = None  # not watched until a server starts it again
            self._dispatch(task, first=True)

    def release(self) -> None:
        """Give this runtime's servers back (at close)."""
        self.closed = True
        with _claims_lock:
            for server in self._claimed:
                if _claims.get(id(server)) is self:
                    del _claims[id(server)]
            self._claimed = []

    @abstractmethod
    def submit(self, pool: Pool, call) -> Task:
        """Queue ``call`` on ``pool``; it starts on the first idle server, FIFO."""

    @abstractmethod
    def wait(self) -> Task:
        """Block until the next task finishes and return it (cancelled tasks are never returned).

        Raises ServerError if the task's server raised, RuntimeError if nothing is in flight.
        """

    @abstractmethod
    def cancel(self, task: Task) -> None:
        """Drop a queued or running task; a no-op for a finished or cancelled one."""

    def now(self) -> float:
        """The clock, in ms since the runtime started (real runtimes: the wall clock since ``_t0``)."""
        return (time.perf_counter() - self._t0) * 1000.0

    def run(self, pool: Pool, call):
        """Submit ``call`` and wait for it; for sequential algorithms with nothing else in flight."""
        task = self.submit(pool, call)
        done = self.wait()
        assert done is task, "run() needs an otherwise idle runtime"
        return done.result

    def cancel_all(self) -> None:
        for task in self.tasks:
            if not task.done:
                self.cancel(task)

    def close(self) -> None:
        """Cancel what is left and release resources (threads, actors, the servers' claim)."""
        self.cancel_all()
        self.release()

    def timeline(self, since: float = 0.0) -> list[TaskRecord]:
        """Every task that started, as records relative to ``since`` (ms)."""
        return [
            TaskRecord(
                t.server.name,
                t.call.kind,
                t.start - since,
                t.end - since,
                t.cancelled,
                len(t.call.context),
                t.call.n_drafts if t.call.kind == "verify" else t.call.k,
                t.cached,
            )
            for t in self.tasks
            if t.server is not None and t.start is not None and t.end is not None
        ]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
