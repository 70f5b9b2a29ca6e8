"""A configuration's time on a machine: the same algorithm code, run on the virtual clock with the machine's costs.

:func:`mean_time_ms` runs one :class:`~specpar.core.config.SpeculativeConfig` over sample pairs of simulated models
(:func:`specpar.algorithms.registry.run_generation`, the runner every entry point uses) and averages their times.
:func:`sample_pairs` makes the pairs of a :class:`MachineProfile`: each call priced by its measured costs at the
threads the engine gives a pass, plus the runtime's round trip; passes slowed while several servers run at once, as
its contention says; the drafter agreeing with the target at its acceptance rate (iid), the n-gram proposer a
drafter that costs nothing and proposes at its match rate (:class:`LookupDrafter`); a cancelled target pass run to
its end (a real pass cannot stop), a draft stopped; the engine's own cost per output token added.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specpar.backends.cpu_threads import busy_servers, pass_threads
from specpar.backends.simulated import SimulatedDrafter, SimulatedModel, SimulatedServer, unit
from specpar.core.calls import Draft, Proposal
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import is_number
from specpar.core.query import Query
from specpar.prediction.machine import MachineProfile

VOCAB = 16  # the sample models' vocabulary: small, so that hashing a prefix is cheap
SAMPLE_TOKENS = 600  # a prediction averages over about this many output tokens ...
MIN_PAIRS, MAX_PAIRS = 3, 8  # ... on this many sample pairs (one when nothing is random: non-SI)
MAX_SIMULATED = 128  # output tokens simulated at most (longer outputs: scaled from this many)
DRAFTER_SEED = 7919  # a sample drafter's seed, past its target's
_MATCH_SALT = 0x6A09E667F3BCC909


class LookupDrafter(SimulatedDrafter):
    """The n-gram proposer as a simulated drafter: a proposal finds a match with probability ``match_rate`` (decided
    by the prefix) and then proposes k tokens accepted at ``acceptance_rate`` each, else nothing; it costs no time."""

    def __init__(self, target: SimulatedModel, acceptance_rate: float, match_rate: float, seed: int = 1):
        super().__init__(target, acceptance_rate, LatencyProfile(0.0, 0.0), seed)
        if not is_number(match_rate, 0, 1):
            raise ConfigError(f"the n-gram match rate must be in [0, 1], got {match_rate!r}")
        self.match_rate = float(match_rate)
        self._match_below = math.ceil(self.match_rate * 2.0**64)

    def server(self, name: str | None = None) -> SimulatedServer:
        return LookupServer(self, name)


class LookupServer(SimulatedServer):
    """A :class:`LookupDrafter`'s server: an empty proposal where the prefix has no match."""

    def compute(self, call):
        if type(call) is Draft:
            hashes = self._sync(call.context)
            if unit(hashes[-1], _MATCH_SALT ^ self.model.seed) >= self.model._match_below:
                return Proposal([], None)
        return super().compute(call)


def sample_pairs(profile: MachineProfile, prompt_tokens: int, count: int, threads: int, runtime: str = "threads",
                 ngram: bool = False, seed: int = 0) -> list[tuple]:  # fmt: skip
    """``count`` sample (target, drafter, prompt of ``prompt_tokens``) triples priced by ``profile`` with ``threads``
    threads per pass and ``runtime``'s round trip per call (on Ray the drafter runs beside the driver: the threads
    runtime's). ngram: the drafter is the n-gram proposer (:class:`LookupDrafter`) instead of the drafter model."""
    if prompt_tokens < 1:
        raise ConfigError(f"a prediction needs a prompt of at least one token, got {prompt_tokens}")
    if ngram and not {"match_rate", "acceptance_rate"} <= set(profile.ngram):
        raise ConfigError("the machine profile has no n-gram rates (match_rate, acceptance_rate)")
    over = profile.overhead_ms
    target_costs = profile.target.costs(threads, over.get(runtime, 0.0))
    drafter_costs = None
    if profile.drafter is not None:
        drafter_costs = profile.drafter.costs(threads, over["threads"] if runtime == "ray" else over.get(runtime, 0.0))
    out = []
    for r in range(seed, seed + count):
        target = SimulatedModel(VOCAB, seed=r, latency=target_costs)
        if ngram:
            drafter = LookupDrafter(target, profile.ngram["acceptance_rate"], profile.ngram["match_rate"],
                                    seed=r + DRAFTER_SEED)  # fmt: skip
        elif drafter_costs is None or profile.acceptance_rate is None:
            drafter = None
        else:
            drafter = target.drafter(profile.acceptance_rate, drafter_costs, seed=r + DRAFTER_SEED)
        out.append((target, drafter, [(r + 5 * i) % VOCAB for i in range(prompt_tokens)]))
    return out


