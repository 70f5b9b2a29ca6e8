"""``generate``: the one-call Python entry point, in the spirit of Hugging Face's ``generate``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.errors import ConfigError
from specpar.core.params import SAMPLING_FIELDS, SamplingParams
from specpar.core.results import GenerationResult
from specpar.runtimes.virtual import collector_paused

DEFAULT_MAX_TOKENS = 64  # generate()'s (SamplingParams' own default is vLLM's, 16)


def generate(
    prompt: Sequence[int] | str,
    target,
    drafter=None,
    *,
    params: SamplingParams | None = None,
    speculative_config: SpeculativeConfig | Mapping | None = None,
    runtime: str | RuntimeConfig | None = None,
    stream=None,
    **options,
) -> GenerationResult:
    """Generate up to ``max_tokens`` tokens after ``prompt`` exactly as ``target`` would: one request on a one-off
    :class:`specpar.Engine` (an Engine loads once and serves many).

    prompt: token ids (non-empty), or text when the target has a tokenizer.
    target, drafter: models with ``.server(name)`` (e.g. SimulatedModel and its drafter), or ready-made servers as
        a ``Pool`` (their caches and weights are reused across generations; a target pool must hold at least
        sp_degree servers for DSI). For HSD, ``drafter`` is a list of drafters M0 < ... < MK-1, the smallest
        first; for token trees, a list of drafters has its trees merged.
    params: the request's :class:`SamplingParams`; or give its fields as keywords: ``max_tokens`` (64 by default
        here; ``max_new_tokens``, Hugging Face's name, is a deprecated alias), temperature, seed, top_k, top_p,
        min_p, repetition_penalty, stop, stop_token_ids, ignore_eos, coupling. Greedy unless a temperature > 0 is
        given, as Hugging Face's ``generate`` (an :class:`Engine` request, like vLLM's, samples at temperature 1
        when none is given). A seed makes the sampling reproduce on every runtime and for every algorithm (the
        Gumbel coupling, unless ``coupling`` says otherwise; :mod:`specpar.core.decoding`).
    speculative_config: a :class:`SpeculativeConfig` or vLLM's shape of it (``{"method": "dsi",
        "num_speculative_tokens": 5, "sp_degree": 4}``); or give its fields as keywords: ``algorithm`` ("nonsi",
        "si", "dsi" (default), "hsd", "hsd-sp"), ``lookahead`` (k; default Eq. 1's smallest for sp_degree; "auto":
        the fastest by simulation of the models' latencies and acceptance rate), ``sp_degree`` (target servers DSI
        verifies on at once; default 4 for simulated models, 2 for real ones), ``tree``, ``buffers``,
        ``prefill_replicas``, ``dedicated_cursor`` (see :class:`SpeculativeConfig`).
    runtime: "virtual" (a discrete-event clock, nothing sleeps; the default for simulated models), "threads" (real
        time, one thread per server; the default for real models), "ray" (each server a Ray actor in its own
        process: ``pip install 'specpar[ray]'``), or a :class:`RuntimeConfig`; its fields may also be given as
        keywords (``cancel_frees``, ``link_ms``, ``call_timeout_s``, ``cpus_per_server``, ``placement``, ...), and
        ``runtime_options=`` passes the runtime's own keyword arguments (e.g. Ray's ``{"local_pools": ()}``).
    stream: called with each run of newly verified token ids as they are accepted.
    exact (a keyword): llama.cpp's exact mode (True; the default: every algorithm's greedy output is the target's
        own, bitwise) or its fast mode (False: llama.cpp's fastest settings, lossless in distribution); see
        :mod:`specpar.backends.llama.settings`. Models given loaded must run in that mode.
    """
    from specpar.entrypoints.engine import Engine  # the engine is built on this module's neighbours

    params, options = _split(params, options)
    keep_actors = _is_pool(target) or _is_pool(drafter)
    # one request: all the servers its configuration needs (units=1), no other to share them with
    engine = Engine(target, drafter, speculative_config=speculative_config, runtime=runtime, units=1,
                    keep_actors=keep_actors, **options)  # fmt: skip
    with collector_paused(engine.runtime == "virtual"), engine:  # closed with the collector still paused
        return engine.generate(prompt, params, stream=stream)


def _split(params: SamplingParams | None, options: dict) -> tuple[SamplingParams, dict]:
    """generate()'s keywords split into the request's SamplingParams (``params``, or its fields, max_tokens 64 by
    default and greedy) and the Engine's keywords (the configs' fields, ``runtime_options``, ``exact``)."""
    options = dict(options)
    runtime_options, exact = options.pop("runtime_options", None), options.pop("exact", None)
    if "max_new_tokens" in options:
        warnings.warn("generate(max_new_tokens=) is deprecated: give max_tokens=", DeprecationWarning, stacklevel=3)
        if "max_tokens" in options:
            raise ConfigError("give max_tokens= (max_new_tokens= is its deprecated alias), not both")
        options["max_tokens"] = options.pop("max_new_tokens")
    spec_fields, runtime_fields, sampling = split_options(options, sampling=SAMPLING_FIELDS)
    if params is None:
        params = SamplingParams.from_kwargs(**{"temperature": 0.0, "max_tokens": DEFAULT_MAX_TOKENS, **sampling})
    elif sampling:
        raise ConfigError(
            f"give the sampling parameters either as params= or as keywords, not both: {sorted(sampling)}"
        )
    return params, {**spec_fields, **runtime_fields, "runtime_options": runtime_options, "exact": exact}


def _is_pool(source) -> bool:
    from specpar.runtimes import Pool

    if isinstance(source, (list, tuple)):
        return any(isinstance(s, Pool) for s in source)
    return isinstance(source, Pool)
