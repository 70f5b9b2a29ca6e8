"""Ray: every server an actor in its own process, on its own cores or GPU, on one machine or many.

The same contract and the same dispatch as the threads runtime; the actors (:mod:`specpar.runtimes.ray_actors`) are
built from the servers' ``remote_spec()`` and sent only the tokens they have not seen. A replica whose actor dies or
stalls (:class:`~specpar.runtimes.base.CallLimits`) is lost: killed, its task sent to a live replica of its pool,
recorded in ``lost`` (lost replicas cost time, never tokens); a pool with none left and work queued is a
ServerError. ``close()`` never hangs: calls cancelled at the end get ``join_timeout_s``, then their actors are killed.

The pools in ``local_pools`` (the drafter, say) run on threads of the driver instead (a :class:`ThreadRuntime`
sharing this runtime's queue of finished work): no round trip per call. Each server gets a bundle of
``cpus_per_server`` CPUs, and one GPU for the servers of ``gpu_pools`` when the cluster has some; a run's new actors
share one placement group. Actors are killed at ``close()`` unless ``reuse_actors``: then they stay with their local
server objects for later runtimes (an engine's pools), each dying with its server object or the Ray session.
"""

from __future__ import annotations

import logging
import math
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specpar.core.errors import ConfigError, ServerError
from specpar.core.latency import STALL_FACTOR, STALL_FLOOR_S
from specpar.runtimes import capacity, ray_actors
from specpar.runtimes.base import CallLimits, Pool, Runtime, Task
from specpar.runtimes.ray_cluster import connect, import_ray, started_here
from specpar.runtimes.threads import ThreadRuntime

log = logging.getLogger(__name__)

DEFAULT_JOIN_TIMEOUT_S = 2.0
PLACEMENT_TIMEOUT_S = 60.0
STRATEGIES = ("PACK", "SPREAD")


@dataclass(frozen=True)
class RayOptions:
    """A :class:`RayRuntime`'s settings (checked when made).

    cpus_per_server: CPUs in each server's bundle (and its torch threads, at least 1).
    placement: "PACK" (one node if it fits) or "SPREAD" (across nodes).
    call_timeout_s: a call running longer than this loses its replica; None (the default): each call's limit is
        derived from its server's latency (:class:`~specpar.runtimes.base.CallLimits`, with ``stall_factor`` and
        ``stall_floor_s``); ``math.inf``: no limit. The pools in ``local_pools`` follow the same limits.
    join_timeout_s: how long close() waits for the calls it cancelled before killing their actors.
    reuse_actors: keep the actors with their servers for later runs instead of killing them at close().
    gpu_pools: pools whose servers get one GPU each when the cluster has GPUs.
    inject_link_ms: a delay each new actor adds before and after every call, as if it were that far away (to
        validate the virtual clock's link_ms; 0 for real runs).
    local_pools: pools (by name) whose servers run on threads in this process instead, e.g. ("drafter",): no
        round trip per call, at the price of sharing the driver's process (see the README's figures).
    """

    cpus_per_server: float = 1.0
    placement: str = "PACK"
    call_timeout_s: float | None = None
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S
    reuse_actors: bool = False
    gpu_pools: Sequence[str] = ("target",)
    inject_link_ms: float = 0.0
    local_pools: Sequence[str] = ()
    stall_factor: float = STALL_FACTOR
    stall_floor_s: float = STALL_FLOOR_S

    def __post_init__(self):
        cpus = self.cpus_per_server
        if not (isinstance(cpus, (int, float)) and cpus > 0 and math.isfinite(cpus)):
            raise ConfigError(f"cpus_per_server must be > 0, got {cpus!r}")
        if self.placement not in STRATEGIES:
            raise ConfigError(f"placement must be one of {STRATEGIES}, got {self.placement!r}")


