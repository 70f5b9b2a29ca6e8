"""The algorithms by name, and :func:`run_generation`: one generation of one algorithm on one runtime, the runner
under every entry point (``Engine``, ``generate``, the experiments, the commands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specpar.algorithms.checks import check_drafter_faster, check_model, check_request
from specpar.algorithms.defaults import resolve
from specpar.algorithms.dsi import dsi
from specpar.algorithms.generation import Generation
from specpar.algorithms.hsd import hsd
from specpar.algorithms.hsd_sp import LevelsServer, hsd_sp
from specpar.algorithms.nonsi import non_si
from specpar.algorithms.si import si
from specpar.backends.vocabulary import fit_drafters
from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.query import Query
from specpar.core.results import GenerationResult
from specpar.runtimes import Pool, RuntimeConfig, make_runtime
from specpar.runtimes.base import model_of
from specpar.runtimes.virtual import collector_paused

Pools = dict[str, Pool]  # "target", "drafter" (SI, DSI), "level0".. (HSD), "levels" (HSD-SP)


@dataclass(frozen=True)
class Algorithm:
    """An algorithm as the runner sees it: ``run`` on ``(g, pools, spec)`` (every default decided). drafts: it
    needs a drafter. parallel: it verifies on ``sp_degree`` target servers at once. hierarchy: its drafter is a list
    of levels, the smallest first."""

    name: str
    run: Callable[[Generation, Pools, SpeculativeConfig], GenerationResult]
    drafts: bool = True
    parallel: bool = False
    hierarchy: bool = False


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("nonsi", non_si, drafts=False),
        Algorithm("si", si),
        Algorithm("dsi", dsi, parallel=True),
        Algorithm("hsd", hsd, hierarchy=True),
        Algorithm("hsd-sp", hsd_sp, parallel=True, hierarchy=True),
    )
}


def run_generation(
    query: Query, target, drafter, spec: SpeculativeConfig, runtime: RuntimeConfig, ready_made: bool | None = None
) -> GenerationResult:
    """One generation of ``query`` by ``spec.algorithm`` on ``target`` and ``drafter`` (models, whose servers are
    made for it, or Pools; a list of them, the smallest first, for HSD or merged token trees): the request checked
    against the models (:mod:`.checks`), the config's defaults decided (:mod:`.defaults`), the pools, runtime and
    :class:`Generation` made, the algorithm run on ``(g, pools, spec)``.

    runtime: its ``name`` must be set. ready_made: the servers outlive this generation (default: when Pools are
    given), so their Ray actors are kept. Not safe to call at once from several threads on the same Pools.
    """
    if not isinstance(spec, SpeculativeConfig):
        raise ConfigError(f"spec must be a SpeculativeConfig, got {type(spec).__name__}")
    if runtime.name is None:
        raise ConfigError("the runtime's name must be set (virtual, threads or ray)")
    algorithm = ALGORITHMS[spec.algorithm]
    merged = isinstance(drafter, (list, tuple)) and not algorithm.hierarchy  # several drafters' trees, merged
    drafters = list(drafter) if isinstance(drafter, (list, tuple)) else [] if drafter is None else [drafter]
    target, drafters = check_model("target", target), [check_model("drafter", d) for d in drafters]
    if ready_made is None:
        ready_made = isinstance(target, Pool) or any(isinstance(d, Pool) for d in drafters)
    drafters = fit_drafters(model_of(target), drafters)  # rows that differ from the target's only by padding
    check_request(query, spec, algorithm, target, drafters, merged)
    drafter = drafters if algorithm.hierarchy else drafters[0] if drafters else None
    spec = resolve(spec, algorithm, target, drafter)
    if algorithm.drafts and not algorithm.hierarchy and spec.uses_drafter:
        check_drafter_faster(target, drafters[0])
    pools = make_pools(algorithm, spec, target, drafters, merged)
    rt = make_runtime(runtime, list(pools.values()), ready_made)
    # on the virtual clock the collector stays paused until the result is made (collector_paused's docstring)
    with collector_paused(runtime.name == "virtual"), rt:
        result = algorithm.run(Generation(query, rt), pools, spec)
    result.left_running = tuple(rt.left_running)
    lost = rt.lost  # replicas a runtime lost during the generation (threads, Ray)
    if lost:
        result.replicas_lost = tuple(x.server for x in lost)
        result.time_lost_ms = sum(x.lost_ms for x in lost)
    return result


def make_pools(algorithm: Algorithm, spec: SpeculativeConfig, target, drafters: list, merged: bool = False) -> Pools:
    """The pools the algorithm runs on, by name, drafters first (at a tie on the virtual clock, drafts are seen
    first). merged: the drafters' token trees are merged into one drafter server."""
    pools: Pools = {}
    if algorithm.name == "hsd":
        for i, m in enumerate([*drafters, target]):
            pools[f"level{i}"] = pool_of(m, 1, f"level{i}")
        return pools
    if algorithm.name == "hsd-sp":
        servers = [pool_of(m, 1, f"level{i}").servers[0] for i, m in enumerate(drafters)]
        pools["levels"] = Pool([LevelsServer(servers, spec.buffers[:-1])], "levels")
    elif algorithm.drafts and spec.uses_drafter:
        if merged:
            from specpar.backends.merged import MergedDrafters

            servers = [pool_of(d, 1, f"drafter{i}").servers[0] for i, d in enumerate(drafters)]
            pools["drafter"] = Pool([MergedDrafters(servers)], "drafter")
        else:
            pools["drafter"] = pool_of(drafters[0], 1, "drafter")
    pools["target"] = pool_of(target, spec.sp_degree if algorithm.parallel else 1, "target")
    return pools


def pool_of(source, n: int, name: str) -> Pool:
    """``n`` servers named ``name``: fresh ones from a model, or the first ``n`` of a ready-made Pool."""
    if isinstance(source, Pool):
        if len(source) < n:
            raise ConfigError(f"the {name} pool has {len(source)} server(s) but {n} are needed (sp_degree)")
        return Pool(source.servers[:n], name, model=source.model)
    return Pool([source.server(f"{name}{i}") for i in range(n)], name, model=source)
