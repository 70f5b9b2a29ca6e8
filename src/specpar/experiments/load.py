"""Load curves: many requests on a fixed set of processing units, per policy, on one virtual clock.

Each request runs the real scheduler and algorithms in a greenlet of a
:class:`~specpar.runtimes.shared_clock.SharedClock`, arriving as a Poisson process (``rate`` per second) or from
``clients`` closed-loop clients; every policy sees the same arrivals, prompts and models. Throughput (goodput) =
output tokens / (last completion - first arrival), as vLLM's serving benchmark; latency and TTFT from arrival.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from specpar.backends.simulated import SimulatedModel
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.query import Query
from specpar.planning.load import POLICIES
from specpar.runtimes.shared_clock import SharedClock
from specpar.scheduling import Scheduler, Unit
from specpar.scheduling.request import Request

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class LoadSetting:
    """The simulated deployment: ``units`` processing units, each with a target and a drafter server.

    target, drafter: each server's costs (a LatencyProfile, or a machine profile's measured PassCosts);
    contention: a machine profile's (f(1), f(2), ...): passes slow while several servers run at once (None: the
    paper's clock, every server its own hardware).
    """

    units: int = 8
    target: LatencyProfile = field(default_factory=lambda: LatencyProfile.uniform(30.0))
    drafter: LatencyProfile = field(default_factory=lambda: LatencyProfile.uniform(3.0))
    acceptance_rate: float = 0.8
    max_tokens: int = 100
    prompt_length: int = 8
    vocab_size: int = 32
    lookahead: int | str | None = "auto"
    temperature: float = 0.0
    contention: tuple[float, ...] | None = None

    @property
    def nonsi_capacity(self) -> float:
        """Requests per second non-SI serves at most: one per unit, each its N target passes."""
        t = self.target
        return self.units * 1000.0 / (t.ttft_ms + (self.max_tokens - 1) * t.tpot_ms)


@dataclass
class RequestRecord:
    arrival_ms: float
    start_ms: float
    end_ms: float
    ttft_ms: float
    tokens: int
    switches: int
    algorithms: str


@dataclass
class LoadRun:
    """One policy at one load: every request's record, and the simulator's own cost."""

    policy: str
    load: str  # "rate R/s" or "N clients"
    records: list[RequestRecord]
    events: int = 0

    @property
    def throughput(self) -> float:
        """Output tokens per second, first arrival to last completion."""
        span = max(r.end_ms for r in self.records) - min(r.arrival_ms for r in self.records)
        return sum(r.tokens for r in self.records) / (span / 1000.0) if span > 0 else math.inf

    def to_dict(self) -> dict:
        """Latency (arrival to completion) and TTFT percentiles in ms, throughput in output tokens per second."""
        latency = [r.end_ms - r.arrival_ms for r in self.records]
        ttft = [r.ttft_ms for r in self.records]
        return {
            "policy": self.policy,
            "load": self.load,
            "requests": len(self.records),
            "throughput_tokens_per_s": self.throughput,
            **{f"latency_p{q}_ms": percentile(latency, q) for q in PERCENTILES},
            **{f"ttft_p{q}_ms": percentile(ttft, q) for q in PERCENTILES},
            "switches_per_request": statistics.fmean(r.switches for r in self.records),
        }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (linear interpolation between order statistics)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def poisson_arrivals(rate: float, n: int, seed: int) -> list[float]:
    """``n`` arrival times (ms) of a Poisson process of ``rate`` requests per second."""
    if not rate > 0:
        raise ConfigError(f"the arrival rate must be > 0 requests per second, got {rate!r}")
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate) * 1000.0
        out.append(t)
    return out


class LoadSimulation:
    """One deployment (a LoadSetting, models from ``seed``) under load, for any policy."""

    def __init__(self, setting: LoadSetting, seed: int = 0):
        self.setting, self.seed = setting, seed
        s = setting
        self.target = SimulatedModel(s.vocab_size, seed=seed, latency=s.target)
        self.drafter = self.target.drafter(s.acceptance_rate, s.drafter, seed=seed + 7919)
        self.spec = SpeculativeConfig(algorithm="dsi", lookahead=s.lookahead, sp_degree=max(1, s.units - 1))
        self._curves: dict = {}

    def curve(self, policy: str):
        from specpar.prediction.shares import share_curve

        if policy not in self._curves:
            s = self.setting
            self._curves[policy] = share_curve(
                policy, self.spec, self.target, self.drafter, s.units, s.max_tokens, self.seed
            )
        return self._curves[policy]

    def prompt(self, i: int) -> list[int]:
        rng = random.Random(self.seed * 1_000_003 + i)
        return [rng.randrange(self.setting.vocab_size) for _ in range(self.setting.prompt_length)]

    def run(self, policy: str, *, rate: float | None = None, clients: int | None = None, requests: int = 100):
        """The policy's LoadRun: ``requests`` requests arriving at ``rate`` per second (Poisson), or sent by
        ``clients`` closed-loop clients (``requests`` in all)."""
        if policy not in POLICIES:
            raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        if (rate is None) == (clients is None):
            raise ConfigError("give either an arrival rate or a number of clients")
        s, clock = self.setting, SharedClock()
        units = [
            Unit(i, [self.target.server(f"target{i}")], [self.drafter.server(f"drafter{i}")]) for i in range(s.units)
        ]
        scheduler = Scheduler(units, clock)
        curve = self.curve(policy)
        machine = {} if s.contention is None else {"contention": s.contention}  # one machine for every request
        runtime = RuntimeConfig(name="virtual", options={"clock": clock, **machine})
        decoding = Decoding(s.temperature, self.seed)
        records: list[RequestRecord] = []

        def one(i: int) -> None:
            req = Request(scheduler, self.spec, curve, runtime)
            result = req.run(Query(self.prompt(i), s.max_tokens, decoding))
            ttft = req.queue_ms + (req.segments[0][2].ttft_ms or 0.0)
            tokens, switches = len(result.tokens), req.ticket.switches
            records.append(
                RequestRecord(req.arrival_ms, req.started_ms, req.end_ms, ttft, tokens, switches, result.algorithm)
            )

        if rate is not None:
            for i, t in enumerate(poisson_arrivals(rate, requests, self.seed)):
                clock.spawn(one, i, at=t)
            load = f"{rate:.3g} req/s"
        else:
            if clients < 1:
                raise ConfigError(f"clients must be >= 1, got {clients!r}")
            sent = iter(range(requests))

            def client() -> None:
                for i in sent:
                    one(i)

            for _ in range(clients):
                clock.spawn(client)
            load = f"{clients} clients"
        clock.run()
        records.sort(key=lambda r: r.arrival_ms)
        return LoadRun(policy, load, records, clock.events)
