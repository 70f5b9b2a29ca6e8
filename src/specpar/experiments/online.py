"""The paper's online experiment (Table 2 style): non-SI, SI and DSI on threads, in wall time.

Servers are simulated models that sleep for the latencies of a pair profile
(TTFT for a prefill, TPOT for later passes) and whose drafter is right with the
profile's acceptance rate; the thread runtime runs one OS thread per server, so
the measured times include real orchestration costs. For each lookahead in
{1, 5, 10} for which Eq. 1 holds with SP <= ``sp_degree`` (the paper's 8-GPU
node: up to 7 target servers and the drafter), every repeat runs non-SI, then
SI and DSI at each lookahead, interleaved; speedups are taken per repeat and
summarized as mean and standard deviation. Beside each measured figure: the
virtual clock's prediction for the same models and seeds.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specpar.api import generate
from specpar.errors import ConfigError
from specpar.experiments.pair_profile import PairProfile
from specpar.models import SimulatedModel
from specpar.planning.lookahead import verification_servers

TABLE2_LOOKAHEADS = (1, 5, 10)


def feasible_lookaheads(profile: PairProfile, lookaheads: Sequence[int], sp_degree: int) -> list[tuple[int, int]]:
    """(lookahead, SP degree it needs) for each lookahead that fits on ``sp_degree`` target servers (Eq. 1's
    verification servers with catch-up, and one for the pass on the cursor: :func:`~specpar.planning.sp_degree_needed`)."""
    out = []
    t, d = profile.target, profile.drafter
    for k in lookaheads:
        v = verification_servers(t.tpot_ms, d.tpot_ms, k, t.per_token_ms) if d.tpot_ms > 0 else None
        if v is not None and v + 1 <= sp_degree:
            out.append((k, v + 1))
    return out


@dataclass
class Spread:
    mean: float
    std: float

    @classmethod
    def of(cls, xs: Sequence[float]) -> Spread:
        return cls(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)


@dataclass
class OnlineRow:
    """One lookahead: wall times (ms) per repeat for SI and DSI, and the virtual clock's predictions."""

    lookahead: int
    sp_needed: int
    si_ms: list[float] = field(default_factory=list)
    dsi_ms: list[float] = field(default_factory=list)
    si_virtual_ms: list[float] = field(default_factory=list)
    dsi_virtual_ms: list[float] = field(default_factory=list)


@dataclass
class OnlineTable:
    profile: PairProfile
    n: int
    repeats: int
    sp_degree: int
    nonsi_ms: list[float]
    nonsi_virtual_ms: list[float]
    rows: list[OnlineRow]
    infeasible: list[int]  # lookaheads Eq. 1 rules out on sp_degree servers

    def speedups(self, row: OnlineRow, virtual: bool = False) -> dict[str, Spread]:
        """DSI over SI and over non-SI, per repeat, then mean and standard deviation."""
        nonsi = self.nonsi_virtual_ms if virtual else self.nonsi_ms
        si = row.si_virtual_ms if virtual else row.si_ms
        dsi = row.dsi_virtual_ms if virtual else row.dsi_ms
        return {
            "dsi_vs_si": Spread.of([s / d for s, d in zip(si, dsi)]),
            "dsi_vs_nonsi": Spread.of([b / d for b, d in zip(nonsi, dsi)]),
        }

    def to_dict(self) -> dict:
        rows = []
        for r in self.rows:
            m, v = self.speedups(r), self.speedups(r, virtual=True)
            rows.append(
                {
                    "lookahead": r.lookahead,
                    "sp_needed": r.sp_needed,
                    "si_ms": r.si_ms,
                    "dsi_ms": r.dsi_ms,
                    "si_virtual_ms": r.si_virtual_ms,
                    "dsi_virtual_ms": r.dsi_virtual_ms,
                    **{f"{k}_measured": vars(s) for k, s in m.items()},
                    **{f"{k}_predicted": vars(s) for k, s in v.items()},
                }
            )
        return {
            "profile": self.profile.to_dict(),
            "n": self.n,
            "repeats": self.repeats,
            "sp_degree": self.sp_degree,
            "nonsi_ms": self.nonsi_ms,
            "nonsi_virtual_ms": self.nonsi_virtual_ms,
            "rows": rows,
            "infeasible_lookaheads": self.infeasible,
        }


def run_online(
    profile: PairProfile,
    *,
    n: int = 50,
    repeats: int = 3,
    sp_degree: int = 7,
    lookaheads: Sequence[int] = TABLE2_LOOKAHEADS,
    seed: int = 0,
    vocab_size: int = 16,
    runtime: str = "threads",
    progress: Callable[[str], None] | None = None,
    runtime_options: dict | None = None,
) -> OnlineTable:
    """Measure one pair profile. ``runtime`` may be "ray" (runtime_options: RayRuntime's), or "virtual" too
    (then measured = predicted)."""
    for name, v in (("N", n), ("repeats", repeats), ("sp_degree", sp_degree)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    feasible = feasible_lookaheads(profile, lookaheads, sp_degree)
    if not feasible:
        raise ConfigError(
            f"no lookahead in {tuple(lookaheads)} satisfies Eq. 1 with SP <= {sp_degree} for {profile.label} "
            f"(drafter at {profile.drafter_fraction:.3g} of the target's latency): give larger lookaheads"
        )
    table = OnlineTable(
        profile,
        n,
        repeats,
        sp_degree,
        [],
        [],
        [OnlineRow(k, need) for k, need in feasible],
        [k for k in lookaheads if k not in dict(feasible)],
    )
    for r in range(repeats):
        target = SimulatedModel(vocab_size, seed=seed + r, latency=profile.target)
        drafter = target.drafter(profile.acceptance_rate, profile.drafter, seed=seed + r + 7919)
        prompt = [random.Random(seed + r).randrange(vocab_size) for _ in range(8)]

        def both(algo, **kw):
            """Wall time on ``runtime`` and the virtual clock's time for the same run."""
            measured = generate(
                prompt,
                target,
                drafter,
                algorithm=algo,
                max_new_tokens=n,
                runtime=runtime,
                runtime_options=runtime_options,
                **kw,
            )
            if runtime == "virtual":  # the measurement is the prediction
                return measured.time_ms, measured.time_ms
            predicted = generate(prompt, target, drafter, algorithm=algo, max_new_tokens=n, runtime="virtual", **kw)
            if measured.tokens != predicted.tokens:  # greedy: both must be the target's own output
                raise RuntimeError(f"{algo} returned different tokens on {runtime} and on the virtual clock")
            return measured.time_ms, predicted.time_ms

        m, v = both("nonsi")
        table.nonsi_ms.append(m)
        table.nonsi_virtual_ms.append(v)
        for row in table.rows:
            m, v = both("si", lookahead=row.lookahead)
            row.si_ms.append(m)
            row.si_virtual_ms.append(v)
            m, v = both("dsi", lookahead=row.lookahead, sp_degree=sp_degree)
            row.dsi_ms.append(m)
            row.dsi_virtual_ms.append(v)
        if progress:
            progress(f"repeat {r + 1}/{repeats}")
    return table
