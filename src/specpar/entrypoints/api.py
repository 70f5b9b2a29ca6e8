"""``generate``: the Python entry point, in the spirit of Hugging Face's ``generate``."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.params import SamplingParams
from specpar.core.results import GenerationResult
from specpar.core.trees import tree_depth
from specpar.planning import min_lookahead
from specpar.runtimes import RUNTIMES, Pool, VirtualRuntime
from specpar.runtimes.virtual import collector_paused
from specpar.spec import ALGORITHMS, dsi, hsd, hsd_sp, non_si, si
from specpar.spec.hsd_sp import LevelsServer

log = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD = 5


def _latency(source):
    """The LatencyProfile of a model or of a ready-made Pool's servers, or None when unknown."""
    if isinstance(source, Pool):
        source = source.servers[0]
    return getattr(source, "latency", None)


def check_context_window(prompt_len: int, max_new_tokens: int, *sources) -> None:
    """Refuse up front a generation longer than the smallest context window among the models (where they have one)."""
    windows = []
    for source in sources:
        if isinstance(source, Pool):
            source = getattr(source.servers[0], "model", source.servers[0])
        window = getattr(source, "context_window", None)
        if window is not None:
            windows.append((window, getattr(source, "name", "a model")))
    if windows:
        window, name = min(windows)
        if prompt_len + max_new_tokens > window:
            raise ConfigError(
                f"the prompt has {prompt_len} tokens and {max_new_tokens} new ones are asked for, but {name}'s "
                f"context window is {window} tokens: shorten the prompt or lower max_new_tokens"
            )


def _model(source):
    """The model behind a model or a ready-made Pool (its first server's model, or the server itself)."""
    if isinstance(source, Pool):
        return getattr(source.servers[0], "model", source.servers[0])
    return source


def check_tokens(prompt, decoding: Decoding, target, *drafters) -> None:
    """Refuse up front a prompt that is not token ids (integers >= 0, at most the target's ``max_token_id`` where it
    has one), and a drafter whose vocabulary size differs from the target's when sampling (rejection sampling
    compares distributions over one vocabulary)."""
    if isinstance(prompt, (str, bytes)) or not hasattr(prompt, "__len__"):
        raise ConfigError(f"the prompt must be a list of token ids, got {type(prompt).__name__}")
    limit = getattr(_model(target), "max_token_id", None)
    for i, t in enumerate(prompt):
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 or (limit is not None and t > limit):
            where = f"integers in [0, {limit}]" if limit is not None else "integers >= 0"
            raise ConfigError(f"the prompt's token ids must be {where}; position {i} holds {t!r}")
    vocab = getattr(_model(target), "vocab_size", None)
    if decoding.greedy or vocab is None:
        return
    for d in drafters:
        size = getattr(_model(d), "vocab_size", None)
        if size is not None and size != vocab:
            raise ConfigError(
                f"the drafter's vocabulary has {size} tokens but the target's has {vocab}: sampling needs one "
                "vocabulary (greedy decoding does not)"
            )


def _runtime(name: str, pools: list, cancel_frees: str, options: dict | None = None, ready_made: bool = False):
    """The runtime ``name`` over ``pools``; options: its keyword arguments (e.g. Ray's cpus_per_server).
    ready_made: the servers outlive this generation (a ready-made Pool, an Engine's), so their Ray actors are kept
    for later runs."""
    if name == "virtual":
        return VirtualRuntime(pools, cancel_frees, **(options or {}))
    if name == "ray":  # the drafter in the driver: no round trip per draft call (measured in the README)
        options = {"reuse_actors": ready_made, "local_pools": ("drafter",), **(options or {})}
    return RUNTIMES[name](pools, **(options or {}))


def check_drafter_faster(target, drafter) -> None:
    """Warn when the drafter is slower than the target (the paper's Assumption 2)."""
    t, d = _latency(target), _latency(drafter)
    if t is None or d is None:
        return
    if d.tpot_ms > t.tpot_ms or d.ttft_ms > t.ttft_ms:
        warnings.warn(
            f"the drafter ({d.tpot_ms:g} ms/token) is slower than the target ({t.tpot_ms:g} ms/token): "
            "DSI's guarantee of never being slower than non-SI needs a drafter at least as fast as the "
            "target (the paper's Assumption 2); results stay lossless",
            SpecparWarning,
            stacklevel=3,
        )


