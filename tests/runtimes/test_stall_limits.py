"""A stalled server is noticed after a multiple of the time its calls should take (with a floor), never after a
silent 600 s. It is lost, on threads as on Ray (test_ray_faults): its task goes to a live server of its pool; a
ServerError naming it only when no live server is left for the work waiting."""

from __future__ import annotations

import threading
import time

import pytest

from specpar import LatencyProfile, ServerError, SimulatedModel, generate
from specpar.backends.simulated import SimulatedServer
from specpar.core.calls import Draft, Score, as_context
from specpar.core.decoding import GREEDY
from specpar.core.latency import STALL_FLOOR_S, UNMEASURED_LIMIT_S, stall_limit_s
from specpar.runtimes import Pool, ThreadRuntime
from specpar.runtimes.base import CallLimits, Task

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)


class StallingServer(SimulatedServer):
    """A simulated server whose ``stall_on``-th call hangs (ignoring cancellation) until ``release`` is set."""

    def __init__(self, model, name, stall_on: int, release: threading.Event):
        super().__init__(model, name)
        self.calls, self.stall_on, self.release = 0, stall_on, release

    def run(self, call, cancelled):
        self.calls += 1
        if self.calls == self.stall_on:
            self.release.wait(60)
        return super().run(call, cancelled)


@pytest.fixture
def release():
    """Set at teardown, so that a stalled worker thread ends with the test."""
    event = threading.Event()
    yield event
    event.set()
    time.sleep(0.05)


def test_the_limit_is_a_multiple_of_the_expected_time_with_a_floor():
    assert stall_limit_s(5.0) == STALL_FLOOR_S  # 10 x 5 ms is below the floor
    assert stall_limit_s(3000.0) == 30.0 and stall_limit_s(3000.0, factor=4.0, floor_s=1.0) == 12.0
    assert stall_limit_s(None) == UNMEASURED_LIMIT_S  # nothing known of the server yet


def test_a_calls_expected_time_is_its_profiles_prediction_or_its_pools_longest_call_whichever_is_longer():
    model = SimulatedModel(8, latency=LatencyProfile(ttft_ms=400.0, tpot_ms=20.0))
    pool = Pool([model.server("t0")], "target")
    limits = CallLimits(floor_s=0.001)
    cold, warm = (
        Task(pool, Score(as_context([1, 2, 3]), 2, GREEDY)),
        Task(pool, Score(as_context([1, 2, 3]), 2, GREEDY)),
    )
    cold.cached, warm.cached = 0, 2
    assert limits.expected_ms(cold, model.latency) == 400.0  # a prefill: TTFT
    assert limits.expected_ms(warm, model.latency) == 20.0
    assert limits.expected_ms(warm, None) is None  # no profile, nothing measured
    done = Task(pool, Score(as_context([1]), 0, GREEDY))
    done.start, done.end = 100.0, 150.0
    limits.record(done)
    assert limits.expected_ms(warm, model.latency) == 50.0 and limits.expected_ms(warm, None) == 50.0
    assert limits.limit_s(warm, None) == pytest.approx(0.5)
    draft = Task(pool, Draft(as_context([1]), 3, GREEDY))
    assert limits.expected_ms(draft, None) is None  # measured per kind: drafts are not verifications
    assert CallLimits(timeout_s=7.0).limit_s(warm, model.latency) == 7.0  # a fixed call_timeout_s wins


@pytest.mark.parametrize("algorithm, floor_s", [("si", None), ("dsi", 1.0)])
def test_a_stalled_target_fails_the_generation_with_a_server_error_naming_it_soon(algorithm, floor_s, release):
    """Calls of 5 ms: a stalled call the generation waits for is given up after the floor (10 s by default; 1 s given
    as a runtime option for DSI), not 600 s. DSI waits for none while a replica is free (a stalled verification is
    cancelled and redone), so there every replica stalls."""
    target = SimulatedModel(8, latency=LatencyProfile.uniform(5.0))
    drafter = target.drafter(0.7, LatencyProfile.uniform(1.0))
    servers = [StallingServer(target, f"target{i}", stall_on=3, release=release) for i in range(2)]
    t0 = time.perf_counter()
    floor = STALL_FLOOR_S if floor_s is None else floor_s
    with pytest.raises(ServerError, match=rf"server 'target\d' .*no answer after {floor:g} s \(its stall limit\)"):
        generate(
            [1, 2],
            Pool(servers, "target"),
            drafter,
            algorithm=algorithm,
            max_tokens=200,
            lookahead=3,
            sp_degree=2 if algorithm == "dsi" else 1,
            runtime="threads",
            prefill_replicas=False,
            runtime_options=None if floor_s is None else {"stall_floor_s": floor_s},
        )
    took = time.perf_counter() - t0
    assert floor <= took < floor + 8, f"gave up after {took:.1f} s"