class RayRuntime(Runtime):
    """Runtime on Ray actors; times are the driver's wall-clock ms since the actors were ready.

    options: its :class:`RayOptions`, or their fields as keywords (``RayRuntime(pools, cpus_per_server=2)``;
    keywords change the fields of ``options`` when both are given).
    """

    name = "ray"
    options_type = RayOptions

    def __init__(self, pools: Sequence[Pool], options: RayOptions | None = None, **keywords):
        o = replace(options or RayOptions(), **keywords)
        self.limits = CallLimits(o.call_timeout_s, o.stall_factor, o.stall_floor_s)
        super().__init__(pools)
        self.options = o
        self._ray = import_ray()
        remote_pools = [p for p in self.pools if p.name not in o.local_pools]
        servers = [(p, s) for p in remote_pools for s in p.servers]
        if not self._ray.is_initialized():  # a local Ray is started for these servers: one process each
            capacity.check_local_actors(len(servers))
        connect(cpus=len(servers) * o.cpus_per_server)
        self._session = self._ray.get_runtime_context().get_node_id()  # new with every Ray this process joins
        self._remote = self._actors(servers)  # local server -> RemoteServer
        self._latency = {r: s.latency for s, r in self._remote.items()}  # for the stall limits
        self._replicas = {p: [self._remote[s] for s in p.servers] for p in remote_pools}
        self._queues(self._replicas)  # live idle replicas, longest idle first
        self._running: dict = {}  # ObjectRef -> (task, replica, seq), cancelled calls included until they return
        self._ref: dict[Task, object] = {}  # running task -> its ObjectRef
        # what finished: an ObjectRef (put by Ray's callback) or a Task of a local pool (put by its thread)
        self._finished: queue.SimpleQueue = queue.SimpleQueue()
        local = [p for p in self.pools if p.name in o.local_pools]
        self._local = (
            ThreadRuntime(local, o.call_timeout_s, finished=self._finished, stall_factor=o.stall_factor,
                          stall_floor_s=o.stall_floor_s)
            if local
            else None
        )  # fmt: skip
        self._t0 = self._local._t0 if self._local else time.perf_counter()  # one clock for both
        self.claim([s for p in remote_pools for s in p.servers])  # the local pools': by their ThreadRuntime

    # -- actors ------------------------------------------------------------------------------------
    def _actors(self, servers) -> dict:
        """A RemoteServer per local server: a kept one when reusing, new actors (one placement group) else."""
        remote, new = {}, []
        for pool, server in servers:
            kept = ray_actors.kept(server, self._session) if self.options.reuse_actors else None
            if kept is not None and server not in remote:
                remote[server] = kept
            elif server not in remote:
                remote[server] = None
                new.append((pool, server))
        if new:
            for server, made in zip([s for _, s in new], self._make([(p, s) for p, s in new])):
                remote[server] = made
        if self.options.reuse_actors:
            for server, r in remote.items():
                ray_actors.keep(server, r, self._session)
        return remote

    def _make(self, servers) -> list[ray_actors.RemoteServer]:
        ray = self._ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if started_here():  # a local Ray: its processes must fit this machine (a joined cluster: its CPUs below)
            capacity.check_local_actors(len(servers))
        specs = [ray_actors.remote_spec(s) for _, s in servers]
        gpus = ray.cluster_resources().get("GPU", 0) > 0
        bundles = [
            {
                "CPU": float(self.options.cpus_per_server),
                **({"GPU": 1} if gpus and p.name in self.options.gpu_pools else {}),
            }
            for p, _ in servers
        ]
        have, need = ray.cluster_resources().get("CPU", 0), sum(b["CPU"] for b in bundles)
        if need > have:
            raise ConfigError(
                f"{len(bundles)} servers with {self.options.cpus_per_server:g} CPU(s) each need {need:g} CPUs, but the Ray "
                f"cluster has {have:g}: lower cpus_per_server (--cpus-per-server) or sp_degree, or add nodes"
            )
        pg = placement_group(bundles, strategy=self.options.placement)
        if not pg.wait(timeout_seconds=PLACEMENT_TIMEOUT_S):
            remove_placement_group(pg)
            raise ConfigError(
                f"Ray cannot place {len(bundles)} servers with {self.options.cpus_per_server:g} CPU(s) each "
                f"(placement {self.options.placement}; free: {ray.available_resources()}): lower cpus_per_server "
                "(--cpus-per-server) or sp_degree, or add nodes"
            )
        group = ray_actors.Group(pg, len(bundles))
        host = ray.remote(concurrency_groups={ray_actors.CONTROL: 1})(ray_actors.ServerHost)
        threads = max(1, int(self.options.cpus_per_server))
        actors = [
            host.options(
                num_cpus=b["CPU"],
                num_gpus=b.get("GPU", 0),
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
            ).remote(spec, threads, float(self.options.inject_link_ms))
            for i, (b, spec) in enumerate(zip(bundles, specs))
        ]
        made = [ray_actors.RemoteServer(s.name, a, group) for (_, s), a in zip(servers, actors)]
        for (_, server), r in zip(servers, made):
            try:
                ray.get(r.actor.ready.remote())
            except Exception as exc:
                for m in made:
                    m.kill()
                raise ServerError(server.name, "build", exc) from exc
        return made

    # -- the contract ------------------------------------------------------------------------------
    def now(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    def submit(self, pool: Pool, call) -> Task:
        self._in_flight += 1
        if pool not in self._idle:  # a local pool
            task = self._local.submit(pool, call)
            self.tasks.append(task)
            return task
        task = Task(pool, call)
        self.tasks.append(task)
        self._dispatch(task)
        return task

    def _start(self, task: Task, replica) -> None:
        task.server = replica
        task.start = self.now()
        task.cached = replica.cached_len(task.call.context)  # the mirror of what the actor was sent
        task.limit_s = self.limits.limit_s(task, self._latency.get(replica))
        seq, ref = replica.submit(task.call)
        self._running[ref] = (task, replica, seq)
        self._ref[task] = ref
        ref.future().add_done_callback(lambda _, ref=ref: self._finished.put(ref))

    def wait(self) -> Task:
        ray = self._ray
        while True:
            if self._in_flight == 0:
                raise RuntimeError("wait() called with no task in flight (an algorithm bug)")
            self._check_pools()
            try:
                ref = self._finished.get(timeout=self.limits.wait_s(self._calls(), self.now()))
            except queue.Empty:
                self._lose_stuck()
                continue
            if type(ref) is Task:  # a local pool's
                if self._local_finished(ref):
                    return ref
                continue
            if ref not in self._running:  # its replica was lost meanwhile
                continue
            task, replica, _ = self._running.pop(ref)
            self._ref.pop(task, None)
            try:
                result = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                self._lose_replica(task, replica, f"{type(exc).__name__}: the actor died")
                continue
            except ray.exceptions.RayTaskError as exc:  # the server raised: surfaced as on threads
                self._free(task.pool, replica)
                if task.cancelled:
                    continue
                cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
                self._finish(task)
                task.error = cause
                raise ServerError(replica.name, task.call.kind, cause) from cause
            self._free(task.pool, replica)
            if task.cancelled:
                task.end = self.now()  # when its actor stopped working on it, as on threads
                continue
            task.result = result
            self._finish(task)
            self.limits.record(task)
            return task

    def _local_finished(self, task: Task) -> Task | None:
        """A task of a local pool finished on its thread (None if it was cancelled)."""
        if task.cancelled:
            return None
        task.done = True  # its thread set its start and end
        self._in_flight -= 1
        if task.error is not None:
            raise ServerError(task.server.name, task.call.kind, task.error) from task.error
        return task

    def _finish(self, task: Task) -> None:
        task.end = self.now()
        task.done = True
        self._in_flight -= 1

    def cancel(self, task: Task) -> None:
        if task.pool not in self._idle:  # a local pool
            if not (task.done or task.cancelled):
                self._in_flight -= 1
                self._local.cancel(task)
            return
        if not self._cancelled_now(task):
            return
        task.end = self.now() if task.start is not None else None
        ref = self._ref.get(task)
        if ref is not None:  # running: the actor stops it; a queued task is dropped when its turn comes
            _, replica, seq = self._running[ref]
            replica.cancel(seq)

    def running(self) -> list[tuple[Task, ray_actors.RemoteServer]]:
        """The tasks running on an actor now (not cancelled), with their replicas."""
        return [(t, r) for t, r, _ in self._running.values() if not t.cancelled]

    # -- faults ------------------------------------------------------------------------------------
    def _calls(self) -> list[Task]:
        """The tasks whose calls run on an actor now, cancelled ones included until they return."""
        return [t for t, _, _ in self._running.values()]

    def _lose_stuck(self) -> None:
        stalled = set(self.limits.stalled(self._calls(), self.now()))
        for ref, (task, replica, _) in list(self._running.items()):
            if task in stalled:
                del self._running[ref]
                self._ref.pop(task, None)
                self._lose_replica(task, replica, self.limits.stall(task))
        if self._local is not None:
            self._local._lose_stuck()  # a local pool's server: lost as on threads (a ServerError if it was the last)

    def _lose_replica(self, task: Task, replica, reason: str) -> None:
        """``replica`` is gone: kill it, then record the loss and resend its task (unless cancelled)."""
        replica.kill()
        for server, r in self._remote.items():
            if r is replica:
                ray_actors.forget(server)
        self._lose(task, replica.name, reason)

    def _check_pools(self) -> None:
        """A ServerError when work waits on a pool whose replicas are all lost."""
        for pool in self._waiting():
            if not any(r.alive for r in self._replicas[pool]):
                task = next(t for t in self._queued[pool] if not t.cancelled)
                reasons = "; ".join(f"{x.server}: {x.reason}" for x in self.lost if x.pool == pool.name)
                cause = RuntimeError(
                    f"all {len(self._replicas[pool])} replica(s) of {pool.name!r} are lost ({reasons})"
                )
                raise ServerError(pool.name, task.call.kind, cause) from cause

    # -- the end -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel what is left, give cancelled calls join_timeout_s to return, kill the actors that did not
        (and every actor, unless reuse_actors)."""
        self.cancel_all()
        if self._running and self._ray.is_initialized():
            refs = list(self._running)
            done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=self.options.join_timeout_s)
            for ref in refs:
                if ref not in done:
                    task, replica, _ = self._running[ref]
                    self._lose_replica(task, replica, f"still busy {self.options.join_timeout_s:g} s after close()")
            self._running.clear()
            self._ref.clear()
        if not self.options.reuse_actors:
            for replica in self._remote.values():
                replica.kill()
        if self._local is not None:
            self._local.close()
        self.release()
