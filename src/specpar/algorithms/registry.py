"""The algorithms by name, and :func:`run_generation`: one generation of one algorithm on one runtime.

Every entry point (``Engine``, ``generate``, the experiments, the commands) comes here with the same three
objects: a :class:`~specpar.core.config.SpeculativeConfig` (how to speculate), a
:class:`~specpar.core.config.RuntimeConfig` (where tasks run) and a :class:`~specpar.core.decoding.Decoding` with
the request's stopping. The runner checks the request against the models, resolves the config's defaults (the
lookahead from Eq. 1, DSI's modes from the target's latency profile), makes the pools and the runtime, runs the
algorithm, and closes the runtime as soon as the output is complete.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specpar.algorithms.adaptive import AdaptiveProposer
from specpar.algorithms.dsi import dsi
from specpar.algorithms.hsd import hsd
from specpar.algorithms.hsd_sp import LevelsServer, hsd_sp
from specpar.algorithms.ngram import NgramProposer
from specpar.algorithms.nonsi import non_si
from specpar.algorithms.proposers import ModelDrafter, Proposer
from specpar.algorithms.si import si
from specpar.backends.vocabulary import fit_drafters
from specpar.core.config import SpeculativeConfig, parse_proposer
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.results import GenerationResult
from specpar.core.trees import check_tree, tree_depth
from specpar.planning import min_lookahead
from specpar.planning.adaptive import DEFAULT_MAX_LOOKAHEAD, DEFAULT_PRIOR, AdaptiveLookahead, adaptive_lookahead
from specpar.runtimes import Pool, RuntimeConfig, make_runtime
from specpar.runtimes.virtual import collector_paused

log = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD = 5


@dataclass
class Job:
    """One generation as an algorithm receives it: the runtime and its pools, the request, the resolved config
    (every default decided: an integer lookahead, DSI's modes as booleans)."""

    runtime: object
    pools: dict[str, Pool]  # "target", "drafter" (SI, DSI), "level0".. (HSD), "levels" (HSD-SP)
    prompt: Sequence[int]
    max_new_tokens: int
    decoding: Decoding
    spec: SpeculativeConfig
    stream: Callable[[list[int]], None] | None = None
    stopping: object = None
    adaptive: AdaptiveLookahead | None = None  # lookahead="adaptive": the policy that chooses each window's


@dataclass(frozen=True)
class Algorithm:
    """An algorithm as the runner sees it.

    run: the algorithm on a :class:`Job`. drafts: it needs a drafter. parallel: it verifies on ``sp_degree``
    target servers at once (else on one). hierarchy: its drafter is a list of levels, the smallest first.
    """

    name: str
    run: Callable[[Job], GenerationResult]
    drafts: bool = True
    parallel: bool = False
    hierarchy: bool = False


def _nonsi(job: Job) -> GenerationResult:
    return non_si(
        job.runtime, job.pools["target"], job.prompt, job.max_new_tokens, job.decoding, job.stream, job.stopping
    )


def proposer_of(job: Job) -> Proposer:
    """What SI and DSI draft with (specpar.algorithms.proposers): the drafter pool's model (one, or several whose trees
    are merged), drafting the config's token tree where it has one, else chains; or the n-gram proposer, alone or in
    front of that model (``spec.proposer``); within the adaptive lookahead's windows where it is on."""
    spec = job.spec
    choice = parse_proposer(spec.proposer or "drafter")
    proposer = ModelDrafter(job.runtime, job.pools["drafter"], spec.tree) if choice.uses_drafter else None
    if choice.ngram:
        width = getattr(model_of(job.pools["target"]), "vocab_size", None)
        proposer = NgramProposer(width, choice.min_n, choice.max_n, spec.tree, fallback=proposer)
    return proposer if job.adaptive is None else AdaptiveProposer(proposer, job.adaptive)


def _si(job: Job) -> GenerationResult:
    s = job.spec
    return si(job.runtime, job.pools["target"], proposer_of(job), job.prompt, job.max_new_tokens, s.lookahead,
              job.decoding, job.stream, job.stopping)  # fmt: skip


def _dsi(job: Job) -> GenerationResult:
    s = job.spec
    return dsi(job.runtime, job.pools["target"], proposer_of(job), job.prompt, job.max_new_tokens, s.lookahead,
               job.decoding, job.stream, job.stopping, prefill_all=s.prefill_replicas,
               dedicated_cursor=s.dedicated_cursor)  # fmt: skip


def _hsd(job: Job) -> GenerationResult:
    levels = [job.pools[f"level{i}"] for i in range(len(job.spec.buffers) + 1)]
    return hsd(job.runtime, levels, job.prompt, job.max_new_tokens, list(job.spec.buffers), job.decoding,
               job.stream, job.stopping)  # fmt: skip


def _hsd_sp(job: Job) -> GenerationResult:
    return hsd_sp(job.runtime, job.pools["target"], job.pools["levels"], job.prompt, job.max_new_tokens,
                  job.spec.buffers[-1], job.decoding, job.stream, job.stopping)  # fmt: skip


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm("nonsi", _nonsi, drafts=False),
        Algorithm("si", _si),
        Algorithm("dsi", _dsi, parallel=True),
        Algorithm("hsd", _hsd, hierarchy=True),
        Algorithm("hsd-sp", _hsd_sp, parallel=True, hierarchy=True),
    )
}


