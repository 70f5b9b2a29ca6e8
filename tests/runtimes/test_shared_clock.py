"""The shared virtual clock: one generation on it is the VirtualRuntime's exactly; several interleave in time order."""

import heapq

import pytest

from specpar import LatencyProfile, SimulatedModel
from specpar.algorithms.registry import run_generation
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.decoding import Decoding
from specpar.core.query import Query
from specpar.runtimes.shared_clock import ClockRuntime, SharedClock


def pair(seed):
    target = SimulatedModel(16, seed=seed, latency=LatencyProfile(40.0, 30.0, 0.5))
    return target, target.drafter(0.8, LatencyProfile(4.0, 3.0), seed=seed + 1)


def one(runtime, algorithm, seed, temperature=0.0, **spec):
    target, drafter = pair(seed)
    config = SpeculativeConfig(algorithm=algorithm, lookahead=3, sp_degree=3, **spec)
    return run_generation(Query([seed, 2], 60, Decoding(temperature, seed)), target, drafter, config, runtime)


def on_shared_clock(algorithm, seed, temperature=0.0, **spec):
    clock, out = SharedClock(), []
    runtime = RuntimeConfig(name="virtual", options={"clock": clock})
    clock.spawn(lambda: out.append(one(runtime, algorithm, seed, temperature, **spec)))
    clock.run()
    return out[0]


CASES = [("nonsi", {}), ("si", {}), ("dsi", {}), ("dsi", {"tree": (2, 1)}), ("si", {"tree": (2, 2)})]


@pytest.mark.parametrize("algorithm,spec", CASES)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_one_generation_on_a_shared_clock_is_the_virtual_runtimes(algorithm, spec, temperature):
    alone = one(RuntimeConfig(name="virtual"), algorithm, 3, temperature, **spec)
    shared = on_shared_clock(algorithm, 3, temperature, **spec)
    assert shared.tokens == alone.tokens
    assert shared.time_ms == pytest.approx(alone.time_ms, abs=1e-9)
    assert [(r.server, r.start_ms, r.end_ms) for r in shared.timeline] == [
        (r.server, r.start_ms, r.end_ms) for r in alone.timeline
    ]


def test_control_a_clock_that_shifts_task_ends_is_caught(monkeypatch):
    """The comparison above sees a clock that delivers tasks 1 ms late."""
    start = ClockRuntime._start

    def late(self, task, server):
        start(self, task, server)
        heap = self.clock._heap
        i = next(i for i, entry in enumerate(heap) if entry[3] is task)
        task.end += 1.0
        heap[i] = (int(task.end * 1e9 + 0.5), *heap[i][1:])
        heapq.heapify(heap)

    monkeypatch.setattr(ClockRuntime, "_start", late)
    alone = one(RuntimeConfig(name="virtual"), "dsi", 3)
    assert on_shared_clock("dsi", 3).time_ms != pytest.approx(alone.time_ms, abs=1e-9)


def test_generations_interleave_in_time_order_and_each_is_exact():
    """Five DSI generations started 7 ms apart on one clock: each gives its own tokens and time, as if alone
    (their servers are their own), and the clock ends at the last one's end."""
    clock, results = SharedClock(), {}
    runtime = RuntimeConfig(name="virtual", options={"clock": clock})
    starts = {}

    def gen(i):
        starts[i] = clock.now()
        results[i] = one(runtime, "dsi", i)

    for i in range(5):
        clock.spawn(gen, i, at=7.0 * i)
    clock.run()
    for i in range(5):
        alone = one(RuntimeConfig(name="virtual"), "dsi", i)
        assert results[i].tokens == alone.tokens
        assert results[i].time_ms == pytest.approx(alone.time_ms, abs=1e-9)
        assert starts[i] == 7.0 * i
    assert clock.now() == pytest.approx(max(starts[i] + results[i].time_ms for i in range(5)))


def test_events_sleep_and_errors():
    clock, seen = SharedClock(), []
    ready = clock.event()

    def waiter(name):
        ready.wait()
        seen.append((name, clock.now()))

    def setter():
        clock.sleep(5.0)
        ready.set()

    clock.spawn(waiter, "a")
    clock.spawn(waiter, "b")
    clock.spawn(setter)
    clock.run()
    assert seen == [("a", 5.0), ("b", 5.0)]
    with pytest.raises(RuntimeError, match="outside a greenlet"):
        clock.sleep(1.0)

    def fails():
        raise ValueError("boom")

    clock.spawn(fails)
    with pytest.raises(ValueError, match="boom"):
        clock.run()
