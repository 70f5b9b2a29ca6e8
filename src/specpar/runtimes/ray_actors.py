"""A server in its own process: the Ray actor that hosts it, and the driver's handle on that actor.

Only unseen tokens travel (the driver mirrors how many of a Context's verified tokens each actor holds); weights never
do (an actor builds its server from ``remote_spec()``). Calls run one at a time; ``cancel`` runs in a concurrency
group of its own, so it reaches a running call at once; a call cancelled before it started never runs.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
import weakref

from specpar.core.calls import Context
from specpar.core.errors import ConfigError
from specpar.core.prefix import common_prefix_len

CONTROL = "control"  # the concurrency group of cancel() and stats(): never queued behind a call


class ServerHost:
    """Runs in the actor's process: one server (built by ``spec``, its ``remote_spec()``), the tokens it was sent,
    and the cancellation flags. threads: its CPU bundle (torch's and llama.cpp's threads). link_ms: a delay injected
    before each call and after it (0: none)."""

    def __init__(self, spec, threads: int = 1, link_ms: float = 0.0):
        self.server = spec()
        self.link_s = link_ms / 1000.0  # an injected one-way delay per call (validates the virtual clock's link_ms)
        if "torch" in sys.modules:
            import torch

            torch.set_num_threads(max(1, threads))
        self.server.set_batch_threads(max(1, int(threads)))  # llama.cpp: its batched passes (the fast mode: all)
        self.base: list[int] = []  # the verified tokens of the current generation, as sent
        self.tokens: tuple[int, ...] = ()  # the last context of a call that did not come as a Context
        self.calls = 0  # calls that ran
        self.skipped = 0  # calls cancelled before they started (never ran)
        self._lock = threading.Lock()
        self._current: tuple[int, threading.Event] | None = None
        self._cancelled: set[int] = set()  # calls cancelled before they started

    def ready(self) -> str:
        return self.server.name

    def run(self, message: tuple):
        """Run call number ``seq`` (None if cancelled), sent as one ``message`` = (seq, call, new_base, tokens, n,
        tail, keep): a Context of n verified tokens (``tokens`` follow the ones held, or start a new base) and the
        drafts ``tail``; tail None: a plain sequence, ``tokens`` following the first ``keep`` of the last one."""
        seq, call, new_base, tokens, n, tail, keep = message
        if tail is None:
            self.tokens = context = self.tokens[:keep] + tokens
        else:
            if new_base:
                self.base = list(tokens)
            else:
                self.base.extend(tokens)
            context = Context(self.base, n, tail)
        call.context = context
        event = threading.Event()
        with self._lock:
            self._cancelled = {s for s in self._cancelled if s >= seq}
            if seq in self._cancelled:
                self.skipped += 1
                return None
            self._current = (seq, event)
        try:
            self.calls += 1
            if self.link_s and event.wait(self.link_s):  # the request crossing the link
                result = None
            else:
                result = self.server.run(call, event)
        finally:
            with self._lock:
                self._current = None
        if self.link_s:
            time.sleep(self.link_s)  # the result crossing back
        return None if event.is_set() else result

    def cancel(self, seq: int) -> None:
        """Stop call ``seq``: the running one returns early, a later one never starts."""
        with self._lock:
            if self._current is not None and self._current[0] == seq:
                self._current[1].set()
            else:
                self._cancelled.add(seq)

    def reset(self) -> None:
        """Empty the server's cache (a prefill comes next) and forget the tokens sent."""
        self.server.reset()
        self.base, self.tokens = [], ()

    def stats(self) -> dict:
        """Calls run and skipped, and where this actor runs (its process id and Ray node id)."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        return {"calls": self.calls, "skipped": self.skipped, "pid": os.getpid(), "node": node}


class RemoteServer:
    """The driver's handle on one actor: what the runtime's pools pick from (``name``, ``cached_len``). It mirrors
    what the actor was sent, so that :meth:`submit` sends only what the actor lacks."""

    def __init__(self, name: str, actor, group: Group):
        self.name = name
        self.actor = actor
        self.group = group
        self.alive = True
        self._base: list[int] | None = None  # the base list of the Contexts sent lately
        self._sent = 0  # how many of its tokens the actor holds
        self._last = ()  # the last context sent (for cached_len)
        self._seq = 0

    def cached_len(self, context) -> int:
        return common_prefix_len(self._last, context) if type(self._last) is type(context) else 0

    def submit(self, call):
        """Send ``call`` to the actor; returns (its sequence number, the ObjectRef of its result)."""
        ctx = call.context
        if type(ctx) is Context:
            new_base = ctx.base is not self._base
            if new_base:
                self._base, self._sent = ctx.base, 0
            tokens = tuple(ctx.base[self._sent : ctx.n]) if ctx.n > self._sent else ()
            self._sent = max(self._sent, ctx.n)
            args = (new_base, tokens, ctx.n, ctx.tail, 0)
        else:
            ctx = tuple(ctx)
            keep = common_prefix_len(self._last, ctx) if type(self._last) is tuple else 0
            args = (False, ctx[keep:], len(ctx), None, keep)
        self._last = ctx
        wire = copy.copy(call)
        wire.context = None  # rebuilt in the actor from the tokens sent
        self._seq += 1
        return self._seq, self.actor.run.remote((self._seq, wire, *args))

    def reset(self) -> None:
        """Empty the actor's cache (after any call it runs) and the mirror of what it was sent."""
        import ray

        ray.get(self.actor.reset.remote())
        self._base, self._sent, self._last = None, 0, ()

    def cancel(self, seq: int) -> None:
        self.actor.cancel.options(concurrency_group=CONTROL).remote(seq)

    def kill(self) -> None:
        """Stop the actor's process (idempotent); the last member of a placement group gives it back."""
        if self.actor is None:
            return
        self.alive = False
        actor, self.actor = self.actor, None
        import ray

        if ray.is_initialized():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already dead, or Ray is going down
                pass
            self.group.leave()

    def __repr__(self) -> str:
        return f"RemoteServer({self.name}{'' if self.alive else ', lost'})"


