"""What ``specpar generate | bench | profile | serve`` share: loading the models and servers once, checking the
flags before they load, and reading the timings."""

from __future__ import annotations

import dataclasses
import statistics
import sys

from specpar.core.config import SpeculativeConfig, parse_proposer
from specpar.core.errors import ConfigError
from specpar.core.trees import BestFirst, tree_size


def device_names(args) -> list[str] | None:
    """The devices --devices lists (None when not given), refused when it lists none."""
    if args.devices is None:
        return None
    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not names:
        raise ConfigError(f"--devices must name at least one device (cpu, cuda:0, ...), got {args.devices!r}")
    return names


def devices(args) -> list[str]:
    names = device_names(args)
    if backend(args) == "llama":
        return names or ["cpu"]  # checked by the engine: llama.cpp runs on the CPU here
    from specpar.backends.transformers_model import available_devices, check_device

    return available_devices() if names is None else [check_device(d) for d in names]


def backend(args) -> str:
    """The backend the command's models load on (--backend, else the engine's choice for them)."""
    from specpar.backends.loading import choose_backend

    args.backend = choose_backend(getattr(args, "backend", None), args.target, args.drafter, device_names(args))
    return args.backend


def arm(spec: SpeculativeConfig, engine, algorithm: str, **changes) -> SpeculativeConfig:
    """``spec`` for one run of ``algorithm`` on ``engine``: no token tree or proposer for non-SI, at most the engine's
    target servers; for "auto", none of the settings it chooses (the flags' are the other algorithms')."""
    sp = min(spec.sp_degree or engine.sp_degree, engine.sp_degree)
    if algorithm == "auto":
        return spec.for_request(algorithm="auto", sp_degree=sp)
    tree = None if algorithm == "nonsi" else changes.pop("tree", spec.tree)
    proposer = None if algorithm == "nonsi" else changes.pop("proposer", spec.proposer)
    return dataclasses.replace(spec, algorithm=algorithm, tree=tree, proposer=proposer, sp_degree=sp, **changes)


def _spec(args) -> SpeculativeConfig:
    """The command's speculation (the default one for a command without)."""
    return getattr(args, "spec", None) or SpeculativeConfig()


def load_models(args, devs: list[str] | None = None):
    """(target, drafter): the models the flags name, loaded once on the first two devices (no drafter where none
    drafts and none is given: an n-gram proposer alone). A loading error names the flags (--target, not target=)."""
    from specpar.backends.loading import in_flags, load_pair

    devs = devs or devices(args)
    spec = _spec(args)
    drafts = spec.proposer is None or parse_proposer(spec.proposer).uses_drafter
    try:
        return load_pair(args.target, args.drafter, devs[:2], args.dtype, progress=sys.stderr.isatty(),
                         backend=args.backend, with_drafter=drafts, exact=getattr(args, "exact", None))  # fmt: skip
    except ConfigError as exc:
        raise ConfigError(in_flags(str(exc))) from None


def load(args, sp_degree: int, max_model_len: int, models: tuple | None = None, **engine_options):
    """(target, drafter, an Engine with sp_degree target servers, the flags' speculation and runtime, and Engine's
    keywords ``engine_options``); ``models``: the pair already loaded; max_model_len: a server cache's length."""
    devs = devices(args)
    target, drafter = models if models is not None else load_models(args, devs)
    measured_latency(args, target, drafter, sp_degree)  # -k adaptive's costs, before the servers copy them
    spec = dataclasses.replace(_spec(args), sp_degree=sp_degree)
    engine = make_engine(args, spec, target, drafter, devices=devs, max_model_len=max_model_len, **engine_options)
    return target, drafter, engine


def make_engine(args, spec: SpeculativeConfig, target, drafter, **engine_options):
    """An Engine of ``target`` and ``drafter`` (HSD's: a list of one level) with the speculation ``spec`` and the
    flags' runtime and machine profile."""
    from specpar.algorithms.registry import ALGORITHMS
    from specpar.entrypoints.engine import Engine

    hierarchy = spec.algorithm in ALGORITHMS and ALGORITHMS[spec.algorithm].hierarchy
    return Engine(target, [drafter] if hierarchy and drafter is not None else drafter, speculative_config=spec,
                  runtime=getattr(args, "runtime_config", None), profile=getattr(args, "profile", None),
                  **engine_options)  # fmt: skip


def cache_tokens(args, prompt_len: int, sp_degree: int) -> int:
    """The tokens a server's cache must hold for a prompt of ``prompt_len`` tokens and ``-N`` new ones, plus the drafts
    DSI may send ahead (a lookahead or tree per server and the one drafting): sized for the request, not the model's
    4,096 tokens, the caches keep the README's main job under its memory goal."""
    spec = _spec(args)
    k = spec.lookahead if isinstance(spec.lookahead, int) else 16
    if spec.tree is not None:  # every node of a tree takes a cell of the cache
        k = max(k, spec.tree.nodes if isinstance(spec.tree, BestFirst) else tree_size(spec.tree))
    return prompt_len + args.max_tokens + (sp_degree + 1) * k + 16