# -- the models behind a request -----------------------------------------------------------------
def model_of(source):
    """The model behind a model or a ready-made Pool (the model its servers were made from, else its first server)."""
    if isinstance(source, Pool):
        return getattr(source, "model", None) or getattr(source.servers[0], "model", source.servers[0])
    return source


def latency_of(source):
    """The LatencyProfile of a model or of a ready-made Pool's servers, or None when unknown."""
    if isinstance(source, Pool):
        source = source.servers[0]
    return getattr(source, "latency", None)


def check_context_window(prompt_len: int, max_new_tokens: int, *sources) -> None:
    """Refuse up front a generation longer than the smallest context window among the models (where they have one)."""
    windows = []
    for source in sources:
        model = model_of(source)
        window = getattr(model, "context_window", None)
        if window is not None:
            windows.append((window, getattr(model, "name", "a model")))
    if windows:
        window, name = min(windows)
        if prompt_len + max_new_tokens > window:
            raise ConfigError(
                f"the prompt has {prompt_len} tokens and {max_new_tokens} new ones are asked for, but {name}'s "
                f"context window is {window} tokens: shorten the prompt or lower max_new_tokens"
            )


def check_tokens(prompt, decoding: Decoding, target, *drafters) -> None:
    """Refuse up front a prompt that is not token ids (integers >= 0, at most the target's ``max_token_id`` where it
    has one), a logit_bias for an id past that (each server would refuse it in its first task), and a drafter whose rows are not as wide as the target's when sampling (rejection sampling compares
    distributions over one vocabulary; a drafter whose rows differ only by padding has been fitted to the target's
    width by then: :mod:`specpar.backends.vocabulary`)."""
    if isinstance(prompt, (str, bytes)) or not hasattr(prompt, "__len__"):
        raise ConfigError(f"the prompt must be a list of token ids, got {type(prompt).__name__}")
    limit = getattr(model_of(target), "max_token_id", None)
    for i, t in enumerate(prompt):
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 or (limit is not None and t > limit):
            where = f"integers in [0, {limit}]" if limit is not None else "integers >= 0"
            raise ConfigError(f"the prompt's token ids must be {where}; position {i} holds {t!r}")
    bias = decoding.processors.logit_bias if decoding.processors is not None else ()
    if bias and limit is not None and max(t for t, _ in bias) > limit:
        raise ConfigError(f"logit_bias names token {max(t for t, _ in bias)}: the target's ids are 0 .. {limit}")
    vocab = getattr(model_of(target), "vocab_size", None)
    if decoding.greedy or vocab is None:
        return
    for d in drafters:
        size = getattr(model_of(d), "vocab_size", None)
        if size is not None and size != vocab:
            raise ConfigError(
                f"the drafter's vocabulary has {size} tokens but the target's has {vocab}: sampling needs one "
                "vocabulary (greedy decoding does not); a drafter whose rows differ from the target's only by padding "
                "needs with_rows() (transformers models have it)"
            )


def check_drafter_faster(target, drafter) -> None:
    """Warn when the drafter is slower than the target (the paper's Assumption 2)."""
    t, d = latency_of(target), latency_of(drafter)
    if t is None or d is None:
        return
    if d.tpot_ms > t.tpot_ms or d.ttft_ms > t.ttft_ms:
        warnings.warn(
            f"the drafter ({d.tpot_ms:g} ms/token) is slower than the target ({t.tpot_ms:g} ms/token): "
            "DSI's guarantee of never being slower than non-SI needs a drafter at least as fast as the "
            "target (the paper's Assumption 2); results stay lossless",
            SpecparWarning,
            stacklevel=4,
        )


# -- the config's defaults -----------------------------------------------------------------------
def prefill_pays_off(target) -> bool:
    """DSI's default for prefilling every target replica at the start: when TTFT > TPOT, or when unknown.

    A cold replica pays TTFT on its first verification; prefilling all replicas in parallel at once
    keeps DSI never slower than non-SI when TTFT > TPOT, and costs ~0.1% when TTFT = TPOT
    (benchmarks/theorem_grid.py).
    """
    lat = latency_of(target)
    return lat is None or lat.ttft_ms > lat.tpot_ms


