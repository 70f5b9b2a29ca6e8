"""Layer 4: the runtime contract on the virtual clock and on threads (cancellation, errors, cleanup)."""

import gc
import time

import pytest

from conftest import make_pair, specpar_threads
from specpar import LatencyProfile, ServerError, SimulatedModel, generate
from specpar.core.calls import Score
from specpar.core.decoding import Decoding
from specpar.runtimes import Pool, ThreadRuntime, VirtualRuntime

DEC = Decoding()


def one_server_pool(ms: float, name="t"):
    model = SimulatedModel(4, latency=LatencyProfile.uniform(ms))
    return Pool([model.server(name)], name)


def test_virtual_queues_fifo_and_frees_a_cancelled_server_now():
    pool = one_server_pool(10.0)
    rt = VirtualRuntime([pool])
    a = rt.submit(pool, Score((1,), 0, DEC))
    b = rt.submit(pool, Score((2,), 0, DEC))  # queued behind a
    rt.cancel(a)
    done = rt.wait()
    assert done is b and done.start == 0.0 and done.end == 10.0
    with pytest.raises(RuntimeError, match="no task in flight"):
        rt.wait()


def test_virtual_cancel_at_end_keeps_the_server_busy_like_an_unstoppable_kernel():
    pool = one_server_pool(10.0)
    rt = VirtualRuntime([pool], cancel_frees="end")
    a = rt.submit(pool, Score((1,), 0, DEC))
    b = rt.submit(pool, Score((2,), 0, DEC))
    rt.cancel(a)
    done = rt.wait()
    assert done is b and done.start == 10.0 and done.end == 20.0
    records = rt.timeline()
    assert [(r.kind, r.start_ms, r.end_ms, r.cancelled) for r in records] == [
        ("verify", 0.0, 10.0, True),
        ("verify", 10.0, 20.0, False),
    ]


def test_virtual_cancel_mode_per_pool():
    """{"target": "end"}: a target pass runs to its end, the other pools' cancelled tasks free their server now."""
    target, drafter = one_server_pool(10.0, "target"), one_server_pool(10.0, "drafter")
    rt = VirtualRuntime([drafter, target], cancel_frees={"target": "end"})
    running = [rt.submit(p, Score((1,), 0, DEC)) for p in (drafter, target)]
    queued = [rt.submit(p, Score((2,), 0, DEC)) for p in (drafter, target)]
    for task in running:
        rt.cancel(task)
    assert [rt.wait(), rt.wait()] == queued
    assert [(t.start, t.end) for t in queued] == [(0.0, 10.0), (10.0, 20.0)]


def test_virtual_runs_a_pool_in_parallel_and_returns_in_time_order():
    model = SimulatedModel(4, latency=LatencyProfile.uniform(5.0))
    pool = Pool([model.server("a"), model.server("b")], "t")
    rt = VirtualRuntime([pool])
    tasks = [rt.submit(pool, Score((i,), 0, DEC)) for i in range(3)]
    finished = [rt.wait() for _ in range(3)]
    assert [t.end for t in finished] == [5.0, 5.0, 10.0]
    assert finished == tasks
    assert rt.now() == 10.0


@pytest.mark.parametrize("enabled_before", [True, False])
def test_a_virtual_run_pauses_the_garbage_collector_and_restores_it_even_on_error(enabled_before):
    pool = one_server_pool(1.0)
    was = gc.isenabled()
    try:
        gc.enable() if enabled_before else gc.disable()
        with pytest.raises(ZeroDivisionError):
            with VirtualRuntime([pool]) as rt:
                assert not gc.isenabled()
                rt.submit(pool, Score((1,), 0, DEC))
                raise ZeroDivisionError
        assert gc.isenabled() == enabled_before
        assert rt.tasks[0].cancelled  # closed on the way out: nothing left running
    finally:
        gc.enable() if was else gc.disable()