def check_common(args) -> None:
    """Refuse, before the models load, what the engine would refuse only after: an empty --devices; -k auto (it
    weighs latency profiles that models loaded from files have not); more servers than the runtime can run here; a
    token tree deeper than the target's context window leaves room for after one token; --no-exact on a backend
    without llama.cpp's fast mode."""
    from specpar.backends.loading import check_exact, context_window_of
    from specpar.core.trees import check_tree

    device_names(args)
    spec = _spec(args)
    if spec.lookahead == "auto":
        raise ConfigError(
            "-k auto weighs the models' latency profiles, which real models loaded here do not have: --algorithm "
            "auto chooses the algorithm and lookahead from the machine profile, or -k adaptive re-chooses k as it goes"
        )
    check_servers(args)
    window = context_window_of(args.target) if spec.tree is not None and args.target is not None else None
    if window is not None:
        check_tree(spec.tree, room=window - 1)
    if getattr(args, "exact", None) is False:
        check_exact(False, backend(args))


def check_servers(args) -> None:
    """Refuse, before the models load, more servers than the runtime can run on this machine (a thread or a
    process each: :mod:`specpar.runtimes.capacity`), as the Engine would after loading."""
    from specpar.runtimes.capacity import check_servers as check
    from specpar.scheduling.units import servers_of_units, unit_count

    spec = _spec(args)
    sp = spec.sp_degree or 2  # the Engine's default for real models
    targets, drafters = servers_of_units(unit_count(getattr(args, "units", None), sp), sp)
    runtime = getattr(args, "runtime_config", None)
    if runtime is not None:
        check(runtime.replace(name=runtime.name or "threads"), targets, drafters)


def measured_latency(args, target, drafter, sp_degree: int, prompt_len: int = 128) -> None:
    """-k adaptive on models loaded from files: give them latency profiles from this machine's profile of the pair
    (``--profile FILE``, else specpar's cache, measured on first need) at the threads a pass gets here, so that the
    adaptive lookahead has costs to weigh. Nothing for other lookaheads or models with latency profiles already."""
    spec = getattr(args, "spec", None)
    if spec is None or spec.lookahead != "adaptive":
        return
    if target.latency is not None and (drafter is None or drafter.latency is not None):
        return
    from specpar.backends.cpu_threads import cpu_cores, pass_threads
    from specpar.prediction.machine import load_or_build

    profile = load_or_build(getattr(args, "profile", None), target=target, drafter=drafter)
    units = getattr(args, "units", None) or sp_degree + 1
    threads = pass_threads(cpu_cores(), units, units if spec.algorithm == "dsi" else 1, None)
    target.latency = profile.target.latency_profile(threads, prompt_len)
    if drafter is not None and profile.drafter is not None:
        drafter.latency = profile.drafter.latency_profile(threads, prompt_len)


def task_ms(results, kind: str, server_prefix: str = "") -> list[float]:
    """Durations (ms) of the completed tasks of one kind on servers whose name starts with ``server_prefix``."""
    return [
        r.end_ms - r.start_ms
        for res in results
        for r in res.timeline
        if r.kind == kind and not r.cancelled and r.server.startswith(server_prefix)
    ]


def _ms(x: float) -> str:
    """A duration in ms to two significant digits below 10 ms, whole ms above (0.31, 3, 1234)."""
    return f"{x:.2g}" if x < 10 else f"{x:.0f}"


def why_line(by_algo: dict) -> str | None:
    """Measured forward-pass costs that explain the ratios: decode step, verification pass (SI's), drafter token,
    each to two significant digits (a tiny model's 0.3 ms step printed as "0 ms" beside a ratio of 9.9)."""
    decode = task_ms(by_algo.get("nonsi", []), "verify", "target")
    verify = task_ms(by_algo.get("si", []), "verify", "target")
    drafts = task_ms(by_algo.get("si", []), "draft")
    if not decode or not verify:
        return None
    d, v = statistics.median(decode), statistics.median(verify)
    lookahead = by_algo["si"][0].lookahead
    line = (
        f"measured: target decode step {_ms(d)} ms; target verification pass over up to {lookahead + 1} tokens "
        f"{_ms(v)} ms (= {v / d:.2f} decode steps)"
    )
    if drafts:
        per = statistics.median(drafts) / lookahead
        line += f"; drafter about {_ms(per)} ms/token (c = {per / d:.2f})"
    if v / d > 1.5:
        line += (
            ". Verifying k tokens costs several decode steps on this device (compute-bound, as on a CPU), "
            "so SI gains less than on a GPU and can be slower than non-SI"
        )
    return line


def warn_load() -> None:
    """Say on stderr when the machine is loaded past its cores (wall-time ratios then do not hold)."""
    from specpar.experiments.loop import load_warning

    line = load_warning()
    if line:
        print(f"warning: {line}", file=sys.stderr)
