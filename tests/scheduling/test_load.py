"""Speculation under load: many requests on a scheduler's processing units, on the shared virtual clock.

Every request's tokens are its tokens alone (greedy: the target's; seeded gumbel sampling: non-SI's for its seed)
whatever the others do, however often its share changes; nobody starves; a request that ends frees its units for
the next at once. Controls: a continuation that loses a token at a safe point, rejection sampling across a change
of configuration, and a last-come-first-served queue each fail the test they stand beside.
"""

import dataclasses
import itertools
import math
import random
import threading
import time

import pytest

from specpar import Engine, LatencyProfile, SimulatedModel
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.query import Query
from specpar.planning.load import Option, ShareCurve, allocate, fixed
from specpar.prediction.shares import share_curve
from specpar.runtimes.shared_clock import SharedClock
from specpar.scheduling import Scheduler, Unit
from specpar.scheduling.request import Request

UNITS = 6
N = 40


def models(seed=0, a=0.8):
    target = SimulatedModel(16, seed=seed, latency=LatencyProfile.uniform(30.0))
    return target, target.drafter(a, LatencyProfile.uniform(3.0), seed=seed + 1)


class World:
    """A scheduler of UNITS simulated units on one shared clock; requests spawned at given times."""

    def __init__(self, policy="adaptive", units=UNITS, seed=0, scheduler=Scheduler, request=Request):
        self.target, self.drafter = models(seed)
        self.clock = SharedClock()
        self.units = [
            Unit(i, [self.target.server(f"target{i}")], [self.drafter.server(f"drafter{i}")]) for i in range(units)
        ]
        self.scheduler = scheduler(self.units, self.clock)
        self.policy, self.request = policy, request
        self.runtime = RuntimeConfig(name="virtual", options={"clock": self.clock})
        self.requests, self.curves = {}, {}

    def add(self, i, at, prompt, spec, decoding=GREEDY, n=N):
        key = (spec, n)
        if key not in self.curves:
            self.curves[key] = share_curve(self.policy, spec, self.target, self.drafter, len(self.units), n)
        curve = self.curves[key]

        def run():
            req = self.request(self.scheduler, spec, curve, self.runtime)
            self.requests[i] = req
            req.result_ = req.run(Query(prompt, n, decoding))

        self.clock.spawn(run, at=at)

    def run(self):
        self.clock.run()
        return self


SPECS = [
    SpeculativeConfig(algorithm="dsi", sp_degree=5),
    SpeculativeConfig(algorithm="si", lookahead=4),
    SpeculativeConfig(algorithm="nonsi"),
    SpeculativeConfig(algorithm="dsi", sp_degree=3, lookahead=2),
    SpeculativeConfig(algorithm="dsi", sp_degree=5, tree=(2, 1)),
    SpeculativeConfig(algorithm="si", tree=(2, 2)),
]


def prompt(i):
    return [i % 16, (3 * i) % 16, 5]


def test_every_algorithm_under_load_gives_the_targets_greedy_tokens():
    """30 requests of every algorithm (chains and token trees) arriving 25 ms apart on 6 units: shares change as
    they come and go, and each output is the target's greedy continuation."""
    w = World()
    for i in range(30):
        w.add(i, 25.0 * i, prompt(i), SPECS[i % len(SPECS)])
    w.run()
    assert sum(r.ticket.switches for r in w.requests.values()) >= 5  # shares did change mid-generation
    for i, req in w.requests.items():
        assert req.result_.tokens == w.target.greedy_tokens(prompt(i), N), (i, req.result_.algorithm)


def test_hsd_under_load_gives_the_targets_greedy_tokens():
    target = SimulatedModel(16, seed=4, latency=LatencyProfile.uniform(30.0))
    mid = target.drafter(0.8, LatencyProfile.uniform(6.0), seed=5)
    small = target.drafter(0.6, LatencyProfile.uniform(1.0), seed=6)
    clock = SharedClock()
    units = [Unit(i, [target.server(f"t{i}")], [], [[small.server(f"s{i}")], [mid.server(f"m{i}")]]) for i in range(4)]
    scheduler = Scheduler(units, clock)
    runtime, done = RuntimeConfig(name="virtual", options={"clock": clock}), {}
    for i, algorithm in enumerate(["hsd-sp", "hsd", "hsd-sp", "hsd-sp", "hsd"]):
        spec = SpeculativeConfig(algorithm=algorithm, sp_degree=3, buffers=(2, 3))
        curve = share_curve("adaptive", spec, target, [small, mid], 4)

        def run(i=i, spec=spec, curve=curve):
            done[i] = Request(scheduler, spec, curve, runtime).run(Query(prompt(i), N))

        clock.spawn(run, at=20.0 * i)
    clock.run()
    for i, result in done.items():
        assert result.tokens == target.greedy_tokens(prompt(i), N)