def pair_count(spec: SpeculativeConfig, max_tokens: int) -> int:
    """How many sample pairs a prediction of ``max_tokens`` tokens averages over (one for non-SI: nothing random)."""
    if spec.algorithm == "nonsi":
        return 1
    return max(MIN_PAIRS, min(MAX_PAIRS, SAMPLE_TOKENS // max(1, max_tokens)))


REAL_CANCEL = {"target": "end"}  # a real target pass cannot stop; a draft stops between its passes


def clock(profile: MachineProfile | None = None, cancel_frees=REAL_CANCEL) -> RuntimeConfig:
    """The virtual clock a prediction runs on: the profile's contention, and what a cancelled task does to its server
    (``cancel_frees``: as on real runtimes by default; "now" without a profile, the paper's)."""
    options = {"contention": profile.contention} if profile is not None and profile.has_contention else {}
    return RuntimeConfig(name="virtual", cancel_frees=cancel_frees if profile is not None else "now", options=options)


def mean_time_ms(pairs: Sequence[tuple], spec: SpeculativeConfig, runtime: RuntimeConfig, max_tokens: int,
                 per_token_ms: float = 0.0) -> tuple[float, float]:  # fmt: skip
    """The mean time (ms) of ``spec`` generating ``max_tokens`` greedy tokens over ``pairs`` of (target, drafter,
    prompt) on ``runtime`` (a virtual clock), plus ``per_token_ms`` per output token; and the mean to the first."""
    from specpar.algorithms.registry import run_generation

    drafter_needed = spec.algorithm != "nonsi"
    times, firsts = [], []
    for target, drafter, prompt in pairs:
        d = ([drafter] if spec.algorithm in ("hsd", "hsd-sp") else drafter) if drafter_needed else None
        result = run_generation(Query(prompt, max_tokens), target, d, spec, runtime)
        times.append(result.time_ms + per_token_ms * len(result.tokens))
        firsts.append((result.ttft_ms or 0.0) + per_token_ms)
    return statistics.fmean(times), statistics.fmean(firsts)


@dataclass(frozen=True)
class EngineShape:
    """What the engine that will run a request offers, as far as its time goes.

    units: its processing units (``generate()`` and ready-made Pools: 1). targets: its target servers (the most a
    request verifies on at once). runtime: "threads" or "ray". cpus_per_server: Ray's CPU bundle per actor.
    cpu: whether the servers share the CPU's cores, else each has a device. drafter: whether it has a drafter model.
    cancel_frees: what a cancelled task does to its server (RuntimeConfig.cancel_frees).
    """

    units: int = 1
    targets: int = 2
    runtime: str = "threads"
    cpus_per_server: float | None = None
    cpu: bool = True
    drafter: bool = True
    cancel_frees: str | Mapping[str, str] = field(default_factory=lambda: {"target": "end"})

    def threads(self, profile: MachineProfile, spec: SpeculativeConfig) -> int:
        """The threads the engine gives each pass of a request of ``spec`` (the engine's rule: the CPU servers the
        request uses, :func:`busy_servers`)."""
        uses_drafter = spec.uses_drafter and self.drafter
        targets = min(spec.sp_degree or self.targets, self.targets)
        servers = (targets + (1 if uses_drafter else 0)) if self.cpu else 0
        ray = (self.cpus_per_server or 1.0) if self.runtime == "ray" else None
        return pass_threads(profile.cores, self.units, busy_servers(spec.algorithm, servers), ray)


def predicted_ms(profile: MachineProfile, spec: SpeculativeConfig, prompt_tokens: int, max_tokens: int,
                 shape: EngineShape | None = None, seed: int = 0, pairs: int | None = None) -> float:  # fmt: skip
    """``spec``'s predicted time (ms) for a prompt of ``prompt_tokens`` tokens and ``max_tokens`` output tokens on
    the machine ``profile`` describes, run by an engine of ``shape``, averaged over ``pairs`` sample pairs (default
    :func:`pair_count`'s) from ``seed``. Outputs longer than MAX_SIMULATED tokens are simulated that long and the
    time after the first token scaled (:func:`scaled`: their draws are iid)."""
    return predicted_times(profile, spec, prompt_tokens, max_tokens, shape, seed, pairs)[0]


def predicted_times(profile: MachineProfile, spec: SpeculativeConfig, prompt_tokens: int, max_tokens: int,
                    shape: EngineShape | None = None, seed: int = 0, pairs: int | None = None) -> tuple[float, float]:  # fmt: skip
    """:func:`predicted_ms`'s time (ms) and the predicted time to the first token (ms) it scales by."""
    from specpar.core.config import parse_proposer

    shape = shape or EngineShape()
    ngram = spec.proposer is not None and parse_proposer(spec.proposer).ngram
    sim = spec.replace(proposer="drafter") if ngram else spec  # the n-gram proposer is a drafter here
    n = min(max_tokens, MAX_SIMULATED)
    count = 1 if spec.algorithm == "nonsi" else pairs or pair_count(spec, n)
    made = sample_pairs(profile, prompt_tokens, count, shape.threads(profile, spec), shape.runtime, ngram, seed)
    ms, first = mean_time_ms(made, sim, clock(profile, shape.cancel_frees), n, profile.per_token_ms)
    return scaled(ms, first, n, max_tokens), first


def scaled(ms: float, first_ms: float, n: int, max_tokens: int) -> float:
    """A time ``ms`` of ``n`` output tokens (``first_ms`` of them to the first) at ``max_tokens`` tokens: the time
    after the first token in proportion to the tokens after it."""
    return ms if n == max_tokens else first_ms + (ms - first_ms) * (max_tokens - 1) / (n - 1)
