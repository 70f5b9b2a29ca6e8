"""The load policy: how many processing units (a core, a GPU) each request gets, and what it runs on them.

On a share of u units a request runs the fastest option that fits (non-SI and SI: one unit; DSI with SP degree s:
s + 1 units). A :class:`ShareCurve` lists its best option per share (predicted by :mod:`specpar.prediction.shares`);
:func:`allocate` admits the longest prefix of the queue whose smallest shares fit and splits the units to maximize
the total goodput sum_i r_i(u_i), a request keeping its share unless a change gains more than ``keep_bonus``.
Fixed policies (DSI, SI, non-SI) are curves with one option. Details: docs/load.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from specpar.core.errors import ConfigError

POLICIES = ("adaptive", "dsi", "si", "nonsi")
KEEP_BONUS = 0.05


@dataclass(frozen=True)
class Option:
    """What a request runs on ``units`` processing units: ``algorithm`` with ``sp_degree`` target servers and
    ``lookahead`` (None: the runner's default), predicted to take ``ms_per_token`` (None: unknown)."""

    units: int
    algorithm: str
    sp_degree: int = 1
    lookahead: int | None = None
    ms_per_token: float | None = None


@dataclass(frozen=True)
class ShareCurve:
    """A request's best option for each share it may have: ``options[i]`` on ``min_units + i`` units. Without
    predictions (``ms_per_token`` None) the rates grow as the square root of the units, so free units split evenly."""

    options: tuple[Option, ...]
    rates: tuple[float, ...] = field(init=False, repr=False, compare=False)
    min_units: int = field(init=False, repr=False, compare=False)  # the smallest share, and the largest
    max_units: int = field(init=False, repr=False, compare=False)
    _first: dict = field(init=False, repr=False, compare=False)  # units -> first_share(units), as asked

    def __post_init__(self):
        if not self.options:
            raise ConfigError("a share curve needs at least one option")
        units = [o.units for o in self.options]
        if units != list(range(units[0], units[0] + len(units))):
            raise ConfigError(f"a share curve's options must be for consecutive unit counts, got {units}")
        rates = [0.0] * units[0]  # rates[u]: rate(u) for u = 0 .. max_units
        for o in self.options:
            ms = o.ms_per_token
            rates.append(math.sqrt(o.units) if ms is None else 1.0 / ms if ms > 0 else math.inf)
        for name, value in (("rates", tuple(rates)), ("min_units", units[0]), ("max_units", units[-1]), ("_first", {})):
            object.__setattr__(self, name, value)

    def option(self, units: int) -> Option:
        """The option for ``units`` units (the largest one the curve has, for more)."""
        if units < self.min_units:
            raise ConfigError(f"{units} unit(s) is less than this request's smallest share, {self.min_units}")
        return self.options[min(units, self.max_units) - self.min_units]

    def first_share(self, units: int) -> int:
        """The share this request takes when it arrives alone on ``units`` free units (see :func:`alone`)."""
        share = self._first.get(units)
        if share is None:
            share = self._first[units] = alone(self, 0, units)
        return share

    def rate(self, units: int) -> float:
        """Tokens per ms on ``units`` units (0 below the smallest share)."""
        rates = self.rates
        return rates[units] if units < len(rates) else rates[-1]


def fixed(option: Option) -> ShareCurve:
    """A fixed policy's curve: one option, on its units only."""
    return ShareCurve((option,))


def alone(curve: ShareCurve, held: int, units: int, keep_bonus: float = KEEP_BONUS) -> int:
    """The share of a request alone in the queue, holding ``held`` of ``units`` units: :func:`allocate`'s answer
    for a queue of one (the smallest of its fastest shares, with ``keep_bonus`` on ``held``)."""
    return _pick(curve, held, units, keep_bonus)[1]


def _pick(curve: ShareCurve, held: int, most: int, keep_bonus: float, later=None, left: int = 0) -> tuple[float, int]:
    """(value, share) of the best share of at most ``most`` units: rate(u), times 1 + keep_bonus if u == held, plus
    ``later[left - u]`` (the best of the requests after it) when given; a tie keeps the smaller share (units free)."""
    top, pick = -math.inf, 0
    for u in range(curve.min_units, min(curve.max_units, most) + 1):
        value = curve.rates[u] * (1.0 + keep_bonus if u == held else 1.0) + (0.0 if later is None else later[left - u])
        if pick == 0 or value > top * (1 + 1e-12):
            top, pick = value, u
    return top, pick


def allocate(
    curves: Sequence[ShareCurve], held: Sequence[int], units: int, keep_bonus: float = KEEP_BONUS
) -> list[int]:
    """The units each request should have, in queue order (0: it waits).

    curves[i], held[i]: request i's curve and the units it holds now, in order of arrival. The longest prefix whose
    smallest shares fit in ``units`` is admitted (none overtakes an earlier one, so none starves); their shares
    maximize sum_i r_i(u_i) * (1 + keep_bonus if u_i = held[i]), the smaller share at a tie (units stay free).
    """
    if len(curves) != len(held):
        raise ConfigError("one held count per curve")
    admitted, used = 0, 0
    for c in curves:
        if used + c.min_units > units:
            break
        used += c.min_units
        admitted += 1
    shares = [0] * len(curves)
    if not admitted:
        return shares
    if admitted == 1:  # alone (the common case at low load): its best share
        shares[0] = alone(curves[0], held[0], units, keep_bonus)
        return shares
    # best[j][m]: the best value of requests j.. with m units left; choice[j][m]: request j's units there
    best = [[0.0] * (units + 1) for _ in range(admitted + 1)]
    choice = [[0] * (units + 1) for _ in range(admitted)]
    rest = 0  # what the requests after j need at least
    for j in range(admitted - 1, -1, -1):
        for m in range(curves[j].min_units + rest, units + 1):
            best[j][m], choice[j][m] = _pick(curves[j], held[j], m - rest, keep_bonus, best[j + 1], m)
        rest += curves[j].min_units
    m = units
    for j in range(admitted):
        shares[j] = choice[j][m]
        m -= shares[j]
    return shares
