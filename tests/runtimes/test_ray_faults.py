"""Ray runtime faults, cancellation and hygiene: each test fails on a leak, a hang (timeouts) or a lost token."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import RAY_OPTIONS
from specpar import LatencyProfile, ServerError, SimulatedModel, generate
from specpar.algorithms.dsi import dsi
from specpar.algorithms.generation import Generation
from specpar.backends.simulated import SimulatedServer
from specpar.core.calls import Score, as_context
from specpar.core.config import SpeculativeConfig
from specpar.core.decoding import GREEDY
from specpar.core.query import Query
from specpar.runtimes import Pool
from specpar.runtimes.ray_actors import ServerHost, release_kept
from specpar.runtimes.ray_runtime import RayRuntime

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(60)]


def alive_hosts() -> int:
    """Actors of this session still alive (Ray's GCS table: no dashboard needed)."""
    import ray._private.state

    return sum(1 for a in ray._private.state.actors().values() if a["State"] == "ALIVE")


def model(ms: float, seed: int = 5) -> SimulatedModel:
    return SimulatedModel(16, seed=seed, latency=LatencyProfile.uniform(ms))


def test_a_cancelled_call_never_runs_and_a_running_one_stops_at_once():
    """In the actor (no Ray needed): a call cancelled before it starts is skipped; then, on Ray, a call queued in
    an actor behind a running one and cancelled never runs, and the running one stops on cancel."""
    host = ServerHost(model(1.0).server("s").remote_spec())
    host.cancel(1)
    assert host.run((1, Score((1, 2), 0, GREEDY), True, (1, 2), 2, (), 0)) is None
    assert (host.calls, host.skipped) == (0, 1)

    rt = RayRuntime([Pool([model(10_000.0).server("slow")], "target")], **RAY_OPTIONS)
    with rt:
        replica = rt._replicas[rt.pools[0]][0]
        import ray

        call = Score(as_context([1, 2, 3]), 0, GREEDY)
        (s1, r1), (s2, r2) = replica.submit(call), replica.submit(call)  # the second waits in the actor's queue
        time.sleep(0.3)
        t0 = time.perf_counter()
        replica.cancel(s2)
        replica.cancel(s1)
        assert ray.get([r1, r2], timeout=10) == [None, None]
        cancel_s = time.perf_counter() - t0
        stats = ray.get(replica.actor.stats.remote())
    assert (stats["calls"], stats["skipped"]) == (1, 1)
    assert cancel_s < 2.0, f"a running call took {cancel_s:.2f} s to stop"


def test_a_queued_task_cancelled_in_the_runtime_is_never_sent():
    rt = RayRuntime([Pool([model(300.0).server("only")], "target")], **RAY_OPTIONS)
    with rt:
        pool = rt.pools[0]
        first = rt.submit(pool, Score(as_context([1, 2]), 0, GREEDY))
        queued = rt.submit(pool, Score(as_context([1, 2, 3]), 0, GREEDY))
        rt.cancel(queued)
        assert rt.wait() is first
        with pytest.raises(RuntimeError, match="no task in flight"):
            rt.wait()
        import ray

        assert ray.get(rt._replicas[pool][0].actor.stats.remote())["calls"] == 1
    assert queued.server is None and queued.result is None


def test_a_replica_killed_mid_verification_costs_time_never_tokens():
    import ray

    target, drafter = model(40.0), model(40.0).drafter(0.7, LatencyProfile.uniform(4.0), seed=2)
    targets = Pool([target.server(f"target{i}") for i in range(3)], "target")
    drafters = Pool([drafter.server("drafter")], "drafter")
    prompt, killed = [3, 1, 4], []
    rt = RayRuntime([drafters, targets], **RAY_OPTIONS)

    def kill_a_busy_target(_tokens):
        if not killed:
            busy = [r for t, r in rt.running() if t.pool is targets and t.call.n_drafts]
            if busy:
                ray.kill(busy[0].actor)
                killed.append(busy[0].name)

    with rt:
        g = Generation(Query(prompt, 30, stream=kill_a_busy_target), rt)
        out = dsi(g, {"drafter": drafters, "target": targets}, SpeculativeConfig(lookahead=3))
    assert out.tokens == target.greedy_tokens(prompt, 30)
    assert killed, "no verification was running when tokens streamed"
    assert [x.server for x in rt.lost] == killed
    assert "died" in rt.lost[0].reason  # its time lost is 0 if DSI had cancelled the call before the loss showed
    assert alive_hosts() == 0


def test_all_target_replicas_lost_is_a_clear_server_error():
    import ray

    rt = RayRuntime([Pool([model(1.0).server(f"target{i}") for i in range(2)], "target")], **RAY_OPTIONS)
    with rt:
        for replica in rt._replicas[rt.pools[0]]:
            ray.kill(replica.actor)
        for replica in rt._replicas[rt.pools[0]]:
            wait_dead(replica.actor)  # ray.kill is asynchronous: on a worker node a call could still get through
        rt.submit(rt.pools[0], Score(as_context([1, 2]), 0, GREEDY))
        with pytest.raises(ServerError, match="all 2 replica"):
            rt.wait()
    assert len(rt.lost) == 2 and alive_hosts() == 0


def wait_dead(actor, timeout_s: float = 60.0) -> None:
    """Block until a killed actor answers calls with RayActorError."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.stats.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError(f"actor still answering {timeout_s:g} s after ray.kill")


class StalledServer(SimulatedServer):
    """Alive but silent: every call sleeps for an hour and ignores cancellation."""

    def run(self, call, cancelled):
        time.sleep(3600)

    def remote_spec(self):
        return functools.partial(StalledServer, self.model, self.name)


def test_a_stalled_replica_is_lost_after_the_call_timeout_and_its_task_redone():
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors can build StalledServer
    slow = model(25.0)
    targets = Pool([StalledServer(slow, "target0"), slow.server("target1")], "target")
    rt = RayRuntime([targets], call_timeout_s=0.5, reuse_actors=True, **RAY_OPTIONS)
    with rt:
        task = rt.submit(targets, Score(as_context([2, 7]), 0, GREEDY))
        assert rt.wait() is task
    assert task.result.rows == [slow.greedy_tokens([2, 7], 1)[0]]
    assert [x.server for x in rt.lost] == ["target0"] and "stalled" in rt.lost[0].reason
    assert 450 <= rt.lost[0].lost_ms < 5000

    # through generate(): a generation of about a second, during which the (new) target0 stalls again
    out = generate(
        [2, 7],
        targets,
        slow.drafter(0.5, LatencyProfile.uniform(2.0), seed=2),
        algorithm="dsi",
        max_tokens=40,
        lookahead=2,
        sp_degree=2,
        runtime="ray",
        runtime_options={**RAY_OPTIONS, "call_timeout_s": 0.2, "join_timeout_s": 0.3, "reuse_actors": False},
    )
    assert out.tokens == slow.greedy_tokens([2, 7], 40)
    assert out.replicas_lost == ("target0",)
    release_kept(targets.servers)  # target1's actor, kept by the first runtime
    assert alive_hosts() == 0


def test_without_a_call_timeout_a_stalled_replica_is_lost_after_its_derived_stall_limit():
    """call_timeout_s=None (the default): the limit is a multiple of the call's expected time (25 ms calls) with a
    floor, here 0.5 s; the stalled replica is lost and its task redone on the other."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    slow = model(25.0)
    targets = Pool([StalledServer(slow, "target0"), slow.server("target1")], "target")
    rt = RayRuntime([targets], stall_floor_s=0.5, **RAY_OPTIONS)
    with rt:
        task = rt.submit(targets, Score(as_context([2, 7]), 0, GREEDY))
        assert rt.wait() is task
    assert task.limit_s == 0.5 and task.result.rows == [slow.greedy_tokens([2, 7], 1)[0]]
    assert [x.server for x in rt.lost] == ["target0"] and "its stall limit" in rt.lost[0].reason
    assert 450 <= rt.lost[0].lost_ms < 5000
    assert alive_hosts() == 0


def test_a_generation_leaves_no_actor_behind():
    target = model(0.5)
    out = generate(
        [1, 2],
        target,
        target.drafter(0.5, seed=1),
        algorithm="si",
        max_tokens=8,
        runtime="ray",
        runtime_options=RAY_OPTIONS,
    )
    assert out.tokens == target.greedy_tokens([1, 2], 8)
    assert alive_hosts() == 0


CTRL_C = """
import os, sys, threading, time
from specpar.entrypoints.cli import main

def report():
    import ray
    while not ray.is_initialized():
        time.sleep(0.05)
    print("RAY", flush=True)

threading.Thread(target=report, daemon=True).start()
sys.exit(main(["simulate", "--runtime", "ray", "--target-tpot", "50", "-N", "3000", "-k", "2", "--sp-degree", "2",
               "--repeats", "1", "--cpus-per-server", "0.5", "--json"]))
"""


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ctrl_c_exits_promptly_and_leaves_no_ray_process(processes):
    """`specpar simulate --runtime ray` starts its own local Ray; Ctrl-C (SIGINT) mid-run exits with 130 and
    every process it started (raylet, GCS, workers, actors) is gone."""
    proc = processes.start([sys.executable, "-c", CTRL_C], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "RAY"
    time.sleep(1.5)  # actors up, generating
    started = _descendants(proc.pid)
    assert started, "the run started no process"
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=30)
    exit_s = time.perf_counter() - t0
    assert rc == 130, proc.stderr.read()[-2000:]
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in started):
        time.sleep(0.2)
    assert not [p for p in started if _alive(p)], "processes left running after Ctrl-C"
    assert exit_s < 15


def test_more_cpus_than_the_cluster_has_is_a_clear_config_error():
    from specpar import ConfigError

    target = model(1.0)
    with pytest.raises(ConfigError, match="need 20 CPUs, but the Ray cluster has 4"):
        generate(
            [1],
            target,
            target.drafter(0.5),
            max_tokens=2,
            sp_degree=5,
            runtime="ray",
            runtime_options={"cpus_per_server": 4},
        )
    assert alive_hosts() == 0
