"""``lookahead="auto"``: the fastest lookahead of DSI (or SI) for a latency profile, an acceptance rate and an SP degree.

Eq. 1 gives a lower bound on the lookahead (:func:`~specpar.planning.min_lookahead`), and the paper ran DSI over
every configuration satisfying it; the fastest of those is not always the smallest (a longer chunk costs less per
drafted token where drafting is cheap and acceptance high). :func:`choose_lookahead` predicts DSI's mean latency
at every lookahead that satisfies Eq. 1 (every one where none does; SI: every one) on the same draws, and takes the
fastest: by the vectorized fast path (:mod:`specpar.prediction.fastpath`) in the paper's time-unit model (TTFT =
TPOT, no per-token cost, no server kept for the cursor), else by the algorithms themselves on the virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import int_at_least
from specpar.planning.lookahead import keeps_cursor_server, satisfies_eq1
from specpar.prediction.fastpath import acceptance_uniforms, dsi_latency, next_rejection, si_counts, si_time

FAST_PATH_REPEATS = 200
EVENT_TOKENS = 2000  # event predictions average over about this many tokens (4 to 16 runs)
EVENT_MAX_N = 200  # event predictions run on at most this many tokens
EVENT_MAX_LOOKAHEAD = 32
FAST_MAX_N = 1000  # fast-path predictions run on at most this many tokens: the ranking has settled by then


@dataclass
class LookaheadChoice:
    """The lookahead chosen and what decided it.

    predicted_ms: candidate lookahead -> the predicted mean latency (ms) for ``n`` tokens (at most FAST_MAX_N on
        the fast path, EVENT_MAX_N on the virtual clock). valid: the candidates that satisfy Eq. 1 with
        ``sp_degree`` servers (empty: none does, all were tried). method: "fast path" or "virtual clock".
    """

    lookahead: int
    sp_degree: int
    n: int
    method: str
    predicted_ms: dict[int, float] = field(default_factory=dict)
    valid: list[int] = field(default_factory=list)
    algorithm: str = "dsi"

    @property
    def smallest_valid(self) -> int | None:
        return min(self.valid) if self.valid else None

    @property
    def why(self) -> str:
        best = self.predicted_ms[self.lookahead]
        if self.algorithm == "si":
            return f"SI's fastest by the {self.method}: {best:.4g} ms predicted for N = {self.n}"
        if not self.valid:
            return (
                f"no lookahead satisfies Eq. 1 with SP = {self.sp_degree}; the fastest by the {self.method}, "
                f"{best:.4g} ms predicted for N = {self.n}"
            )
        small = self.smallest_valid
        gain = self.predicted_ms[small] / best
        return (
            f"the fastest of the lookaheads satisfying Eq. 1 with SP = {self.sp_degree} ({small}..), by the "
            f"{self.method}: {best:.4g} ms predicted for N = {self.n}"
            + (f", {gain:.3f}x the smallest's" if self.lookahead != small else "")
        )

    def to_dict(self) -> dict:
        return {
            "algorithm": self.algorithm,
            "lookahead": self.lookahead,
            "sp_degree": self.sp_degree,
            "n": self.n,
            "method": self.method,
            "valid": self.valid,
            "predicted_ms": {str(k): v for k, v in self.predicted_ms.items()},
        }


def fast_path_models(spec: SpeculativeConfig, target: LatencyProfile, drafter: LatencyProfile) -> bool:
    """Whether the fast path models ``spec`` on these latencies exactly: the paper's time-unit model (TTFT = TPOT,
    no per-token cost) and no server kept for the cursor."""
    uniform = all(m.ttft_ms == m.tpot_ms and m.per_token_ms == 0 for m in (target, drafter)) and target.tpot_ms > 0
    return uniform and not _kept(spec, target)


def choose_lookahead(
    target: LatencyProfile,
    drafter: LatencyProfile,
    acceptance_rate: float,
    sp_degree: int,
    n: int = 100,
    *,
    seed: int = 0,
    algorithm: str = "dsi",
    dedicated_cursor: bool | None = None,
) -> LookaheadChoice:
    """The fastest lookahead of ``algorithm`` ("dsi" or "si") for ``n`` tokens, DSI on ``sp_degree`` target servers
    keeping one for the cursor as ``dedicated_cursor`` says (None: where ``target.per_token_ms > 0``)."""
    if algorithm not in ("dsi", "si"):
        raise ConfigError(f"a lookahead is chosen for 'dsi' or 'si', not {algorithm!r}")
    if not 0.0 <= acceptance_rate <= 1.0:
        raise ConfigError(f"acceptance rate must be in [0, 1], got {acceptance_rate!r}")
    int_at_least("sp_degree", sp_degree)
    if drafter.tpot_ms <= 0 or target.tpot_ms <= 0:
        raise ConfigError("choosing a lookahead needs target and drafter latencies > 0 ms")
    if n < 2:
        return LookaheadChoice(1, sp_degree, n, "none needed", {1: 0.0}, [1], algorithm)
    spec = SpeculativeConfig(
        algorithm=algorithm, sp_degree=sp_degree, dedicated_cursor=dedicated_cursor if algorithm == "dsi" else None
    )
    kept, fast = _kept(spec, target), fast_path_models(spec, target, drafter)
    everything = list(range(1, min(n - 1, 200 if fast else EVENT_MAX_LOOKAHEAD) + 1))
    t, d, extra = target.tpot_ms, drafter.tpot_ms, target.per_token_ms
    valid = [k for k in everything if algorithm == "si" or satisfies_eq1(t, d, k, sp_degree, extra, kept)]
    ks = valid or everything
    predicted = predict_ms(spec, target, drafter, acceptance_rate, n, ks, seed)
    best = min(ks, key=lambda k: (predicted[k], k))
    return LookaheadChoice(best, sp_degree, n, "fast path" if fast else "virtual clock", predicted, valid, algorithm)


def predict_ms(
    spec: SpeculativeConfig,
    target: LatencyProfile,
    drafter: LatencyProfile,
    acceptance_rate: float,
    n: int,
    lookaheads: list[int],
    seed: int = 0,
) -> dict[int, float]:
    """``spec``'s predicted mean latency (ms) for ``n`` tokens at each of ``lookaheads``, as :func:`choose_lookahead`
    predicts its candidates'."""
    if fast_path_models(spec, target, drafter):
        c = drafter.tpot_ms / target.tpot_ms
        return _fast_path(spec.algorithm, target.tpot_ms, c, acceptance_rate, spec.sp_degree, n, lookaheads, seed)
    spec = spec.replace(dedicated_cursor=_kept(spec, target)) if spec.algorithm == "dsi" else spec
    return _event(spec, target, drafter, acceptance_rate, n, lookaheads, seed)


