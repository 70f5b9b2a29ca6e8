"""The runtime contract: pools of servers, tasks, and the four operations every runtime provides."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

from specpar.core.results import TaskRecord


class Server(Protocol):
    """What a runtime needs of a server (a model instance with its own cache).

    cached_len(context): how many leading tokens of ``context`` the server's cache holds (what a call on it
        would not have to compute again); pools use it to choose a replica.
    duration_ms(call): how long ``call`` takes from the server's current state (virtual clock).
    compute(call): the result, at once (virtual clock).
    run(call, cancelled): the result in real time; returns early (None) once ``cancelled`` is set.
    """

    name: str

    def cached_len(self, context) -> int: ...

    def duration_ms(self, call) -> float: ...

    def compute(self, call) -> Any: ...

    def run(self, call, cancelled) -> Any: ...


class Pool:
    """Interchangeable servers (e.g. sp_degree replicas of the target); a task runs on an idle one, chosen by
    :meth:`pick` (the same rule on every runtime)."""

    def __init__(self, servers: Sequence[Server], name: str):
        if not servers:
            raise ValueError(f"pool {name!r} needs at least one server")
        self.servers = list(servers)
        self.name = name

    def __len__(self) -> int:
        return len(self.servers)

    @staticmethod
    def pick(idle: Sequence[Server], call) -> int:
        """Which idle server runs ``call``: its index in ``idle`` (servers in the order they became idle).

        The one whose cache covers most of the call's context, so that no replica pays to catch up on tokens
        another has already seen (a pass costs more per token it has not cached: TTFT for a cold cache,
        per_token_ms for each unseen token); ties go to the server idle longest (first in ``idle``).
        """
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


_ids = itertools.count()


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
    )

    def __init__(self, pool: Pool, call):
        self.pool = pool
        self.call = call
        self.id = next(_ids)
        self.server = None
        self.start = self.end = None
        self.result = self.error = None
        self.cancelled = self.done = False
        self.cancel_event = None
        # cached: tokens of the context the server held when the call started; set by the real runtimes when it
        # starts, never on the virtual clock (left unset here: one attribute less per simulated task)

    def __repr__(self) -> str:
        return f"Task({self.id}, {getattr(self.call, 'kind', '?')} on {self.pool.name})"


class Runtime(ABC):
    """Runs tasks on pools of servers; see the package docstring for the contract."""

    name = "runtime"

    def __init__(self, pools: Sequence[Pool]):
        self.pools = list(pools)
        self.tasks: list[Task] = []  # every task submitted, in order

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

    @abstractmethod
    def now(self) -> float:
        """The clock, in ms since the runtime started."""

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
        """Cancel what is left and release resources (threads, actors)."""
        self.cancel_all()

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
                getattr(t, "cached", None),
            )
            for t in self.tasks
            if t.server is not None and t.start is not None and t.end is not None
        ]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
