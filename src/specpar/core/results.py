"""What a generation returns: the tokens, the time, and the metrics the field reports (vLLM's definitions).

* drafted: draft tokens the verifier tested (drafts discarded unseen after an earlier rejection are not counted);
  acceptance_rate = accepted / drafted.
* verifications: target tasks that completed and could deliver output (all but DSI's prefill of idle replicas);
  mean_acceptance_length = tokens / verifications, the same meaning for every algorithm.
* a run ends with a token the target produced itself; accepted_per_round lists the accepted drafts of each run, and
  mean_run_length = tokens / rounds. For SI a run is a round; DSI's runs chain accepted drafts across windows.
* per_position_acceptance_rate[j]: accepted / tested among drafts at index j of their lookahead window.
* target_forwards, drafter_forwards: forward passes in completed calls (cancelled work is in the timeline).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from specpar.core.json_output import finite

# The tables' metric columns, defined as their footnotes print them (metrics_footnote): "tokens/pass" is vLLM's mean
# acceptance length, named for what it counts, so that DSI's (low: it completes more target passes, verifying ahead
# on several servers at once) is not read as DSI accepting less; "run len" is what it accepted in a row.
METRICS = {
    "accept rate": "accepted / drafts tested",
    "tokens/pass": (
        "tokens per completed target pass (vLLM's mean acceptance length; DSI verifies ahead on several servers "
        "at once, so it completes more passes per token: lower, without accepting less)"
    ),
    "run len": (
        "tokens per token the target made itself = accepted drafts in a row + 1 (SI's equals its tokens/pass; "
        "DSI's runs go on across lookahead windows)"
    ),
    "predicted s": "the time the machine profile predicts for the run (`specpar predict`; auto: its choice's)",
}


def metrics_footnote(columns) -> str:
    """The definitions of the metric columns among ``columns``, in their order, as one line under a table."""
    return "; ".join(f"{c} = {METRICS[c]}" for c in columns if c in METRICS)


def fmt(x, spec: str = ".2f", suffix: str = "") -> str:
    """A metric as printed: "-" where it is undefined (None, nan or infinite: nothing drafted, no time elapsed)."""
    if x is None or not math.isfinite(x):
        return "-"
    return format(x, spec) + suffix


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One bar of a timeline: which server ran what, from when to when (ms), and whether it was cancelled.

    tokens: the call's context length (drafts included). drafts: drafts scored (verify) or drafted (draft).
    cached: leading tokens of the context the server held when the call started (real runtimes; None on the virtual
    clock, which prices calls by it instead).
    """

    server: str
    kind: str
    start_ms: float
    end_ms: float
    cancelled: bool
    tokens: int = 0
    drafts: int = 0
    cached: int | None = None


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """An output token's log-probability under the target's processed row at its position, and the ``top``
    most likely tokens there as (token id, log-probability) pairs, the most likely first (ties by id)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class GenerationResult:
    algorithm: str
    runtime: str
    tokens: list[int]
    time_ms: float  # wall time (threads) or virtual time, from start to the last token
    ttft_ms: float | None  # time to the first output token
    target_forwards: int
    drafter_forwards: int
    drafted: int
    accepted: int
    accepted_per_round: list[int]
    position_drafted: list[int]
    position_accepted: list[int]
    verifications: int = 0
    lookahead: int | None = None
    sp_degree: int = 1
    finish_reason: str = "length"  # "length" (max tokens reached) or "stop" (end of text, a stop id or string)
    text: str | None = None  # the output's text, where the target has a tokenizer (Engine)
    timeline_source: Callable[[], list[TaskRecord]] | None = field(default=None, repr=False, compare=False)
    details: dict | None = None  # algorithm-specific extras (HSD: per-level calls and acceptance)
    # worker threads still in a cancelled call when the run returned (threads runtime: a stalled server)
    left_running: tuple[str, ...] = ()
    replicas_lost: tuple[str, ...] = ()  # servers that died or stalled (Ray), in order
    time_lost_ms: float = 0.0  # time their unfinished calls had run before being redone elsewhere
    # one per output token when asked for (SamplingParams.logprobs, Decoding.logprobs), else None
    logprobs: list[TokenLogprob] | None = None
    # an Engine's request: the time it waited for processing units, and its time outside forward passes (real
    # models on threads: :func:`overhead`); None elsewhere
    queue_ms: float | None = None
    overhead: dict | None = None
    # algorithm="auto": what it chose and why ({"method", "label", "predicted_ms", "reason"}: prediction.auto.Choice)
    auto: dict | None = None

    @functools.cached_property
    def timeline(self) -> list[TaskRecord]:
        """Every task that ran (server, kind, start, end, cancelled), ms from the generation's start.

        Built on first access: most simulations never draw it.
        """
        return self.timeline_source() if self.timeline_source else []

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else math.nan

    @property
    def rounds(self) -> int:
        return len(self.accepted_per_round)

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens gained per completed verification task (vLLM's mean acceptance length)."""
        return len(self.tokens) / self.verifications if self.verifications else math.nan

    @property
    def mean_run_length(self) -> float:
        """Tokens per token the target produced itself: 1 + accepted / rounds (DSI's runs span windows)."""
        return 1.0 + self.accepted / self.rounds if self.rounds else math.nan

    @property
    def per_position_acceptance_rate(self) -> list[float]:
        return [a / d if d else math.nan for a, d in zip(self.position_accepted, self.position_drafted)]

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / (self.time_ms / 1000.0) if self.time_ms > 0 else math.inf

    @property
    def tpot_ms(self) -> float:
        """Mean time per output token after the first."""
        n = len(self.tokens)
        if n < 2 or self.ttft_ms is None:
            return math.nan
        return (self.time_ms - self.ttft_ms) / (n - 1)

    def to_dict(self, timeline: bool = False) -> dict:
        d = asdict(self)
        d.pop("timeline_source")
        if timeline:
            d["timeline"] = [asdict(r) for r in self.timeline]
        for name in (
            "acceptance_rate",
            "mean_acceptance_length",
            "per_position_acceptance_rate",
            "tokens_per_second",
            "tpot_ms",
        ):
            d[name] = getattr(self, name)
        return finite(d)


def overhead(intervals: list[tuple[float, float]], t0: float, t1: float) -> dict:
    """Time in [t0, t1] during which no forward pass ran, in ms and as a fraction of the wall time."""
    busy, end = 0.0, t0
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, t1)
        if b > a:
            busy += b - a
            end = b
    wall = t1 - t0
    outside = max(0.0, wall - busy)
    return {
        "wall_ms": wall * 1e3,
        "outside_forward_ms": outside * 1e3,
        "outside_forward_fraction": outside / wall if wall else 0.0,
    }