def _kept(spec: SpeculativeConfig, target: LatencyProfile) -> bool:
    """Whether ``spec``'s DSI keeps a target server for the cursor on ``target``'s latencies (SI: never)."""
    return spec.algorithm == "dsi" and keeps_cursor_server(target.per_token_ms, spec.dedicated_cursor)


def _fast_path(
    algorithm: str, target_ms: float, c: float, a: float, sp: int, n: int, ks: list[int], seed: int
) -> dict[int, float]:
    n = min(n, FAST_MAX_N)  # memory and time grow with n x lookaheads; -N 10^7 would not fit
    nz = next_rejection(acceptance_uniforms(FAST_PATH_REPEATS, n, seed), [a])[0]  # [R, n+1]
    R = len(nz)
    runs = np.tile(nz, (len(ks), 1))
    if algorithm == "si":
        lat = si_time(*si_counts(runs, np.repeat(ks, R), n), c)
    else:
        lat = dsi_latency(runs, np.repeat(ks, R), np.full(len(ks) * R, c), n, sp)
    means = lat.reshape(len(ks), R).mean(axis=1) * target_ms
    return {k: float(m) for k, m in zip(ks, means)}


def _event(
    spec: SpeculativeConfig, target: LatencyProfile, drafter: LatencyProfile, a: float, n: int, ks: list[int], seed: int
) -> dict[int, float]:
    from specpar.backends.simulated import SimulatedModel
    from specpar.prediction.simulate import DRAFTER_SEED, clock, mean_time_ms

    n = min(n, EVENT_MAX_N)
    pairs = []
    for r in range(seed, seed + min(16, max(4, EVENT_TOKENS // n))):
        model = SimulatedModel(16, seed=r, latency=target)
        pairs.append((model, model.drafter(a, drafter, seed=r + DRAFTER_SEED), [r % 16, 3]))
    return {k: mean_time_ms(pairs, spec.replace(lookahead=k), clock(), n)[0] for k in ks}


def auto_lookahead(
    target, drafter, algorithm: str, sp_degree: int, max_tokens: int, dedicated_cursor: bool | None = None
) -> int:
    """lookahead="auto" for ``target`` and ``drafter`` (models or Pools): :func:`choose_lookahead` on their latency
    profiles and the drafter's acceptance rate; DSI keeps a server for the cursor as ``dedicated_cursor`` says."""
    from specpar.runtimes.base import latency_of, model_of

    t, d = latency_of(target), latency_of(drafter)
    a = None if drafter is None else model_of(drafter).acceptance_rate
    if t is None or d is None or a is None:
        raise ConfigError(
            'lookahead="auto" needs both latency profiles and the drafter\'s acceptance rate (a simulated drafter); '
            "for real models run `specpar plan` on a measured profile (`specpar profile`) and pass its lookahead"
        )
    sp = sp_degree if algorithm == "dsi" else 1
    algorithm = "dsi" if algorithm == "dsi" else "si"
    return choose_lookahead(t, d, a, sp, max_tokens, algorithm=algorithm, dedicated_cursor=dedicated_cursor).lookahead
