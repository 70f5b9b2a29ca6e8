"""A simulated target and drafter described by numbers: latencies, acceptance rate, vocabulary, seed, prompt length.

:class:`SimulatedPair` is what the commands that run simulated models take from the command line: its fields carry
their flags in :func:`specpar.core.config.flag` metadata, from which ``specpar.entrypoints.cli.arguments`` builds
the option group.

    pair = SimulatedPair(target_tpot_ms=30, drafter_latency=0.1, acceptance_rate=0.8)
    target, drafter = pair.models()          # a SimulatedModel and its SimulatedDrafter
    prompt = pair.prompt()                   # prompt_length random token ids
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from specpar.backends.simulated import Regimes, SimulatedDrafter, SimulatedModel
from specpar.core.config import SEED_HELP, flag
from specpar.core.errors import ConfigError
from specpar.core.latency import MAX_LATENCY_MS, LatencyProfile
from specpar.core.numbers import is_int, is_number

MAX_SIMULATED = 1_000_000  # the largest simulated vocabulary and prompt: larger ones take hours before a token
DRAFTER_SEED_OFFSET = 7919  # the drafter of the models made from seed s draws from seed s + 7919


@dataclass(frozen=True, kw_only=True)
class SimulatedPair:
    """A simulated target and its drafter. Latencies in ms per forward pass; the drafter's are c x the target's
    (``drafter_latency``) unless ``drafter_tpot_ms`` is given."""

    target_tpot_ms: float = field(
        default=30.0,
        metadata=flag(
            "--target-tpot",
            "target's time per output token: one forward pass with the prefix cached",
            aliases=("--target-ms",),
            metavar="MS",
        ),
    )
    target_ttft_ms: float | None = field(
        default=None,
        metadata=flag(
            "--target-ttft",
            "target's time to first token: the prefill pass",
            default="--target-tpot",
            metavar="MS",
            advanced=True,
        ),
    )
    target_per_token_ms: float = field(
        default=0.0,
        metadata=flag(
            "--target-per-token",
            "target's extra time per additional token in one pass (verifying k drafts, or catching up on unseen "
            "tokens): 0 models a memory-bound GPU, CPUs cost a good fraction of a TPOT",
            metavar="MS",
            advanced=True,
        ),
    )
    drafter_latency: float = field(
        default=0.1,
        metadata=flag(
            "--drafter-latency-ratio",
            "c, the drafter's latency over the target's (TTFT, TPOT and per-token cost alike)",
            short="-c",
            aliases=("--drafter-latency",),
            metavar="C",
        ),
    )
    drafter_tpot_ms: float | None = field(
        default=None,
        metadata=flag(
            "--drafter-tpot",
            "drafter's time per output token (instead of -c)",
            default="c x the target's",
            aliases=("--drafter-ms",),
            metavar="MS",
        ),
    )
    drafter_ttft_ms: float | None = field(
        default=None,
        metadata=flag(
            "--drafter-ttft",
            "drafter's time to first token, with --drafter-tpot",
            default="--drafter-tpot",
            metavar="MS",
            advanced=True,
        ),
    )
    drafter_per_token_ms: float = field(
        default=0.0,
        metadata=flag(
            "--drafter-per-token", "drafter's extra time per additional token in one pass, with --drafter-tpot",
            metavar="MS", advanced=True,
        ),
    )  # fmt: skip
    acceptance_rate: float = field(
        default=0.8,
        metadata=flag(
            "--acceptance-rate",
            "probability that a draft token is accepted, iid per position",
            short="-a",
            aliases=("--acceptance",),
            metavar="A",
        ),
    )
    acceptance_regimes: str | None = field(
        default=None,
        metadata=flag(
            "--acceptance-regimes",
            "a drifting acceptance rate instead of -a: the drafter agrees at rate A1 for T tokens, then A2, ..., "
            "cycling (positions counted from the prompt's start), e.g. 0.9,0.4:50; -k auto and the closed forms "
            "use their mean",
            metavar="A1,A2,...:T",
            advanced=True,
        ),
    )
    vocab_size: int = field(
        default=8,
        metadata=flag(
            "--vocab-size",
            "tokens in the simulated models' vocabulary",
            aliases=("--vocab",),
            metavar="V",
            advanced=True,
        ),
    )
    seed: int = field(
        default=0,
        metadata=flag("--seed", SEED_HELP + ": the simulated models, prompts and draws", metavar="S"),
    )
    prompt_length: int = field(
        default=8, metadata=flag("--prompt-length", "prompt tokens, drawn from the seed", metavar="N", advanced=True)
    )

    def __post_init__(self):
        for name in ("target_tpot_ms", "target_ttft_ms", "target_per_token_ms", "drafter_tpot_ms", "drafter_ttft_ms",
                     "drafter_per_token_ms"):  # fmt: skip
            v = getattr(self, name)
            if v is not None and not is_number(v, 0, MAX_LATENCY_MS):
                raise ConfigError(f"{name} must be a latency in [0, {MAX_LATENCY_MS:g}] ms, got {v}")
        c = self.drafter_latency
        if not (is_number(c, 0.0) and c * max(self.target_tpot_ms, self.target_ttft_ms or 0.0) <= MAX_LATENCY_MS):
            raise ConfigError(
                f"drafter latency fraction c must be >= 0 and give a drafter latency <= {MAX_LATENCY_MS:g} ms, got {c!r}"
            )
        a = self.acceptance_rate
        if not is_number(a, 0.0, 1.0):
            raise ConfigError(f"acceptance rate a must be in [0, 1], got {a!r}")
        if self.acceptance_regimes is not None:
            Regimes.parse(self.acceptance_regimes)  # a ConfigError naming the form when it is not one
        for name, lo, hi in (("vocab_size", 2, MAX_SIMULATED), ("prompt_length", 1, MAX_SIMULATED), ("seed", 0, None)):
            v = getattr(self, name)
            if not is_int(v, lo):
                raise ConfigError(f"{name} must be >= {lo} (an integer), got {v!r}")
            if hi is not None and v > hi:  # simulated models score every token of the vocabulary in Python
                raise ConfigError(f"{name} must be at most {hi:,}, got {v}")

    def latencies(self) -> tuple[LatencyProfile, LatencyProfile]:
        """(the target's, the drafter's) latency profiles."""
        tpot = self.target_tpot_ms
        target = LatencyProfile(self.target_ttft_ms if self.target_ttft_ms is not None else tpot, tpot,
                                self.target_per_token_ms)  # fmt: skip
        if self.drafter_tpot_ms is None:
            return target, target.scaled(self.drafter_latency)
        ttft = self.drafter_ttft_ms if self.drafter_ttft_ms is not None else self.drafter_tpot_ms
        return target, LatencyProfile(ttft, self.drafter_tpot_ms, self.drafter_per_token_ms)

    def with_latencies(self, target: LatencyProfile, drafter: LatencyProfile, acceptance_rate: float) -> SimulatedPair:
        """This pair with both latency profiles and the acceptance rate replaced (a measured pair's profile)."""
        return dataclasses.replace(
            self,
            target_tpot_ms=target.tpot_ms,
            target_ttft_ms=target.ttft_ms,
            target_per_token_ms=target.per_token_ms,
            drafter_tpot_ms=drafter.tpot_ms,
            drafter_ttft_ms=drafter.ttft_ms,
            drafter_per_token_ms=drafter.per_token_ms,
            acceptance_rate=acceptance_rate,
        )

    @property
    def acceptance(self) -> float | Regimes:
        """The drafter's acceptance: the rate, or the regimes it drifts between."""
        return self.acceptance_rate if self.acceptance_regimes is None else Regimes.parse(self.acceptance_regimes)

    @property
    def mean_acceptance_rate(self) -> float:
        """The acceptance rate, or its regimes' long-run mean."""
        a = self.acceptance
        return a.mean if isinstance(a, Regimes) else a

    def models(self, seed: int | None = None) -> tuple[SimulatedModel, SimulatedDrafter]:
        """A target and its drafter made from ``seed`` (default: the pair's), with the pair's latencies."""
        s = self.seed if seed is None else seed
        target_latency, drafter_latency = self.latencies()
        target = SimulatedModel(self.vocab_size, seed=s, latency=target_latency)
        return target, target.drafter(self.acceptance, drafter_latency, seed=s + DRAFTER_SEED_OFFSET)

    def prompt(self, seed: int | None = None) -> list[int]:
        """``prompt_length`` token ids drawn from ``seed`` (default: the pair's)."""
        rng = random.Random(self.seed if seed is None else seed)
        return [rng.randrange(self.vocab_size) for _ in range(self.prompt_length)]