def prefill_pays_off(target) -> bool:
    """DSI's default for prefilling every target replica at the start: when TTFT > TPOT, or when unknown.

    A cold replica pays TTFT on its first verification; prefilling all replicas in parallel at once
    keeps DSI never slower than non-SI when TTFT > TPOT, and costs ~0.1% when TTFT = TPOT
    (benchmarks/theorem_grid.py).
    """
    lat = _latency(target)
    return lat is None or lat.ttft_ms > lat.tpot_ms


def verification_costs_grow(target) -> bool:
    """DSI's default for keeping a target server for passes on the cursor: when verifying k drafts costs more
    than a pass on the verified prefix (per_token_ms > 0, as on CPUs), or when the cost is unknown."""
    lat = _latency(target)
    return lat is None or lat.per_token_ms > 0


def default_lookahead(target, drafter, sp_degree: int) -> int:
    """The smallest lookahead satisfying Eq. 1 when both latencies are known and one does, else 5."""
    t, d = _latency(target), _latency(drafter)
    if t is None or d is None or d.tpot_ms <= 0 or t.tpot_ms <= 0:
        return DEFAULT_LOOKAHEAD
    try:
        return min_lookahead(t.tpot_ms, d.tpot_ms, sp_degree, per_token_ms=t.per_token_ms)
    except ConfigError:  # reading a token costs the target more than drafting it: no lookahead keeps up
        return DEFAULT_LOOKAHEAD


def auto_lookahead(target, drafter, algorithm: str, sp_degree: int, max_new_tokens: int) -> int:
    """lookahead="auto": the fastest by simulation (specpar.experiments.lookahead_choice), for models whose
    latencies and acceptance rate are known (simulated drafters, or models given a measured latency)."""
    from specpar.experiments.lookahead_choice import choose_lookahead

    t, d = _latency(target), _latency(drafter)
    model = getattr(drafter, "model", None) or drafter.servers[0].model if isinstance(drafter, Pool) else drafter
    a = getattr(model, "acceptance_rate", None)
    if t is None or d is None or a is None:
        raise ConfigError(
            'lookahead="auto" needs both latency profiles and the drafter\'s acceptance rate (a simulated drafter); '
            "for real models run `specpar plan` on a measured profile (`specpar profile`) and pass its lookahead"
        )
    sp = sp_degree if algorithm == "dsi" else 1
    return choose_lookahead(t, d, a, sp, max_new_tokens, algorithm="dsi" if algorithm == "dsi" else "si").lookahead