def verification_costs_grow(target) -> bool:
    """DSI's default for keeping a target server for passes on the cursor: when verifying k drafts costs more
    than a pass on the verified prefix (per_token_ms > 0, as on CPUs), or when the cost is unknown."""
    lat = latency_of(target)
    return lat is None or lat.per_token_ms > 0


def default_lookahead(target, drafter, sp_degree: int, dedicated_cursor: bool | None = None) -> int:
    """The smallest lookahead satisfying Eq. 1 when both latencies are known and one does, else 5; with a server
    kept for the cursor (dedicated_cursor; None: DSI's default, on per-token costs) one fewer verifies."""
    t, d = latency_of(target), latency_of(drafter)
    if t is None or d is None or d.tpot_ms <= 0 or t.tpot_ms <= 0:
        return DEFAULT_LOOKAHEAD
    try:
        return min_lookahead(
            t.tpot_ms, d.tpot_ms, sp_degree, per_token_ms=t.per_token_ms, dedicated_cursor=dedicated_cursor
        )
    except ConfigError:  # reading a token costs the target more than drafting it: no lookahead keeps up
        return DEFAULT_LOOKAHEAD


def resolve(spec: SpeculativeConfig, target, drafter, prompt_len: int) -> SpeculativeConfig:
    """``spec`` with every default decided for these models: sp_degree (1 unless the algorithm verifies in
    parallel), the lookahead (a tree's depth; Eq. 1's smallest), HSD's buffers, DSI's modes."""
    algorithm = ALGORITHMS[spec.algorithm]
    sp = (spec.sp_degree or 1) if algorithm.parallel else 1
    changes: dict = {"sp_degree": sp}
    # Eq. 1's lookahead for the configured SP degree, also for SI (which verifies on one server)
    k = spec.lookahead
    if k == "auto":
        raise ConfigError('lookahead="auto" is chosen by the Engine or generate() (a simulation of the models)')
    if spec.tree is not None:
        model = model_of(target)
        window = getattr(model, "context_window", None)
        shape = check_tree(spec.tree, room=None if window is None else window - prompt_len)
        changes.update(tree=shape, lookahead=tree_depth(shape))
    elif algorithm.hierarchy:
        levels = len(drafter)
        buffers = spec.buffers or (k or DEFAULT_LOOKAHEAD,) * levels
        if len(buffers) != levels:
            raise ConfigError(
                f"HSD needs one buffer size T_i per drafter level: {levels} drafters, got {len(buffers)} buffer "
                f"sizes {list(buffers)}"
            )
        changes.update(buffers=tuple(buffers), lookahead=buffers[-1])
    elif algorithm.drafts and k is None:
        k = default_lookahead(target, drafter if spec.uses_drafter else None, spec.sp_degree or 1,
                              spec.dedicated_cursor)  # fmt: skip
        log.info("lookahead %d: the smallest that keeps %d target server(s) busy (Eq. 1)", k, spec.sp_degree or 1)
        changes["lookahead"] = k
    if spec.algorithm in ("dsi", "hsd-sp"):
        if spec.prefill_replicas is None:
            changes["prefill_replicas"] = prefill_pays_off(target)
        if spec.dedicated_cursor is None:
            changes["dedicated_cursor"] = verification_costs_grow(target)
    return spec.replace(**changes)


def adaptive_policy(spec: SpeculativeConfig, target, drafter, max_new_tokens: int) -> AdaptiveLookahead:
    """lookahead="adaptive" (specpar.planning.adaptive): the policy for SI or DSI on these models' latency profiles,
    from the drafter's acceptance rate where it has one (simulated drafters)."""
    t, d = latency_of(target), latency_of(drafter)
    if t is None or d is None:
        raise ConfigError(
            "lookahead=\"adaptive\" weighs the target's and the drafter model's latency profiles (simulated models, or "
            "real ones given a measured profile: `specpar profile`); with the n-gram proposer alone, give a lookahead"
        )
    a = getattr(model_of(drafter), "acceptance_rate", None)
    return adaptive_lookahead(
        spec.algorithm,
        t,
        d,
        spec.sp_degree or 1,
        max_lookahead=max(1, min(DEFAULT_MAX_LOOKAHEAD, max_new_tokens - 1)),
        dedicated_cursor=spec.dedicated_cursor,
        prior=DEFAULT_PRIOR if a is None else a,
    )


def check_tree_processors(spec: SpeculativeConfig, processors) -> None:
    """Token trees are drafted and verified on raw rows: refuse them with logits processors."""
    if spec.tree is not None and processors is not None:
        raise ConfigError(
            "token trees (tree=) do not take logits processors yet (top_k, top_p, min_p, repetition_penalty): drop "
            "them or the tree"
        )