@pytest.mark.parametrize("cancel_frees", ["now", "end"])
def test_virtual_close_cancels_running_and_queued_tasks_and_leaves_finished_ones(cancel_frees):
    pool = one_server_pool(10.0)
    rt = VirtualRuntime([pool], cancel_frees=cancel_frees)
    finished = rt.submit(pool, Score((1,), 0, DEC))
    assert rt.wait() is finished
    running = rt.submit(pool, Score((2,), 0, DEC))
    queued = [rt.submit(pool, Score((i,), 0, DEC)) for i in (3, 4)]
    rt.close()
    assert not finished.cancelled and finished.result is not None
    assert running.cancelled and all(t.cancelled and t.done for t in queued)
    assert [t.server for t in queued] == [None, None]  # never started


def test_bad_cancel_mode_is_named():
    with pytest.raises(ValueError, match="cancel_frees"):
        VirtualRuntime([one_server_pool(1.0)], cancel_frees="later")


def test_threads_cancel_wakes_a_sleeping_server_and_leaves_no_thread(no_thread_leak):
    pool = one_server_pool(5000.0)  # a 5 s task
    t0 = time.perf_counter()
    with ThreadRuntime([pool]) as rt:
        first = rt.submit(pool, Score((1,), 0, DEC))
        time.sleep(0.02)
        rt.cancel(first)
        second = rt.submit(pool, Score((1, 2), 0, DEC))  # also 5 s: it starts once the server is free
        while second.start is None and time.perf_counter() - t0 < 3.0:
            time.sleep(0.005)
        assert second.start is not None and second.start < 1000.0, "cancellation did not interrupt the running task"
        # closing cancels the second task mid-sleep too
    assert time.perf_counter() - t0 < 2.0
    assert pool.servers[0]._tokens == ()  # cancelled calls never touched the cache


def test_threads_no_thread_alive_after_generations(no_thread_leak):
    target, drafter = make_pair(a=0.5, c=0.1, target_ms=0.5)
    for algo in ("nonsi", "si", "dsi"):
        out = generate([1, 2], target, drafter, algorithm=algo, max_tokens=30, runtime="threads", sp_degree=3)
        assert out.tokens == target.greedy_tokens([1, 2], 30)


class FailingServer:
    """A server that breaks at its n-th call and stays broken (so a cancelled failing call cannot hide it)."""

    def __init__(self, inner, fail_at: int):
        self.inner, self.name, self.calls, self.fail_at = inner, inner.name, 0, fail_at

    def __getattr__(self, item):
        return getattr(self.inner, item)

    def _maybe_fail(self):
        self.calls += 1
        if self.fail_at and self.calls >= self.fail_at:
            raise MemoryError("simulated CUDA out of memory")

    def run(self, call, cancelled):
        self._maybe_fail()
        return self.inner.run(call, cancelled)

    def compute(self, call):
        self._maybe_fail()
        return self.inner.compute(call)


class FailingModel:
    def __init__(self, model, fail_at):
        self.model, self.fail_at = model, fail_at
        self.latency = model.latency

    def server(self, name=None):
        return FailingServer(self.model.server(name), self.fail_at)


@pytest.mark.parametrize("runtime", ["virtual", "threads"])
@pytest.mark.parametrize("algo", ["nonsi", "si", "dsi"])
def test_a_server_exception_surfaces_as_a_clear_error_not_a_hang(runtime, algo, no_thread_leak):
    target, drafter = make_pair(a=0.6, target_ms=0.5)
    with pytest.raises(
        ServerError, match=r"server 'target\d' failed .*MemoryError: simulated CUDA out of memory"
    ) as info:
        generate([1], FailingModel(target, 3), drafter, algorithm=algo, max_tokens=40, runtime=runtime)
    assert isinstance(info.value.__cause__, MemoryError)
    with pytest.raises(ServerError, match=r"server 'drafter\d*' failed"):
        generate([1], target, FailingModel(drafter, 2), algorithm="dsi", max_tokens=40, runtime=runtime)