def test_the_floor_is_a_runtime_option(release):
    target = SimulatedModel(8, latency=LatencyProfile.uniform(5.0))
    server = StallingServer(target, "target0", stall_on=2, release=release)
    rt = ThreadRuntime([Pool([server], "target")], stall_floor_s=0.3)
    with rt:
        rt.run(rt.pools[0], Score(as_context([1]), 0, GREEDY))
        t0 = time.perf_counter()
        with pytest.raises(ServerError, match="target0"):
            rt.run(rt.pools[0], Score(as_context([1, 2]), 0, GREEDY))
    assert 0.3 <= time.perf_counter() - t0 < 3
    with pytest.raises(Exception, match="stall_floor_s must be a number of seconds > 0"):
        ThreadRuntime([Pool([target.server()], "target")], stall_floor_s=0)


def test_a_stalled_server_is_lost_and_its_task_redone_on_another_of_its_pool(release):
    """The runtime alone: target0 (idle longest, so picked first) stalls on its first call; after the limit the call
    runs on target1, and target0's late answer, once released, is dropped (no second finished task)."""
    target = SimulatedModel(8, latency=LatencyProfile.uniform(5.0))
    stalling = StallingServer(target, "target0", stall_on=1, release=release)
    pool = Pool([stalling, target.server("target1")], "target")
    rt = ThreadRuntime([pool], stall_floor_s=0.3)
    with rt:
        task = rt.submit(pool, Score(as_context([2, 7]), 0, GREEDY))
        assert rt.wait() is task and task.server.name == "target1"
        assert task.result.rows == [target.greedy_tokens([2, 7], 1)[0]]
        release.set()
        time.sleep(0.1)  # target0's stalled call returns now: dropped
        with pytest.raises(RuntimeError, match="no task in flight"):
            rt.wait()
        again = rt.submit(pool, Score(as_context([2, 7, 1]), 0, GREEDY))
        assert rt.wait() is again and again.server.name == "target1"  # a lost server takes no more work
    assert [(x.server, x.pool) for x in rt.lost] == [("target0", "target")] and "stalled" in rt.lost[0].reason
    assert 250 <= rt.lost[0].lost_ms < 5000


def test_dsi_on_threads_goes_on_without_a_stalled_replica(release):
    """One replica of four stalls (ignoring cancellation) while verifications queue (a 40x faster drafter, k = 1):
    the generation ends with the target's tokens and names the lost replica, as on Ray. Before, the stalled call
    that work queued behind failed the whole request (a ServerError in each of 4 seeds here). Whether target2's
    stalled call is still needed when its limit passes depends on the threads' timing: where DSI has cancelled it
    and nothing waits behind it, nothing is lost (and nothing is held up); at least one seed loses it."""
    target = SimulatedModel(8, latency=LatencyProfile.uniform(20.0))
    lost = []
    for seed in range(4):
        drafter = target.drafter(0.9, LatencyProfile.uniform(0.5), seed=seed)
        servers = [
            StallingServer(target, f"target{i}", stall_on=3 if i == 2 else 10**9, release=release) for i in range(4)
        ]
        out = generate(
            [1, 2],
            Pool(servers, "target"),
            drafter,
            algorithm="dsi",
            max_tokens=60,
            lookahead=1,
            sp_degree=4,
            runtime="threads",
            prefill_replicas=False,
            runtime_options={"stall_floor_s": 0.3},
        )
        assert out.tokens == target.greedy_tokens([1, 2], 60)
        assert out.replicas_lost in ((), ("target2",))
        lost.append(out.replicas_lost)
    assert ("target2",) in lost, lost