def test_control_a_continuation_from_a_stale_prefix_is_caught(monkeypatch):
    """The greedy-equality test above catches a request that goes on after a pause from its output less its last
    token (a stale prefix)."""
    import specpar.scheduling.request as request_module

    real = request_module.run_generation

    def stale(query, *args):
        if query.max_tokens < N:  # a continuation
            query = dataclasses.replace(query, prompt=query.prompt[:-1])
        return real(query, *args)

    monkeypatch.setattr(request_module, "run_generation", stale)
    w = World()
    for i in range(30):
        w.add(i, 25.0 * i, prompt(i), SPECS[i % len(SPECS)])
    w.run()
    assert any(req.result_.tokens != w.target.greedy_tokens(prompt(i), N) for i, req in w.requests.items())


def sampled_world(coupling, seed=0):
    w = World(seed=seed)
    for i in range(16):
        w.add(i, 45.0 * i, prompt(i), SPECS[i % 4], Decoding(1.0, 100 + i, coupling=coupling))
    return w.run()


def alone(w, i, coupling):
    """Request i's tokens on one VirtualRuntime, alone, as non-SI (gumbel: every algorithm's for the seed)."""
    from specpar.algorithms.registry import run_generation

    spec = SpeculativeConfig(algorithm="nonsi")
    query = Query(prompt(i), N, Decoding(1.0, 100 + i, coupling=coupling))
    return run_generation(query, w.target, None, spec, RuntimeConfig(name="virtual")).tokens


def test_seeded_sampling_is_reproducible_under_load_with_the_gumbel_coupling():
    """Sampled at temperature 1 with the drafter-invariant coupling, each request's tokens are non-SI's for its
    seed, though its configuration changed mid-generation."""
    w = sampled_world("gumbel")
    assert sum(r.ticket.switches for r in w.requests.values()) >= 5
    for i in w.requests:
        assert w.requests[i].result_.tokens == alone(w, i, "gumbel")


def test_control_rejection_sampling_does_not_reproduce_across_configurations():
    """With rejection sampling a seed's tokens depend on which configuration decided each position: the test
    above would see it."""
    w = sampled_world("rejection")
    assert any(w.requests[i].result_.tokens != alone(w, i, "rejection") for i in w.requests)


def shrink_grow_world(coupling):
    """One long DSI request alone on 6 units; at 300 ms four short ones arrive (its share shrinks), they leave and
    its share grows back."""
    w = World()
    decoding = Decoding(1.0, 7, coupling=coupling) if coupling else Decoding()
    w.add("long", 0.0, [1, 2, 3], SpeculativeConfig(algorithm="dsi", sp_degree=5), decoding, n=200)
    for j in range(4):
        w.add(j, 300.0, prompt(j), SpeculativeConfig(algorithm="si"), n=10)
    return w.run()


@pytest.mark.parametrize("coupling", [None, "gumbel"])
def test_shrinking_and_growing_a_share_mid_generation_keeps_its_tokens(coupling):
    w = shrink_grow_world(coupling)
    long = w.requests["long"]
    units = [s["units"] for s in long.result_.details["segments"]]
    assert units[0] == max(units) and min(units) < units[0] and units[-1] > min(units)  # shrank, then grew
    if coupling is None:
        assert long.result_.tokens == w.target.greedy_tokens([1, 2, 3], 200)
    else:
        spec = SpeculativeConfig(algorithm="dsi", sp_degree=5)
        from specpar.algorithms.registry import run_generation

        query = Query([1, 2, 3], 200, Decoding(1.0, 7, coupling="gumbel"))
        single = run_generation(query, w.target, w.drafter, spec, RuntimeConfig(name="virtual"))
        assert long.result_.tokens == single.tokens


def test_no_request_starves_in_a_burst_of_50():
    """50 requests at once on 6 units: every one completes within the time 50/6 rounds of SI would take, with
    slack; the first come are served first."""
    w = World()
    for i in range(50):
        w.add(i, 0.0, prompt(i), SpeculativeConfig(algorithm="dsi", sp_degree=5))
    w.run()
    si_ms = share_curve("si", SpeculativeConfig(algorithm="si"), w.target, w.drafter, UNITS, N).options[0]
    bound = math.ceil(50 / UNITS) * si_ms.ms_per_token * N * 1.5
    ends = [w.requests[i].end_ms for i in range(50)]
    assert len(ends) == 50 and max(ends) <= bound
    starts = [w.requests[i].started_ms for i in range(50)]
    assert starts == sorted(starts)


class LastComeFirstServed(Scheduler):
    """A control: the newest request first."""

    def _rebalance(self):
        self._queue.reverse()
        try:
            super()._rebalance()
        finally:
            self._queue.reverse()


def arrivals_above_capacity(scheduler):
    """A first request, then arrivals faster than SI serves them for 3 s: the first must still end in time."""
    w = World(scheduler=scheduler, policy="si")
    w.add(0, 0.0, prompt(0), SpeculativeConfig(algorithm="si"))
    for i in range(1, 120):
        w.add(i, 25.0 * i, prompt(i), SpeculativeConfig(algorithm="si"))
    return w.run()


def test_the_first_request_ends_in_time_under_continuing_overload():
    w = arrivals_above_capacity(Scheduler)
    first = w.requests[0]
    assert first.end_ms - first.arrival_ms < 2 * N * 15.0  # about N SI steps of 12 ms: never queued


