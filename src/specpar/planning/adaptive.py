"""``lookahead="adaptive"``: the lookahead re-chosen during a generation from a running acceptance estimate.

:class:`AdaptiveLookahead` keeps an estimate â of the acceptance rate (an exponential average over about ``horizon``
tested drafts) and at every window boundary (SI: each round; DSI: each chunk) takes the candidate with the least
predicted time per token at â: SI any k in 1..``max_lookahead`` (:func:`~specpar.planning.analytic.si_ms_per_token`),
DSI those valid for its target servers (Eq. 1; all where none is; :func:`~specpar.planning.analytic.dsi_ms_per_token`).
Unlike HF's dynamic speculation (+2 after a fully accepted round, -1 otherwise) it asks the cost model. The best k per
rate is tabulated once (``GRID + 1`` rates), so a boundary costs one lookup.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import positive_int
from specpar.planning.analytic import dsi_ms_per_token, si_ms_per_token
from specpar.planning.lookahead import satisfies_eq1

GRID = 100  # acceptance rates 0, 0.01, ..., 1 in the table
DEFAULT_MAX_LOOKAHEAD = 16
DEFAULT_HORIZON = 8.0  # tests the estimate averages over (its weight on the newest is 1 / horizon)
DEFAULT_PRIOR = 0.7  # the estimate before any test, when nothing better is known


class AdaptiveLookahead:
    """The lookahead for the next window, from the acceptance estimate. best: the best lookahead at acceptance rate
    i / GRID, i = 0..GRID (:func:`tabulate`); prior: the estimate before any test; horizon: about how many of the
    latest tests it weighs; chosen: each window's lookahead so far (for reports)."""

    def __init__(self, best: Sequence[int], prior: float = DEFAULT_PRIOR, horizon: float = DEFAULT_HORIZON):
        if len(best) != GRID + 1:
            raise ConfigError(f"an adaptive lookahead's table has one lookahead per rate i / {GRID}, i = 0..{GRID}")
        if not 0.0 <= prior <= 1.0:
            raise ConfigError(f"the prior acceptance rate must be in [0, 1], got {prior!r}")
        if not isinstance(horizon, (int, float)) or not 1.0 <= horizon < math.inf:
            raise ConfigError(f"the estimate's horizon must be a number of tests >= 1, got {horizon!r}")
        self.best = tuple(best)
        self.candidates = sorted(set(self.best))
        self.estimate = float(prior)
        self.weight = 1.0 / horizon
        self.tested = 0
        self.chosen: list[int] = []

    def feedback(self, index: int, accepted: bool) -> None:
        """One draft tested (index: its place in its window, unused: every test weighs the same)."""
        self.estimate += self.weight * ((1.0 if accepted else 0.0) - self.estimate)
        self.tested += 1

    def lookahead(self) -> int:
        """The lookahead for the window that starts now."""
        k = self.best[round(self.estimate * GRID)]
        self.chosen.append(k)
        return k

    def __repr__(self) -> str:
        return f"AdaptiveLookahead(k in {self.candidates[0]}..{self.candidates[-1]}, estimate {self.estimate:.2f})"


def tabulate(candidates: Sequence[int], predict: Callable[[float, int], float]) -> tuple[int, ...]:
    """The best of ``candidates`` at each acceptance rate i / GRID: the least ``predict(a, k)`` (ms per token), the
    smaller k at a tie."""
    if not candidates:
        raise ConfigError("an adaptive lookahead needs at least one candidate lookahead")
    return tuple(min(candidates, key=lambda k: (predict(i / GRID, k), k)) for i in range(GRID + 1))


def adaptive_lookahead(
    algorithm: str,
    target: LatencyProfile,
    drafter: LatencyProfile,
    sp_degree: int = 1,
    *,
    max_lookahead: int = DEFAULT_MAX_LOOKAHEAD,
    dedicated_cursor: bool | None = None,
    prior: float = DEFAULT_PRIOR,
    horizon: float = DEFAULT_HORIZON,
) -> AdaptiveLookahead:
    """The policy for ``algorithm`` ("si" or "dsi") on these latency profiles: SI chooses among 1..max_lookahead,
    DSI among those that ``sp_degree`` target servers keep up with (keeping one for the cursor as
    ``dedicated_cursor`` says; all where none does)."""
    if algorithm not in ("si", "dsi"):
        raise ConfigError(f"an adaptive lookahead is for 'si' or 'dsi', not {algorithm!r}")
    positive_int("max_lookahead", max_lookahead)
    if target.tpot_ms <= 0 or drafter.tpot_ms <= 0:
        raise ConfigError("an adaptive lookahead needs target and drafter latencies > 0 ms (a cost model to weigh)")
    best = _table(algorithm, target.tpot_ms, drafter.tpot_ms, target.per_token_ms, sp_degree, max_lookahead,
                  dedicated_cursor)  # fmt: skip
    return AdaptiveLookahead(best, prior, horizon)


@functools.lru_cache(maxsize=256)
def _table(algorithm: str, t: float, d: float, per_token: float, sp_degree: int, max_lookahead: int, kept):
    """:func:`tabulate` for adaptive_lookahead's arguments (the same table for every generation of one setup)."""
    ks = list(range(1, max_lookahead + 1))
    if algorithm == "si":
        return tabulate(ks, lambda a, k: si_ms_per_token(t, d, a, k, per_token))
    valid = [k for k in ks if satisfies_eq1(t, d, k, sp_degree, per_token, kept)]
    return tabulate(valid or ks, lambda a, k: dsi_ms_per_token(t, d, a, k, per_token))
