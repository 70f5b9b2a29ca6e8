"""The paper's online experiment (Table 2 style): non-SI, SI and DSI on threads, in wall time.

Servers are simulated models that sleep for a pair profile's latencies (TTFT, then TPOT), the drafter right at the
profile's acceptance rate; one OS thread per server, so the times include real orchestration costs. For each
lookahead in {1, 5, 10} for which Eq. 1 holds with SP <= ``sp_degree`` (the paper's 8-GPU node: up to 7 target
servers and the drafter), the arms run interleaved (:func:`~specpar.experiments.loop.run_arms`), each measured figure
beside the virtual clock's prediction for the same models and seeds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields

from specpar.backends import SimulatedModel
from specpar.core.errors import ConfigError
from specpar.core.numbers import positive_int
from specpar.experiments.loop import Speedup, run_arms, speedup
from specpar.experiments.runs import run_once
from specpar.planning.lookahead import sp_degree_needed, verification_servers
from specpar.prediction.pair_profile import PairProfile

TABLE2_LOOKAHEADS = (1, 5, 10)
VOCAB = 16  # the simulated models' vocabulary


def feasible_lookaheads(profile: PairProfile, lookaheads: Sequence[int], sp_degree: int) -> list[tuple[int, int]]:
    """(lookahead, SP degree it needs) for each lookahead that fits on ``sp_degree`` target servers
    (:func:`~specpar.planning.sp_degree_needed`: Eq. 1, with catch-up and a server kept for the cursor where the
    target has a per-token cost, as DSI then keeps one)."""
    out = []
    t, d = profile.target, profile.drafter
    for k in lookaheads:
        if d.tpot_ms <= 0 or verification_servers(t.tpot_ms, d.tpot_ms, k, t.per_token_ms) is None:
            continue
        need = sp_degree_needed(t.tpot_ms, d.tpot_ms, k, t.per_token_ms)
        if need <= sp_degree:
            out.append((k, need))
    return out


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

    def speedups(self, row: OnlineRow, virtual: bool = False) -> dict[str, Speedup]:
        """DSI over SI and over non-SI (the one speedup definition, with its per-repeat spread)."""
        nonsi = self.nonsi_virtual_ms if virtual else self.nonsi_ms
        si = row.si_virtual_ms if virtual else row.si_ms
        dsi = row.dsi_virtual_ms if virtual else row.dsi_ms
        return {"dsi_vs_si": speedup(si, dsi), "dsi_vs_nonsi": speedup(nonsi, dsi)}

    def to_dict(self) -> dict:
        rows = []
        for r in self.rows:
            row = asdict(r)
            for kind, virtual in (("measured", False), ("predicted", True)):
                row |= {f"{k}_{kind}": s.to_dict() for k, s in self.speedups(r, virtual).items()}
            rows.append(row)
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "infeasible"}
        return out | {"profile": self.profile.to_dict(), "rows": rows, "infeasible_lookaheads": self.infeasible}


def run_online(
    profile: PairProfile,
    *,
    n: int = 50,
    repeats: int = 3,
    sp_degree: int = 7,
    lookaheads: Sequence[int] = TABLE2_LOOKAHEADS,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    **run,
) -> OnlineTable:
    """Measure one pair profile (simulated models of VOCAB tokens). run: the measured runs' :func:`run_once`
    keywords: ``runtime`` ("threads" by default; "ray", with runtime_options: RayRuntime's; or "virtual" too, then
    measured = predicted), ``stream`` (the measured runs' tokens as they are verified: a progress bar). progress:
    called with the arm's name after each run."""
    for name, v in (("N", n), ("repeats", repeats), ("sp_degree", sp_degree)):
        positive_int(name, v)
    feasible = feasible_lookaheads(profile, lookaheads, sp_degree)
    if not feasible:
        raise ConfigError(
            f"no lookahead in {tuple(lookaheads)} satisfies Eq. 1 with SP <= {sp_degree} for {profile.label} "
            f"(drafter at {profile.drafter_fraction:.3g} of the target's latency): give larger lookaheads"
        )
    rows = [OnlineRow(k, need) for k, need in feasible]
    infeasible = [k for k in lookaheads if k not in dict(feasible)]
    table = OnlineTable(profile, n, repeats, sp_degree, [], [], rows, infeasible)

    def setup(r):
        target = SimulatedModel(VOCAB, seed=seed + r, latency=profile.target)
        drafter = target.drafter(profile.acceptance_rate, profile.drafter, seed=seed + r + 7919)
        return target, drafter, [random.Random(seed + r).randrange(VOCAB) for _ in range(8)]

    arms = {"nonsi": ("nonsi", {})}
    for row in table.rows:
        arms[f"si-{row.lookahead}"] = ("si", dict(lookahead=row.lookahead))
        arms[f"dsi-{row.lookahead}"] = ("dsi", dict(lookahead=row.lookahead, sp_degree=sp_degree))
    run = {"runtime": "threads", **run}

    def both(arm, models):
        """Wall time on the runtime and the virtual clock's time for the same run."""
        target, drafter, prompt = models
        algo, kw = arms[arm]
        measured = run_once(prompt, target, drafter, algorithm=algo, max_tokens=n, **run, **kw)
        if run["runtime"] == "virtual":  # the measurement is the prediction
            return measured.time_ms, measured.time_ms
        predicted = run_once(prompt, target, drafter, algorithm=algo, max_tokens=n, runtime="virtual", **kw)
        if measured.tokens != predicted.tokens:  # greedy: both must be the target's own output
            raise RuntimeError(f"{algo} returned different tokens on {run['runtime']} and on the virtual clock")
        return measured.time_ms, predicted.time_ms

    runs = run_arms(
        list(arms), repeats, both, setup=setup, on_result=(lambda a, r, _: progress(a)) if progress else None
    )
    table.nonsi_ms, table.nonsi_virtual_ms = _split_runs(runs["nonsi"])
    for row in table.rows:
        row.si_ms, row.si_virtual_ms = _split_runs(runs[f"si-{row.lookahead}"])
        row.dsi_ms, row.dsi_virtual_ms = _split_runs(runs[f"dsi-{row.lookahead}"])
    return table


def _split_runs(pairs: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """(measured times, predicted times) of an arm's runs."""
    return [m for m, _ in pairs], [v for _, v in pairs]