class Group:
    """A placement group shared by the actors made together; removed when the last of them is killed."""

    def __init__(self, pg, members: int):
        self.pg = pg
        self.members = members

    def leave(self) -> None:
        self.members -= 1
        if self.members == 0 and self.pg is not None:
            import ray
            from ray.util.placement_group import remove_placement_group

            if ray.is_initialized():
                try:
                    remove_placement_group(self.pg)
                except Exception:
                    pass
            self.pg = None


def remote_spec(server):
    """The picklable function that builds ``server`` in another process, or a ConfigError."""
    spec = server.remote_spec()
    if spec is None:
        raise ConfigError(
            f"server {server.name!r} ({type(server).__name__}) cannot run on Ray: it has no remote_spec() telling an "
            "actor how to build it"
        )
    return spec


# local server -> its RemoteServer, for actors kept between runs (reuse); the actor dies with its server
_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def kept(server, session: str) -> RemoteServer | None:
    """The live actor kept for ``server`` in this Ray session, if any."""
    entry = _kept.get(server)
    if entry is None:
        return None
    remote, where = entry
    if where != session or not remote.alive:
        _kept.pop(server, None)
        return None
    return remote


def keep(server, remote: RemoteServer, session: str) -> None:
    """Keep ``remote`` for later runs on ``server``; it is killed when ``server`` is garbage-collected."""
    entry = _kept.get(server)
    if entry is None or entry[0] is not remote:
        weakref.finalize(server, remote.kill)
    _kept[server] = (remote, session)


def reset_kept(servers) -> None:
    """Empty the caches of the actors kept for ``servers`` (those that have one)."""
    for server in servers:
        entry = _kept.get(server)
        if entry is not None and entry[0].alive:
            entry[0].reset()


def release_kept(servers) -> None:
    """Kill the actors kept for ``servers`` now (instead of when the servers are garbage-collected)."""
    for server in servers:
        entry = _kept.pop(server, None)
        if entry is not None:
            entry[0].kill()


def forget(server) -> None:
    _kept.pop(server, None)