def generate(
    prompt: Sequence[int] | str,
    target,
    drafter=None,
    *,
    algorithm: str = "dsi",
    max_new_tokens: int = 64,
    lookahead: int | str | None = None,
    sp_degree: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    runtime: str | None = None,
    cancel_frees: str | Mapping[str, str] = "now",
    buffers: Sequence[int] | None = None,
    stream=None,
    prefill_replicas: bool | None = None,
    dedicated_cursor: bool | None = None,
    runtime_options: dict | None = None,
    tree: Sequence[int] | None = None,
    params: SamplingParams | None = None,
    **sampling,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt`` exactly as ``target`` would: one request on a
    one-off :class:`specpar.entrypoints.engine.Engine` (an Engine loads once and serves many).

    prompt: token ids (non-empty), or text when the target has a tokenizer.
    target, drafter: models with ``.server(name)`` (e.g. SimulatedModel and its drafter), or ready-made
        servers as a ``Pool`` (e.g. loaded transformers servers whose caches and weights are reused across
        generations); a target pool must hold at least sp_degree servers for DSI.
    algorithm: "nonsi" (target alone), "si" (speculative inference), "dsi", "hsd" (hierarchical:
        ``drafter`` is then a list of drafters M0 < ... < MK-1, the smallest first) or "hsd-sp"
        (HSD whose target verifies on sp_degree servers while the levels below draft on, as in DSI).
    lookahead: draft tokens per verification (k). Default: Eq. 1's smallest for sp_degree (see
        specpar.planning.min_lookahead). "auto": the algorithm's fastest, predicted by simulation from the models'
        latencies and acceptance rate (specpar.experiments.lookahead_choice; `specpar plan` shows the candidates).
    sp_degree: target servers DSI may use at once (SI and non-SI use one).
    temperature, seed, and the keywords of :class:`SamplingParams` (top_k, top_p, min_p, repetition_penalty,
        stop, stop_token_ids, ignore_eos): the request's sampling and stopping (``max_new_tokens`` is its
        max_tokens), and ``coupling``: "rejection" (rejection sampling, the papers'; a seed gives the same tokens
        on every runtime for non-SI, SI and HSD, and on the virtual clock for all) or "gumbel" (drafter-invariant:
        the same tokens for a seed on every runtime and for every algorithm, non-SI's; a lower acceptance rate;
        see :mod:`specpar.core.decoding`); or all of them at once as ``params``.
    runtime: "virtual" (discrete-event clock, nothing sleeps), "threads" (real time, one thread per server) or
        "ray" (real time, each server a Ray actor in its own process: ``pip install 'specpar[ray]'``; a local Ray
        starts on first use unless this process already joined one, see specpar.runtimes.ray_cluster). Default:
        virtual for simulated models, threads for real ones.
    cancel_frees: virtual clock only: "now" (preemptible servers) or "end", or {pool name ("target",
        "drafter"): mode}.
    buffers: HSD only: T_0 .. T_{K-1}, one per drafter (default: ``lookahead`` or 5 for each);
        for "hsd-sp", T_{K-1} is DSI's lookahead.
    stream: called with each run of newly verified tokens as they are accepted.
    prefill_replicas: DSI only: every target server prefills the prompt at the start, in parallel.
        Default: when the target's TTFT exceeds its TPOT, or its latency is unknown (see prefill_pays_off).
    dedicated_cursor: DSI only: one target server is kept for passes on the verified prefix, and verifications
        covering it do not stand in for them. Default: when verification costs grow with the drafts fed, or are
        unknown (see verification_costs_grow; :mod:`specpar.spec.dsi` says why).
    runtime_options: keyword arguments of the runtime, e.g. ``{"cpus_per_server": 2, "placement": "SPREAD"}``
        for Ray (see specpar.runtimes.ray_runtime.RayRuntime) or ``{"call_timeout_s": 60}`` for threads.
        On Ray, the actors of servers given as a ready-made Pool are kept for later generations, and the drafter
        runs on a thread of this process unless ``{"local_pools": ()}`` puts it in an actor too.
    tree: SI and DSI only: a token tree configuration <k1, ..., km> (SpecInfer): each round the drafter expands
        k_i candidates at depth i and the target verifies every node in one pass; ``lookahead`` is then m.
        Or "best:B" (a :class:`specpar.core.trees.BestFirst`): each round the drafter grows B nodes best-first by its
        path probability (a chain where it is sure, branches where it is not); ``lookahead`` is then B.
        ``drafter`` may then be a list of drafters whose trees are merged (specpar.backends.merged).
    """
    from specpar.entrypoints.engine import Engine  # the engine builds on this module's helpers

    if params is None:
        if "max_tokens" in sampling:
            raise ConfigError("give max_new_tokens= to generate() (max_tokens is its name in SamplingParams)")
        params = SamplingParams.from_kwargs(max_tokens=max_new_tokens, temperature=temperature, seed=seed, **sampling)
        sampling = {}
    engine = Engine(
        target,
        drafter,
        sp_degree=sp_degree,
        runtime=runtime,
        cancel_frees=cancel_frees,
        buffers=buffers,
        prefill_replicas=prefill_replicas,
        dedicated_cursor=dedicated_cursor,
        runtime_options=runtime_options,
        keep_actors=isinstance(target, Pool) or isinstance(drafter, Pool),
    )
    with collector_paused(engine.runtime == "virtual"), engine:  # closed with the collector still paused
        return engine.generate(
            prompt, params, algorithm=algorithm, lookahead=lookahead, stream=stream, tree=tree, **sampling
        )


def generate_on(
    prompt: Sequence[int],
    target,
    drafter,
    *,
    algorithm: str,
    decoding: Decoding,
    max_new_tokens: int,
    lookahead: int | str | None,
    sp_degree: int,
    runtime: str,
    cancel_frees: str | Mapping[str, str] = "now",
    buffers: Sequence[int] | None = None,
    stream=None,
    stopping=None,
    prefill_replicas: bool | None = None,
    dedicated_cursor: bool | None = None,
    runtime_options: dict | None = None,
    ready_made: bool | None = None,
    tree: Sequence[int] | None = None,
) -> GenerationResult:
    """One generation on ``target`` and ``drafter`` (models, whose servers are made for it, or Pools, whose
    servers are reused): the algorithm on a runtime of its own. Arguments as :func:`generate`'s; stopping: a
    :class:`specpar.core.stopping.Stopping`. Not safe to call at once from several threads on the same Pools
    (:class:`specpar.entrypoints.engine.Engine` queues its requests). ready_made: the servers outlive this generation (default:
    when Pools are given), see :func:`_runtime`."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if runtime not in RUNTIMES:
        raise ConfigError(f"runtime must be one of {tuple(RUNTIMES)}, got {runtime!r}")
    if isinstance(sp_degree, bool) or not isinstance(sp_degree, int) or sp_degree < 1:
        raise ConfigError(f"sp_degree must be an integer >= 1, got {sp_degree!r}")
    drafters = drafter if isinstance(drafter, (list, tuple)) else [drafter]
    if ready_made is None:
        ready_made = isinstance(target, Pool) or any(isinstance(d, Pool) for d in drafters)
    check_tokens(prompt, decoding, target, *[d for d in drafters if d is not None])
    check_context_window(len(prompt), max_new_tokens, target, *[d for d in drafters if d is not None])
    if tree is not None:
        if decoding.processors is not None:
            raise ConfigError(
                "token trees (tree=) do not take logits processors yet (top_k, top_p, min_p, "
                "repetition_penalty): drop them or the tree"
            )
        tree, drafter = tree_arguments(tree, algorithm, drafter, target, len(prompt))
    elif algorithm in ("si", "dsi") and isinstance(drafter, (list, tuple)):
        raise ConfigError("several drafters draft only token trees (merge-based): give tree=<k1,...,km>")
    if algorithm in ("hsd", "hsd-sp"):
        return _generate_hsd(
            prompt,
            target,
            drafter,
            buffers,
            lookahead,
            max_new_tokens,
            decoding,
            runtime,
            cancel_frees,
            algorithm,
            sp_degree,
            stream,
            stopping,
            runtime_options,
            ready_made,
        )
    if algorithm != "nonsi":
        if drafter is None:
            raise ConfigError(f"algorithm {algorithm!r} needs a drafter")
        check_drafter_faster(target, drafter)
        if tree is not None:
            lookahead = tree_depth(tree)
        elif lookahead is None:
            lookahead = default_lookahead(target, drafter, sp_degree)
            log.info("lookahead %d: the smallest that keeps %d target server(s) busy (Eq. 1)", lookahead, sp_degree)
        elif lookahead == "auto":
            lookahead = auto_lookahead(target, drafter, algorithm, sp_degree, max_new_tokens)
            log.info("lookahead %d: the fastest %s's simulation predicts (lookahead='auto')", lookahead, algorithm)
        else:
            log.info("lookahead %s (given)", lookahead)
    n_targets = sp_degree if algorithm == "dsi" else 1
    target_pool = _pool(target, n_targets, "target")
    pools = [target_pool]
    if algorithm != "nonsi":
        drafter_pool = _pool(drafter, 1, "drafter")
        pools.insert(0, drafter_pool)  # at a tie on the virtual clock, drafts are seen first
    rt = _runtime(runtime, pools, cancel_frees, runtime_options, ready_made)
    if algorithm == "nonsi":
        return _run(rt, lambda: non_si(rt, target_pool, prompt, max_new_tokens, decoding, stream, stopping))
    if algorithm == "si":
        return _run(
            rt,
            lambda: si(
                rt, target_pool, drafter_pool, prompt, max_new_tokens, lookahead, decoding, stream, stopping, tree=tree
            ),
        )
    if prefill_replicas is None:
        prefill_replicas = prefill_pays_off(target)
    if dedicated_cursor is None:
        dedicated_cursor = verification_costs_grow(target)
    return _run(
        rt,
        lambda: dsi(
            rt,
            target_pool,
            drafter_pool,
            prompt,
            max_new_tokens,
            lookahead,
            decoding,
            stream,
            stopping,
            prefill_all=prefill_replicas,
            dedicated_cursor=dedicated_cursor,
            tree=tree,
        ),
    )


