"""What a generation returns: the tokens, the time, and the metrics the field reports.

Metric definitions (DESIGN.md):

* drafted: draft tokens the verifier tested (each is tested at most once; drafts
  discarded unseen after an earlier rejection are not counted).
* acceptance_rate = accepted / drafted; under iid acceptance it estimates ``a``.
* a round ends with a token the target produced itself (a correction or a bonus);
  accepted_per_round lists the accepted drafts in each round, so
  mean_acceptance_length = 1 + accepted / rounds = tokens / rounds.
* per_position_acceptance_rate[j] = accepted / tested among drafts at index j of
  their lookahead window (the j-th token of a drafter call).
* target_forwards: target forward passes that ran to completion; drafter_forwards:
  drafter forward passes in completed draft calls. Cancelled work is in the timeline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from specpar.runtimes.base import TaskRecord


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
    lookahead: int | None = None
    sp_degree: int = 1
    timeline_source: Callable[[], list[TaskRecord]] | None = field(default=None, repr=False, compare=False)
    details: dict | None = None  # algorithm-specific extras (HSD: per-level calls and acceptance)

    @property
    def timeline(self) -> list[TaskRecord]:
        """Every task that ran (server, kind, start, end, cancelled), ms from the generation's start.

        Built on first access: most simulations never draw it.
        """
        if not hasattr(self, "_timeline"):
            self._timeline = self.timeline_source() if self.timeline_source else []
        return self._timeline

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else math.nan

    @property
    def rounds(self) -> int:
        return len(self.accepted_per_round)

    @property
    def mean_acceptance_length(self) -> float:
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
        return _json_safe(d)


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x
