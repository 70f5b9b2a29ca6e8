"""Processing units and the servers on them, and the pools a request's units give its algorithm."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specpar.core.calls import Context
from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int
from specpar.planning.load import Option
from specpar.runtimes.base import Pool


@dataclass(eq=False)
class Unit:
    """One processing unit (a core, a GPU) and the servers on it, each with its own KV cache, run one at a time.
    levels: HSD's drafter levels, the smallest first, or several drafters whose token trees are merged."""

    index: int
    targets: list = field(default_factory=list)
    drafters: list = field(default_factory=list)
    levels: list[list] = field(default_factory=list)

    def __post_init__(self):
        # servers whose times depend on what they hold (the others need not be asked: see cached)
        self.caching = [s for s in self.servers if s.latency is None or s.latency.cache_matters]

    def cached(self, context: Context) -> tuple[int, int]:
        """How much of ``context`` the unit's target and drafter servers hold (a request prefers its own); 0 where
        no server's times depend on its cache (``LatencyProfile.cache_matters``)."""
        if not self.caching:
            return 0, 0
        return _cached(self.targets, context), _cached(self.drafters, context)

    @property
    def servers(self) -> list:
        return [*self.targets, *self.drafters, *(s for level in self.levels for s in level)]


def unit_count(units: int | None, sp_degree: int, drafts: bool = True, ready_made: bool = False) -> int:
    """How many units of one target and one drafter server each an engine makes: ``units``, by default sp_degree + 1
    (sp_degree without a drafter); 0: one unit of every server (units=1, or servers given ready-made as Pools)."""
    if units is not None and not is_int(units, 1, 1024):
        raise ConfigError(f"units must be an integer in [1, 1024], got {units!r}")
    if ready_made:
        if units not in (None, 1):
            raise ConfigError("servers given as Pools form one processing unit: give models for units > 1")
        return 0
    if units == 1:
        return 0
    if units is None:
        return sp_degree + 1 if drafts else sp_degree
    return units


def servers_of_units(n: int, sp_degree: int) -> tuple[int, int]:
    """(target servers, drafter servers per drafter model) of ``n`` units (0: one unit of sp_degree targets)."""
    return (n, n) if n else (sp_degree, 1)


def make_units(targets: Pool, drafters: Pool | list[Pool] | None, n: int) -> list[Unit]:
    """The processing units over an engine's servers: ``n`` of one target server each, with its drafter server (or
    one server per level); n = 0: one unit of every server."""
    levels = drafters if isinstance(drafters, list) else []
    pool = drafters if isinstance(drafters, Pool) else None
    if n == 0:
        return [Unit(0, targets.servers, pool.servers if pool else [], [p.servers for p in levels])]
    return [
        Unit(i, [targets.servers[i]], [pool.servers[i]] if pool else [], [[p.servers[i]] for p in levels])
        for i in range(n)
    ]


@dataclass
class Placement:
    """The pools one configuration of a request runs on: ``target`` and ``drafter`` as run_generation takes them (a
    Pool, a list of level Pools for HSD, or None)."""

    target: Pool
    drafter: Pool | list[Pool] | None


def place(option: Option, units: Sequence[Unit]) -> Placement:
    """The pools of ``option`` on ``units`` (the request's, best first): one unit's servers as they are; on several,
    the drafter (or HSD's levels) on the first unit and a target replica on each other."""
    first = units[0]
    if len(units) == 1:
        targets, drafter_unit = first.targets, first
    else:
        targets, drafter_unit = [s for u in units[1:] for s in u.targets], first
    target = Pool(targets, "target")
    if option.algorithm == "nonsi":
        return Placement(target, None)
    if option.algorithm in ("hsd", "hsd-sp") or not drafter_unit.drafters:  # HSD's levels, or drafters to merge
        return Placement(target, [Pool(level, f"level{i}") for i, level in enumerate(drafter_unit.levels)])
    return Placement(target, Pool(drafter_unit.drafters, "drafter"))


def _cached(servers, context: Context) -> int:
    return max(
        (s.cached_len(context) for s in servers if s.latency is None or s.latency.cache_matters),
        default=0,
    )