def test_control_a_last_come_first_served_queue_starves_the_early_requests():
    w = arrivals_above_capacity(LastComeFirstServed)
    latest = max(w.requests.values(), key=lambda r: r.end_ms - r.arrival_ms)
    assert latest.end_ms - latest.arrival_ms > 1000.0 and latest.ticket.id < 60


def test_allocate_is_the_best_split_and_first_come_first_served():
    """The DP against brute force on random concave and non-concave curves; the queue's prefix is admitted."""
    rng = random.Random(0)
    for _ in range(200):
        units = rng.randint(1, 7)
        curves = []
        for _ in range(rng.randint(1, 5)):
            lo = rng.choice([1, 1, 2])
            hi = rng.randint(lo, 5)
            curves.append(
                ShareCurve(tuple(Option(u, "dsi", ms_per_token=rng.uniform(1, 30)) for u in range(lo, hi + 1)))
            )
        held = [0] * len(curves)
        got = allocate(curves, held, units, keep_bonus=0.0)
        admitted = [i for i, n in enumerate(got) if n]
        assert admitted == list(range(len(admitted)))  # a prefix
        assert sum(got) <= units
        best = max(
            (
                split
                for split in itertools.product(*[range(c.min_units, c.max_units + 1) for c in curves[: len(admitted)]])
                if sum(split) <= units
            ),
            key=lambda split: sum(c.rate(u) for c, u in zip(curves, split)),
        )
        assert sum(c.rate(u) for c, u in zip(curves, got)) == pytest.approx(
            sum(c.rate(u) for c, u in zip(curves, best))
        )


def test_curves_never_slower_than_nonsi_and_fixed_policies():
    target, drafter = models(a=0.8)
    spec = SpeculativeConfig(algorithm="dsi", sp_degree=7)
    curve = share_curve("adaptive", spec, target, drafter, 8)
    nonsi = share_curve("nonsi", spec, target, drafter, 8).options[0].ms_per_token
    assert [o.units for o in curve.options] == list(range(1, 9))
    assert all(o.ms_per_token <= nonsi for o in curve.options)
    assert curve.options[0].algorithm == "si" and curve.options[-1].algorithm == "dsi"
    assert share_curve("dsi", spec, target, drafter, 8).min_units == 8
    bad = target.drafter(0.05, LatencyProfile.uniform(20.0), seed=3)  # a slow drafter that is always wrong
    assert share_curve("adaptive", spec, target, bad, 8).options[0].algorithm == "nonsi"
    assert fixed(Option(2, "dsi")).min_units == 2


def test_a_cancelled_requests_units_go_to_the_next_at_once():
    """One unit, real time: a long stream holds it and a second request waits; closing the stream starts the
    second at once (it would otherwise wait about 3 s more)."""
    target = SimulatedModel(16, seed=1, latency=LatencyProfile.uniform(15.0))
    with Engine(target, units=1, runtime="threads", algorithm="nonsi") as engine:
        stream = engine.stream([1, 2], max_tokens=200, temperature=0)
        next(stream)
        t_second, out = {}, {}

        def second():
            result = engine.generate([3, 4], max_tokens=2, temperature=0)
            out["tokens"] = result.tokens
            t_second["end"] = time.perf_counter()

        thread = threading.Thread(target=second)
        thread.start()
        deadline = time.perf_counter() + 5
        while engine.load_metrics().requests_waiting != 1 and time.perf_counter() < deadline:
            time.sleep(0.005)
        assert engine.load_metrics().requests_waiting == 1  # queued behind the stream
        time.sleep(0.1)
        closed = time.perf_counter()
        stream.close()
        thread.join(10)
        assert out["tokens"] == target.greedy_tokens([3, 4], 2)
        assert t_second["end"] - closed < 0.5  # two 15 ms passes, a little scheduling
        m = engine.load_metrics()
        assert m.requests_running == m.requests_waiting == 0 and m.units_in_use == 0


def test_engine_metrics_and_concurrency():
    """Eight requests at once on an engine of 4 units: the metrics see them, and every output is the target's."""
    target, drafter = models()
    with Engine(target, drafter, units=4, runtime="threads", sp_degree=3) as engine:
        seen, results = [], {}

        def client(i):
            results[i] = engine.generate(prompt(i), max_tokens=20, temperature=0, algorithm="dsi")

        def watch():
            while len(results) < 8:
                seen.append(engine.load_metrics())
                time.sleep(0.002)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)] + [threading.Thread(target=watch)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert all(results[i].tokens == target.greedy_tokens(prompt(i), 20) for i in range(8))
        assert max(m.requests_running for m in seen) > 1 and max(m.requests_waiting for m in seen) > 0
        assert max(m.units_in_use for m in seen) <= 4
        final = engine.load_metrics().to_dict()
        assert final["output_tokens"] == 8 * 20 and set(final) >= {
            "requests_running",
            "requests_waiting",
            "units",
            "units_in_use",
            "units_per_request",
            "goodput_tokens_per_s",
        }