def _run(rt, algorithm) -> GenerationResult:
    """Run ``algorithm()`` on ``rt`` and close it as soon as the output is complete: tasks no longer needed are
    abandoned at once, and worker threads still in a cancelled call (a stalled server) are reported, not awaited;
    so are the replicas the runtime lost (Ray: killed or stalled actors, whose calls were redone elsewhere)."""
    with rt:
        result = algorithm()
    result.left_running = tuple(getattr(rt, "left_running", ()))
    lost = getattr(rt, "lost", ())  # replicas a runtime lost during the generation (Ray)
    if lost:
        result.replicas_lost = tuple(x.server for x in lost)
        result.time_lost_ms = sum(x.lost_ms for x in lost)
    return result


def tree_arguments(tree, algorithm: str, drafter, target, prompt_len: int):
    """Check a token tree request: (its shape, the drafter: one model, or a MergedDrafters server over a list)."""
    from specpar.backends.merged import MergedDrafters
    from specpar.core.trees import check_tree

    if algorithm not in ("si", "dsi"):
        raise ConfigError(f"token trees (tree=) work with algorithm 'si' or 'dsi', not {algorithm!r}")
    source = getattr(target.servers[0], "model", None) if isinstance(target, Pool) else target
    window = getattr(source, "context_window", None)
    shape = check_tree(tree, room=None if window is None else window - prompt_len)
    if isinstance(drafter, (list, tuple)):
        if not drafter:
            raise ConfigError("drafter is an empty list: give at least one drafter to merge")
        servers = [_pool(d, 1, f"drafter{i}").servers[0] for i, d in enumerate(drafter)]
        drafter = Pool([MergedDrafters(servers)], "drafter")
    return shape, drafter


