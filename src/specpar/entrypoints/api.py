"""``generate``: the one-call Python entry point, in the spirit of Hugging Face's ``generate``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.errors import ConfigError
from specpar.core.params import SAMPLING_FIELDS, SamplingParams
from specpar.core.results import GenerationResult
from specpar.entrypoints.requests import sampling_params
from specpar.runtimes import Pool
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
    target, drafter: models (e.g. SimulatedModel and its drafter) or ready-made servers as a ``Pool`` (reused across
        generations). For HSD, ``drafter`` is a list M0 < ... < MK-1, the smallest first; for token trees, a list of
        drafters has its trees merged.
    params: the request's :class:`SamplingParams`, or its fields as keywords: ``max_tokens`` (64 by default here;
        ``max_new_tokens`` is its deprecated alias), temperature, seed, top_k, ... Greedy unless a temperature > 0 is
        given, as Hugging Face's ``generate`` (an :class:`Engine` request samples at temperature 1, as vLLM's). A
        seed reproduces on every runtime and for every algorithm (:mod:`specpar.core.decoding`).
    speculative_config: a :class:`SpeculativeConfig` or vLLM's shape of it (``{"method": "dsi",
        "num_speculative_tokens": 5, "sp_degree": 4}``), or its fields as keywords: ``algorithm`` ("nonsi", "si",
        "dsi" (default), "hsd", "hsd-sp"), ``lookahead`` (default Eq. 1's smallest; "auto": the fastest by
        simulation), ``sp_degree`` (default 4 for simulated models, 2 for real ones), ``tree``, ``buffers``, ...
    runtime: "virtual" (a discrete-event clock; the default for simulated models), "threads" (real time; the default
        for real models), "ray" (``pip install 'specpar[ray]'``), or a :class:`RuntimeConfig`; its fields may be
        keywords, and ``runtime_options=`` passes the runtime's own keyword arguments.
    stream: called with each run of newly verified token ids.
    exact (a keyword): llama.cpp's exact mode (True, the default: greedy output bitwise the target's own) or its fast
        mode (False: lossless in distribution); :mod:`specpar.backends.llama.settings`.
    """
    from specpar.entrypoints.engine import Engine  # the engine is built on this module's neighbours

    params, options = _split(params, options)
    drafters = drafter if isinstance(drafter, (list, tuple)) else [drafter]
    keep_actors = any(isinstance(source, Pool) for source in [target, *drafters])
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
    if params is None:  # greedy, 64 tokens unless told
        sampling = {"temperature": 0.0, "max_tokens": DEFAULT_MAX_TOKENS, **sampling}
    return sampling_params(params, sampling), {
        **spec_fields,
        **runtime_fields,
        "runtime_options": runtime_options,
        "exact": exact,
    }