def test_threads_many_cancellations_leave_nothing_running(no_thread_leak):
    """DSI at a = 0.3 cancels most verifications and drafts; the runtime still joins every worker."""
    target, drafter = make_pair(seed=4, a=0.3, c=0.05, target_ms=1.0)
    out = generate([3], target, drafter, algorithm="dsi", max_tokens=60, runtime="threads", sp_degree=6, lookahead=2)
    assert out.tokens == target.greedy_tokens([3], 60)
    assert sum(r.cancelled for r in out.timeline) > 5


class StallingServer(FailingServer):
    """A server stuck ``stall_s`` seconds in its first call, whatever cancellation says (a kernel that ignores
    it): the issue's stuck server."""

    def __init__(self, inner, stall_s: float):
        super().__init__(inner, fail_at=0)
        self.stall_s = stall_s

    def run(self, call, cancelled):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.stall_s)
        return self.inner.run(call, cancelled)


@pytest.mark.slow
def test_a_stalled_server_never_holds_generate_past_its_last_token(no_thread_leak):
    """Issue 15: two of three target replicas stall in their first call (DSI's prefill of idle replicas, never
    needed for the output): generate returns within one target latency of the last token, reports the two
    threads still in those calls, and they end on their own once their calls return (nothing left); a later run
    on the same servers waits for them and gives the same tokens."""
    target_ms, stall_s = 100.0, 3.0
    target, drafter = make_pair(seed=3, a=0.5, c=0.1, target_ms=target_ms)
    servers = [target.server("target0")] + [StallingServer(target.server(f"target{i}"), stall_s) for i in (1, 2)]
    pool = Pool(servers, "target")
    streamed = []
    t0 = time.perf_counter()
    out = generate(
        [1, 2],
        pool,
        drafter,
        algorithm="dsi",
        max_tokens=12,
        runtime="threads",
        sp_degree=3,
        lookahead=2,
        prefill_replicas=True,
        stream=lambda tokens: streamed.append(time.perf_counter()),
    )
    returned = time.perf_counter()
    assert out.tokens == target.greedy_tokens([1, 2], 12)
    assert returned - t0 < stall_s, "the output waited on a stalled replica"
    assert returned - streamed[-1] < target_ms / 1000.0, "generate waited on work no longer needed"
    assert sorted(out.left_running) == ["specpar-target1", "specpar-target2"]
    again = generate([1, 2], pool, drafter, algorithm="dsi", max_tokens=12, runtime="threads", sp_degree=3)
    assert again.tokens == out.tokens
    assert time.perf_counter() - t0 < stall_s + 2.0
    deadline = time.perf_counter() + 2.0
    while specpar_threads(no_thread_leak) and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert specpar_threads(no_thread_leak) == [], "a stalled worker never ended"


def test_generate_pauses_the_collector_and_restores_its_state():
    """The collector is off during a virtual run (and the engine's bookkeeping around it), and left as it was found:
    on after a call that found it on, off after one that found it off; nested pauses restore only at the outermost."""
    from specpar.runtimes.virtual import collector_paused

    target = SimulatedModel(8, seed=0, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(0.1), seed=1)
    seen = []
    was = gc.isenabled()
    try:
        gc.enable()
        generate([1], target, drafter, max_tokens=8, stream=lambda _: seen.append(gc.isenabled()))
        assert seen and not any(seen) and gc.isenabled()
        gc.disable()
        generate([1], target, drafter, max_tokens=8)
        assert not gc.isenabled()
        gc.enable()
        with collector_paused():
            with collector_paused():
                pass
            assert not gc.isenabled()
        assert gc.isenabled()
        with collector_paused(pause=False):
            assert gc.isenabled()
        first, second = collector_paused(), collector_paused()  # two threads' pauses, ended out of order
        first.__enter__(), second.__enter__()
        first.__exit__()
        assert not gc.isenabled(), "the collector came back on while another pause was still open"
        second.__exit__(), second.__exit__()  # a second exit changes nothing
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
