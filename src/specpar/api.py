"""``generate``: the Python entry point, in the spirit of Hugging Face's ``generate``."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from specpar.algorithms import ALGORITHMS, dsi, hsd, hsd_sp, non_si, si
from specpar.algorithms.hsd_sp import LevelsServer
from specpar.decoding import Decoding
from specpar.errors import ConfigError, SpecparWarning
from specpar.planning import min_lookahead
from specpar.results import GenerationResult
from specpar.runtimes import RUNTIMES, Pool, VirtualRuntime

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


def _runtime(name: str, pools: list, cancel_frees: str):
    return VirtualRuntime(pools, cancel_frees) if name == "virtual" else RUNTIMES[name](pools)


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
    a = getattr(drafter, "acceptance_rate", None)
    if t is None or d is None or a is None:
        raise ConfigError(
            'lookahead="auto" needs both latency profiles and the drafter\'s acceptance rate (a simulated drafter); '
            "for real models run `specpar plan` on a measured profile (`specpar profile`) and pass its lookahead"
        )
    sp = sp_degree if algorithm == "dsi" else 1
    return choose_lookahead(t, d, a, sp, max_new_tokens, algorithm="dsi" if algorithm == "dsi" else "si").lookahead


def generate(
    prompt: Sequence[int],
    target,
    drafter=None,
    *,
    algorithm: str = "dsi",
    max_new_tokens: int = 64,
    lookahead: int | str | None = None,
    sp_degree: int = 4,
    temperature: float = 0.0,
    seed: int = 0,
    runtime: str = "virtual",
    cancel_frees: str = "now",
    buffers: Sequence[int] | None = None,
    stream=None,
    prefill_replicas: bool | None = None,
    dedicated_cursor: bool | None = None,
    tree: Sequence[int] | None = None,
) -> GenerationResult:
    """Generate ``max_new_tokens`` tokens after ``prompt`` exactly as ``target`` would.

    prompt: token ids (non-empty).
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
    temperature: 0 for greedy; > 0 samples, verified losslessly by rejection sampling.
    seed: keys every random draw (sampling only).
    runtime: "virtual" (discrete-event clock, nothing sleeps) or "threads" (real time).
    cancel_frees: virtual clock only: "now" (preemptible servers) or "end".
    buffers: HSD only: T_0 .. T_{K-1}, one per drafter (default: ``lookahead`` or 5 for each);
        for "hsd-sp", T_{K-1} is DSI's lookahead.
    stream: called with each run of newly verified tokens as they are accepted (non-SI, SI, DSI).
    prefill_replicas: DSI only: every target server prefills the prompt at the start, in parallel.
        Default: when the target's TTFT exceeds its TPOT, or its latency is unknown (see prefill_pays_off).
    dedicated_cursor: DSI only: one target server is kept for passes on the verified prefix, and verifications
        covering it do not stand in for them. Default: when verification costs grow with the drafts fed, or are
        unknown (see verification_costs_grow; :mod:`specpar.algorithms.dsi` says why).
    tree: SI and DSI only: a token tree configuration <k1, ..., km> (SpecInfer): each round the drafter expands
        k_i candidates at depth i and the target verifies every node in one pass; ``lookahead`` is then m.
        ``drafter`` may then be a list of drafters whose trees are merged (specpar.models.merged).
    """
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if runtime not in RUNTIMES:
        raise ConfigError(f"runtime must be one of {tuple(RUNTIMES)}, got {runtime!r}")
    if isinstance(sp_degree, bool) or not isinstance(sp_degree, int) or sp_degree < 1:
        raise ConfigError(f"sp_degree must be an integer >= 1, got {sp_degree!r}")
    if not isinstance(temperature, (int, float)) or math.isnan(temperature) or temperature < 0:
        raise ConfigError(f"temperature must be >= 0 (0 means greedy), got {temperature!r}")
    drafters = drafter if isinstance(drafter, (list, tuple)) else [drafter]
    check_context_window(len(prompt), max_new_tokens, target, *[d for d in drafters if d is not None])
    if tree is not None:
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
            Decoding(float(temperature), seed),
            runtime,
            cancel_frees,
            algorithm,
            sp_degree,
            stream,
        )
    if algorithm != "nonsi":
        if drafter is None:
            raise ConfigError(f"algorithm {algorithm!r} needs a drafter")
        check_drafter_faster(target, drafter)
        if tree is not None:
            lookahead = len(tree)
        elif lookahead is None:
            lookahead = default_lookahead(target, drafter, sp_degree)
        elif lookahead == "auto":
            lookahead = auto_lookahead(target, drafter, algorithm, sp_degree, max_new_tokens)
    decoding = Decoding(float(temperature), seed)
    n_targets = sp_degree if algorithm == "dsi" else 1
    target_pool = _pool(target, n_targets, "target")
    pools = [target_pool]
    if algorithm != "nonsi":
        drafter_pool = _pool(drafter, 1, "drafter")
        pools.insert(0, drafter_pool)  # at a tie on the virtual clock, drafts are seen first
    rt = _runtime(runtime, pools, cancel_frees)
    with rt:
        if algorithm == "nonsi":
            return non_si(rt, target_pool, prompt, max_new_tokens, decoding, stream)
        if algorithm == "si":
            return si(rt, target_pool, drafter_pool, prompt, max_new_tokens, lookahead, decoding, stream, tree=tree)
        if prefill_replicas is None:
            prefill_replicas = prefill_pays_off(target)
        if dedicated_cursor is None:
            dedicated_cursor = verification_costs_grow(target)
        return dsi(
            rt,
            target_pool,
            drafter_pool,
            prompt,
            max_new_tokens,
            lookahead,
            decoding,
            stream,
            prefill_all=prefill_replicas,
            dedicated_cursor=dedicated_cursor,
            tree=tree,
        )


def tree_arguments(tree, algorithm: str, drafter, target, prompt_len: int):
    """Check a token tree request: (widths, the drafter: one model, or a MergedDrafters server over a list)."""
    from specpar.models.merged import MergedDrafters
    from specpar.trees import check_tree

    if algorithm not in ("si", "dsi"):
        raise ConfigError(f"token trees (tree=) work with algorithm 'si' or 'dsi', not {algorithm!r}")
    source = getattr(target.servers[0], "model", None) if isinstance(target, Pool) else target
    window = getattr(source, "context_window", None)
    widths = check_tree(tree, room=None if window is None else window - prompt_len)
    if isinstance(drafter, (list, tuple)):
        if not drafter:
            raise ConfigError("drafter is an empty list: give at least one drafter to merge")
        servers = [_pool(d, 1, f"drafter{i}").servers[0] for i, d in enumerate(drafter)]
        drafter = Pool([MergedDrafters(servers)], "drafter")
    return widths, drafter


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
    rt = _runtime(runtime, pools, cancel_frees)
    with rt:
        if algorithm == "hsd-sp":
            return hsd_sp(rt, pools[1], pools[0], prompt, max_new_tokens, buffers[-1], decoding, stream)
        return hsd(rt, pools, prompt, max_new_tokens, list(buffers), decoding, stream)