def _pool(source, n: int, name: str) -> Pool:
    """``n`` servers named ``name``: fresh ones from a model, or the first ``n`` of a ready-made Pool."""
    if isinstance(source, Pool):
        if len(source) < n:
            raise ConfigError(f"the {name} pool has {len(source)} server(s) but {n} are needed (sp_degree)")
        return Pool(source.servers[:n], name)
    return Pool([source.server(f"{name}{i}") for i in range(n)], name)


def _generate_hsd(
    prompt,
    target,
    drafters,
    buffers,
    lookahead,
    max_new_tokens,
    decoding,
    runtime,
    cancel_frees,
    algorithm="hsd",
    sp_degree=1,
    stream=None,
    stopping=None,
    runtime_options=None,
    ready_made=False,
):
    """HSD over the stack drafters[0] < ... < drafters[-1] < target, one server each (one drafter: SI);
    "hsd-sp": the drafters as one LevelsServer, DSI on top with sp_degree target servers."""
    if drafters is not None and not isinstance(drafters, (list, tuple)):
        drafters = [drafters]
    if not drafters:
        raise ConfigError("algorithm 'hsd' needs a list of drafters, the smallest first (drafter=[M0, M1, ...])")
    if buffers is None:
        buffers = [lookahead or DEFAULT_LOOKAHEAD] * len(drafters)
    if algorithm == "hsd-sp":
        if len(buffers) != len(drafters):
            raise ConfigError(
                f"HSD needs one buffer size T_i per drafter level: {len(drafters)} drafters, "
                f"got {len(buffers)} buffer sizes {list(buffers)}"
            )
        levels = LevelsServer([_pool(m, 1, f"level{i}").servers[0] for i, m in enumerate(drafters)], buffers[:-1])
        pools = [Pool([levels], "levels"), _pool(target, sp_degree, "target")]
    else:
        pools = [_pool(m, 1, f"level{i}") for i, m in enumerate(list(drafters) + [target])]
    rt = _runtime(runtime, pools, cancel_frees, runtime_options, ready_made)
    if algorithm == "hsd-sp":
        return _run(
            rt, lambda: hsd_sp(rt, pools[1], pools[0], prompt, max_new_tokens, buffers[-1], decoding, stream, stopping)
        )
    return _run(rt, lambda: hsd(rt, pools, prompt, max_new_tokens, list(buffers), decoding, stream, stopping))
