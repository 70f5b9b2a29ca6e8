"""``Engine``: models loaded once, their servers and a runtime, serving many requests at once.

    with Engine(target, drafter, sp_degree=2) as engine:
        result = engine.generate("def fib(n):", SamplingParams(max_tokens=64, stop=["\\n\\n"]))
        for piece in engine.stream("Once upon a time", SamplingParams(temperature=0.8, top_p=0.9)):
            print(piece, end="")

An engine makes its processing units once (each a target server and a drafter server, one per level for HSD; each
server keeps its KV cache across requests). The scheduler (:mod:`specpar.scheduling`) gives each request units of its
own: alone, DSI on as many as help it; under load fewer replicas, then SI, then non-SI, changed at safe points.
What happens to one request is :mod:`specpar.entrypoints.requests`.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterator, Mapping

from specpar.algorithms.checks import check_context_window, check_model
from specpar.backends.loading import LoadConfig
from specpar.backends.vocabulary import fit_drafters
from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.config import speculative_config as with_changes
from specpar.core.errors import ConfigError, SamplingDefaultWarning
from specpar.core.params import SAMPLING_FIELDS, SamplingParams
from specpar.core.results import GenerationResult
from specpar.entrypoints.requests import Requests, check_stream, listed, one_prompt, sampling_params
from specpar.entrypoints.streaming import stream_pieces
from specpar.planning.load import POLICIES
from specpar.runtimes import Pool
from specpar.runtimes.base import model_of
from specpar.runtimes.capacity import check_servers
from specpar.scheduling import LoadMetrics
from specpar.scheduling.units import make_units, servers_of_units, unit_count

log = logging.getLogger(__name__)


class Engine:
    """Loaded models, their servers and a runtime, for many requests (see the module docstring).

    What the command line and the server call: :meth:`generate`, :meth:`stream`, :meth:`load_metrics`,
    :meth:`reset`, :meth:`close` (or ``with``), :meth:`prompt_ids`, :meth:`check_length`, :meth:`threads_for`,
    :meth:`auto`; and read: ``spec`` (each request's defaults), ``sp_degree``, ``runtime``, ``runtime_config``,
    ``policy``, ``units``, ``targets`` and ``drafters`` (Pools), ``all`` (every server), ``target_model``,
    ``drafter_model``, ``tokenizer``, ``end_of_text``, ``real``, ``closed``.

    target, drafter: models (SimulatedModel, TransformersModel, LlamaModel), ready-made Pools of servers, GGUF files
        or transformers directories / hub ids, or neither (the default pair). drafter: a list, the smallest first,
        for HSD (or to merge token trees); None for non-SI.
    speculative_config: each request's default :class:`SpeculativeConfig` (or vLLM's shape of it); its fields may
        also be keywords. ``sp_degree`` is also the number of target servers made (default: a Pool's size, else 2
        for real models and 4 for simulated ones); a request may use fewer.
    runtime: "virtual", "threads", "ray" or a :class:`RuntimeConfig` (default threads for real models, virtual for
        simulated ones); its fields may be keywords, ``runtime_options=`` the runtime's own keyword arguments.
    units: processing units (default: sp_degree + 1 with a drafter, else sp_degree); real models: the cores or
        devices the servers may use at once. units=1: one unit of every server, one request at a time.
    policy: how requests share the units (:mod:`specpar.planning.load`): "adaptive" (default) or one fixed option
        for every request: "dsi", "si", "nonsi".
    keep_actors: Ray: keep each server's actor for the next request (killed at close() when the engine made them).
    options: the configs' fields as keywords (SpeculativeConfig's, RuntimeConfig's,
        :class:`~specpar.backends.loading.LoadConfig`'s: ``backend=``, ``devices=``, ``dtype=``, ``max_model_len=``,
        ``exact=``), and ``profile=``: the machine profile ``algorithm="auto"`` predicts from (a MachineProfile or
        its JSON file; :mod:`specpar.prediction.auto`).
    """

    def __init__(
        self,
        target=None,
        drafter=None,
        *,
        speculative_config: SpeculativeConfig | Mapping | None = None,
        runtime: str | RuntimeConfig | None = None,
        units: int | None = None,
        policy: str = "adaptive",
        keep_actors: bool = True,
        **options,
    ):
        options = dict(options)
        profile = options.pop("profile", None)
        load, runtime_options = LoadConfig.take(options), options.pop("runtime_options", None)
        spec_fields, runtime_fields, _ = split_options(options)
        spec = with_changes(speculative_config, spec_fields)
        runtime_config = RuntimeConfig.coerce(runtime, runtime_options, **runtime_fields)
        if policy not in POLICIES:
            raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self._owns_servers = not isinstance(target, Pool)
        if target is None or isinstance(target, (str, os.PathLike)):
            target, drafter = load.load(target, drafter)
        target, drafter = _checked(target, fit_drafters(target, drafter))
        load.check_mode(model_of(target), [model_of(d) for d in listed(drafter)])
        self.real = model_of(target).real
        sp_degree = spec.sp_degree or (len(target) if isinstance(target, Pool) else 2 if self.real else 4)
        runtime_config = runtime_config.replace(name=runtime_config.name or ("threads" if self.real else "virtual"))
        self.target_model = model_of(target)
        self.drafter_model = model_of(drafter[-1] if isinstance(drafter, list) and drafter else drafter)
        self.policy = policy
        ready_made = isinstance(target, Pool) or any(isinstance(d, Pool) for d in listed(drafter))
        n = unit_count(units, sp_degree, drafter is not None, ready_made)
        targets, drafters = servers_of_units(n, sp_degree)
        check_servers(runtime_config, targets, drafters * len(listed(drafter)))  # before any is made (a thread each)
        self.targets, self.drafters = self._servers(target, drafter, targets, drafters, load)
        self.units = make_units(self.targets, self.drafters, n)
        self.spec = spec.replace(sp_degree=sp_degree)  # each request's defaults
        self.runtime_config = runtime_config
        self._requests = Requests(self.targets, self.drafters, self.units, runtime_config, self.spec, policy,
                                  keep_actors)  # fmt: skip
        self._requests.profile = profile
        if self.spec.algorithm == "auto":  # its chooser (and the machine's profile, measured if need be) made now,
            try:  # not inside the first requests
                self._requests.auto()
            except BaseException:
                self.close()
                raise
        self.tokenizer = self._requests.tokenizer  # the target's (None: token ids only)
        self._warned_sampling = False  # the one SamplingDefaultWarning (_note_default_sampling)
        if log.isEnabledFor(logging.INFO):
            for s in self.all:
                log.info("server %s on %s", s.name, s.device or runtime_config.name)

    def _servers(self, target, drafter, targets: int, drafters: int, load: LoadConfig):
        """The target Pool and the drafters (a Pool, a Pool per level for HSD or merged trees, or None): Pools given
        as they are; models' servers made on their devices."""
        target_devices, drafter_devices = load.placement(self.target_model, self.drafter_model)

        def pool(source, n: int, name: str, devices) -> Pool:
            if isinstance(source, Pool):
                return source
            return Pool(source.servers(n, devices, name, load.max_model_len), name, model=source)

        if isinstance(drafter, list):  # HSD's levels (or merged drafters), the smallest first
            drafters = [pool(m, drafters, f"level{i}", drafter_devices) for i, m in enumerate(drafter)]
        else:
            drafters = None if drafter is None else pool(drafter, drafters, "drafter", drafter_devices)
        return pool(target, targets, "target", target_devices), drafters

    # -- what is read ----------------------------------------------------------------------------
    @property
    def sp_degree(self) -> int:
        """The most target servers a request's DSI verifies on at once."""
        return self.spec.sp_degree

    @property
    def runtime(self) -> str:
        """The runtime's name: "virtual", "threads" or "ray"."""
        return self.runtime_config.name

    @property
    def end_of_text(self) -> frozenset[int]:
        """The ids that end the target's text (stop a request unless it ignores them)."""
        return self._requests.end_of_text

    @end_of_text.setter
    def end_of_text(self, ids) -> None:
        self._requests.end_of_text = frozenset(ids)

    @property
    def closed(self) -> bool:
        return self._requests.gate.closed

    @property
    def all(self) -> list:
        """Every server the engine owns."""
        return self.targets.servers + [s for p in listed(self.drafters) for s in p.servers]

    # -- requests ------------------------------------------------------------------------------
    def generate(
        self,
        prompts,
        params: SamplingParams | None = None,
        *,
        speculative_config: SpeculativeConfig | Mapping | None = None,
        stream=None,
        **options,
    ) -> GenerationResult | list[GenerationResult]:
        """One result for one prompt (text, or token ids), a list of results for a list of prompts, in order.

        params: the request's SamplingParams (or its fields as keywords); with a list of prompts, one for all or one
        per prompt (as vLLM's LLM.generate). The default is vLLM's: it *samples* at temperature 1 (a one-time
        SamplingDefaultWarning says so; ``temperature=0``: the target's greedy tokens). speculative_config (or its
        fields as keywords): this request's speculation over the engine's defaults. stream: called with each run of
        newly verified token ids.

        A list of prompts runs at once, as that many clients' requests sharing the units (:class:`Engine`'s
        ``policy``): taken in order by one thread per unit, or on the virtual clock all arriving at time 0 on one
        shared clock (as ``specpar simulate load`` runs them), so their times do not depend on the threads' timing.
        """
        requests = self._requests
        if isinstance(prompts, Iterator):  # (read once)
            prompts = list(prompts)
        self._note_default_sampling(params, options)
        if one_prompt(prompts):
            spec, params = requests.config(speculative_config, params, options)
            check_stream(stream)
            return requests.one(prompts, params, spec, stream)
        prompts = list(prompts)
        many = isinstance(params, (list, tuple))
        spec, one = requests.config(speculative_config, None if many else params, options)
        check_stream(stream)
        if many:
            if len(params) != len(prompts) or options.keys() & set(SAMPLING_FIELDS):
                raise ConfigError(
                    f"give one SamplingParams per prompt ({len(prompts)}), without sampling keywords; got {len(params)}"
                )
            each = [sampling_params(p, {}) for p in params]
        else:
            each = [one] * len(prompts)
        ids = [requests.prompt_ids(p) for p in prompts]  # every prompt checked before any runs
        return requests.many(ids, each, spec, stream)

    def stream(
        self,
        prompt,
        params: SamplingParams | None = None,
        *,
        speculative_config=None,
        cancel: threading.Event | None = None,
        **options,
    ) -> Iterator:
        """The output as it is verified: text pieces where the target has a tokenizer, else lists of token ids
        (:func:`~specpar.entrypoints.streaming.stream_pieces`); closing the iterator early, or setting ``cancel``
        from any thread, ends the generation. Arguments as :meth:`generate`'s."""
        self._note_default_sampling(params, options)
        spec, params = self._requests.config(speculative_config, params, options)
        ids = self._requests.prompt_ids(prompt)
        return (yield from stream_pieces(self._requests, ids, params, spec, cancel))

    def _note_default_sampling(self, params, options) -> None:
        """Warn once per engine when a request leaves its temperature to SamplingParams' default (1: it samples)."""
        if params is not None or "temperature" in options or self._warned_sampling:
            return
        self._warned_sampling = True
        warnings.warn(
            "this Engine request has no SamplingParams and no temperature: it samples at temperature 1 (vLLM's "
            "SamplingParams default), whereas generate() and the command line are greedy unless given a temperature; "
            "pass SamplingParams(temperature=0) (or temperature=0) for the target's greedy tokens",
            SamplingDefaultWarning,
            stacklevel=3,
        )

    def prompt_ids(self, prompt) -> list[int]:
        """A prompt (text, or token ids) as token ids; a ConfigError for anything else, or an empty one."""
        return self._requests.prompt_ids(prompt)

    def check_length(self, prompt_len: int, max_tokens: int) -> None:
        """Refuse a prompt and output longer than the models' context windows, before any work."""
        check_context_window(prompt_len, max_tokens, self.target_model, self.drafter_model)

    def threads_for(self, algorithm: str, uses_drafter: bool = True, sp_degree: int | None = None) -> int:
        """torch threads per forward pass of a request of ``algorithm`` on ``sp_degree`` target servers (default:
        the engine's; :meth:`Requests.threads_for`)."""
        return self._requests.threads_for(algorithm, uses_drafter, sp_degree)

    def auto(self, profile=None):
        """``algorithm="auto"``'s chooser for this engine (:class:`specpar.prediction.auto.Auto`), made on first use
        (``profile``: a MachineProfile at hand, when the engine was given none)."""
        return self._requests.auto(profile)

    def load_metrics(self) -> LoadMetrics:
        """Requests running and waiting, units in use and per request, output tokens and goodput
        (:class:`specpar.scheduling.LoadMetrics`), for an exporter."""
        return self._requests.scheduler.metrics()

    # -- lifetime --------------------------------------------------------------------------------
    def reset(self) -> None:
        """Empty every server's cache (the next request starts with a prefill), the Ray actors' too, once the
        requests running have finished (new ones wait)."""
        with self._requests.gate.alone():
            for s in self.all:
                s.reset()
            if self.runtime == "ray":
                from specpar.runtimes.ray_actors import reset_kept

                reset_kept(self.all)

    def close(self) -> None:
        """Refuse further requests (after those running) and free the servers' caches."""
        with self._requests.gate.alone(close=True):
            for s in self.all:
                s.reset()
            if self.runtime == "ray" and self._owns_servers:
                from specpar.runtimes.ray_actors import release_kept

                release_kept(self.all)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Engine({self.target_model!r}, {len(self.targets)} target server(s), {self.runtime})"


def _checked(target, drafter):
    """The target and the drafter(s) as models or Pools (a ConfigError for anything else); a list of drafters as a
    list."""
    if isinstance(drafter, (list, tuple)):
        return check_model("target", target), [check_model("drafter", d) for d in drafter]
    return check_model("target", target), None if drafter is None else check_model("drafter", drafter)
