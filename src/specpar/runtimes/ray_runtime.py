"""Ray: every server an actor in its own process, on its own cores or GPU, on one machine or many.

The same contract and dispatch as the threads runtime; actors (:mod:`specpar.runtimes.ray_actors`) are built from
the servers' ``remote_spec()``. A replica whose actor dies or stalls is lost: killed, its task resent to a live one,
recorded in ``lost``; a pool with none left and work queued is a ServerError. ``close()`` gives cancelled calls
``join_timeout_s``, then kills their actors. ``local_pools`` (the drafter, say) run on threads of the driver
(a :class:`ThreadRuntime` sharing the queue of finished work). Each server gets ``cpus_per_server`` CPUs (and a GPU
for ``gpu_pools``) in one placement group; with ``reuse_actors`` the actors outlive the runtime with their servers.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specpar.core.config import check_ray_resources
from specpar.core.errors import ConfigError, ServerError
from specpar.core.latency import STALL_FACTOR, STALL_FLOOR_S
from specpar.runtimes import capacity, ray_actors
from specpar.runtimes.base import CallLimits, Pool, Runtime, Task
from specpar.runtimes.ray_cluster import connect, import_ray, started_here
from specpar.runtimes.threads import ThreadRuntime

DEFAULT_JOIN_TIMEOUT_S = 2.0
PLACEMENT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RayOptions:
    """A :class:`RayRuntime`'s settings (checked when made).

    cpus_per_server: CPUs in each server's bundle (and its torch threads). placement: "PACK" or "SPREAD".
    call_timeout_s, stall_factor, stall_floor_s: the stall limits (:class:`~specpar.runtimes.base.CallLimits`), the
    local pools' too. join_timeout_s: how long close() waits for the calls it cancelled before killing their actors.
    reuse_actors: keep the actors with their servers for later runs. gpu_pools: pools whose servers get one GPU each
    when the cluster has GPUs. inject_link_ms: a delay each new actor adds before and after every call (to validate
    the virtual clock's link_ms). local_pools: pools (by name) whose servers run on threads in this process.
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
        check_ray_resources(self.cpus_per_server, self.placement)


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
            if server not in remote:
                remote[server] = ray_actors.kept(server, self._session) if self.options.reuse_actors else None
                if remote[server] is None:
                    new.append((pool, server))
        if new:
            remote.update(zip([s for _, s in new], self._make(new)))
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
        gpus, cpus = ray.cluster_resources().get("GPU", 0) > 0, float(self.options.cpus_per_server)
        bundles = [
            {"CPU": cpus, "GPU": 1} if gpus and p.name in self.options.gpu_pools else {"CPU": cpus} for p, _ in servers
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
        while True:
            ref = self._finished_item()
            if type(ref) is Task:  # a local pool's, finished on its thread
                if not ref.cancelled:
                    return self._returned(ref)
            elif ref in self._running:  # (else its replica was lost meanwhile)
                task = self._reply(ref)
                if task is not None:
                    return task

    def _reply(self, ref) -> Task | None:
        """The task whose call ``ref`` answered, finished (None: cancelled, or its replica died and it was resent)."""
        ray = self._ray
        task, replica, _ = self._running.pop(ref)
        self._ref.pop(task, None)
        try:
            task.result = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            self._lose_replica(task, replica, f"{type(exc).__name__}: the actor died")
            return None
        except ray.exceptions.RayTaskError as exc:  # the server raised: surfaced as on threads
            task.error = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
        self._free(task.pool, replica)
        task.end = self.now()  # a cancelled call's: when its actor stopped working on it, as on threads
        if task.cancelled:
            return None
        if task.error is None:
            self.limits.record(task)
        return self._returned(task)

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
    def _watched(self) -> list[Task]:
        """The tasks whose calls run on an actor now, cancelled ones included until they return."""
        return [t for t, _, _ in self._running.values()]

    def _lose_stuck(self) -> None:
        stalled = set(self.limits.stalled(self._watched(), self.now()))
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