def check_request(prompt, max_new_tokens: int, decoding: Decoding, spec: SpeculativeConfig, target, drafters: list,
                  merged: bool) -> None:  # fmt: skip
    """Refuse up front what this generation cannot do with these models (each check's message says why)."""
    algorithm = ALGORITHMS[spec.algorithm]
    check_tokens(prompt, decoding, target, *(drafters if spec.uses_drafter else ()))
    check_context_window(len(prompt), max_new_tokens, target, *drafters)
    check_tree_processors(spec, decoding.processors)
    merged = merged and spec.uses_drafter  # the n-gram proposer alone drafts with no model
    if merged and spec.tree is None and algorithm.drafts:
        raise ConfigError("several drafters draft only token trees (merge-based): give tree=<k1,...,km>")
    if merged and not drafters and algorithm.drafts:
        raise ConfigError("drafter is an empty list: give at least one drafter to merge")
    if algorithm.drafts and not drafters and spec.uses_drafter:
        what = "a list of drafters, the smallest first (drafter=[M0, M1, ...])" if algorithm.hierarchy else "a drafter"
        raise ConfigError(f"algorithm {spec.algorithm!r} needs {what}")


# -- one generation ------------------------------------------------------------------------------
def run_generation(
    prompt: Sequence[int],
    target,
    drafter,
    spec: SpeculativeConfig,
    runtime: RuntimeConfig,
    decoding: Decoding,
    max_new_tokens: int,
    *,
    stream: Callable[[list[int]], None] | None = None,
    stopping=None,
    ready_made: bool | None = None,
) -> GenerationResult:
    """One generation of ``spec.algorithm`` on ``target`` and ``drafter`` (models, whose servers are made for it, or
    Pools, whose servers are reused; a list of them, the smallest first, for HSD or for merged token trees).

    runtime: its ``name`` must be set. stream: called with each run of newly verified tokens. stopping: a
    :class:`specpar.core.stopping.Stopping`. ready_made: the servers outlive this generation (default: when Pools
    are given), so their Ray actors are kept. Not safe to call at once from several threads on the same Pools (an
    Engine queues its requests).
    """
    if not isinstance(spec, SpeculativeConfig):
        raise ConfigError(f"spec must be a SpeculativeConfig, got {type(spec).__name__}")
    if runtime.name is None:
        raise ConfigError("the runtime's name must be set (virtual, threads or ray)")
    algorithm = ALGORITHMS[spec.algorithm]
    merged = isinstance(drafter, (list, tuple)) and not algorithm.hierarchy  # several drafters' trees, merged
    drafters = list(drafter) if isinstance(drafter, (list, tuple)) else [] if drafter is None else [drafter]
    if ready_made is None:
        ready_made = isinstance(target, Pool) or any(isinstance(d, Pool) for d in drafters)
    drafters = fit_drafters(model_of(target), drafters)  # rows that differ from the target's only by padding
    check_request(prompt, max_new_tokens, decoding, spec, target, drafters, merged)
    spec = resolve(spec, target, drafters if algorithm.hierarchy else drafters[0] if drafters else None, len(prompt))
    if algorithm.drafts and not algorithm.hierarchy and spec.uses_drafter:
        check_drafter_faster(target, drafters[0])
    policy = None
    if spec.lookahead == "adaptive" and algorithm.drafts:
        policy = adaptive_policy(spec, target, drafters[0] if drafters and spec.uses_drafter else None, max_new_tokens)
        spec = spec.replace(lookahead=policy.candidates[-1])
    pools = make_pools(algorithm, spec, target, drafters, merged)
    rt = make_runtime(runtime, list(pools.values()), ready_made)
    job = Job(rt, pools, list(prompt), max_new_tokens, decoding, spec, stream, stopping, policy)
    # on the virtual clock the collector stays paused until the result is made (collector_paused's docstring)
    with collector_paused(runtime.name == "virtual"), rt:
        result = algorithm.run(job)
    result.left_running = tuple(getattr(rt, "left_running", ()))
    lost = getattr(rt, "lost", ())  # replicas a runtime lost during the generation (Ray)
    if lost:
        result.replicas_lost = tuple(x.server for x in lost)
        result.time_lost_ms = sum(x.lost_ms for x in lost)
    return result


def make_pools(algorithm: Algorithm, spec: SpeculativeConfig, target, drafters: list, merged: bool = False):
    """The pools the algorithm runs on, by name, drafters first (at a tie on the virtual clock, drafts are seen
    first). merged: the drafters' token trees are merged into one drafter server."""
    pools: dict[str, Pool] = {}
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
        pool = Pool(source.servers[:n], name)
        pool.model = model_of(source)  # what the servers were made from
        return pool
    if not hasattr(source, "server"):
        raise ConfigError(
            f"the {name} must be a model (with .server(name), e.g. a SimulatedModel) or a Pool of servers, got "
            f"{type(source).__name__}"
        )
    return Pool([source.server(f"{name}{i}") for i in range(n)], name)
