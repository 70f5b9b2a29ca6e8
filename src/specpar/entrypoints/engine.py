"""``Engine``: models loaded once, their servers and a runtime, serving many requests at once.

    with Engine(target, drafter, sp_degree=2) as engine:
        result = engine.generate("def fib(n):", SamplingParams(max_tokens=64, stop=["\\n\\n"]))
        for piece in engine.stream("Once upon a time", SamplingParams(temperature=0.8, top_p=0.9)):
            print(piece, end="")

An engine owns ``units`` processing units (default: sp_degree + 1, the servers one DSI request uses), each with a
target server and a drafter server (one per level for HSD), made once: real models keep their weights (shared by
the servers of one model on one device) and each server its KV cache across requests. A scheduler
(:mod:`specpar.scheduling`) gives each request units of its own, so no two requests ever share a cache: alone, a
request runs DSI on as many units as help it; as more requests arrive their shares shrink (fewer target replicas,
then SI, then non-SI) and grow back when they leave, changing only at safe points (:class:`Engine`'s ``policy``).
Servers given as ready-made Pools form one unit: requests take turns on them.

The runtime: the threads runtime for real models (wall time), the virtual clock for simulated ones (each request
on a clock of its own).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from specpar.algorithms.checks import check_context_window
from specpar.backends.cpu_threads import SharedThreads, cpu_cores, model_uses_torch
from specpar.backends.loading import choose_backend, load_pair
from specpar.backends.vocabulary import fit_drafters
from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.errors import ConfigError, SamplingDefaultWarning
from specpar.core.numbers import is_int
from specpar.core.params import SAMPLING_FIELDS, SamplingParams
from specpar.core.query import Query
from specpar.core.results import GenerationResult, overhead
from specpar.core.stopping import Stopping, TextStream, detokenize, end_of_text_ids
from specpar.planning.load import POLICIES, Option, ShareCurve, fixed
from specpar.runtimes import Pool
from specpar.runtimes.base import model_of
from specpar.runtimes.capacity import check_servers
from specpar.runtimes.virtual import collector_paused
from specpar.scheduling import LoadMetrics, Scheduler, Unit
from specpar.scheduling.request import Request

log = logging.getLogger(__name__)

MAX_SPECS = 1024  # requests' SpeculativeConfigs an engine keeps made (each a set of changed fields)


def is_real(source) -> bool:
    """Whether a model (or a Pool of servers) runs real forward passes (transformers, llama.cpp), not a simulation."""
    if isinstance(source, (list, tuple)):
        return any(is_real(s) for s in source)
    if isinstance(source, Pool):
        return hasattr(source.servers[0], "forward_log")
    return hasattr(source, "module_on") or hasattr(source, "tokenizer") and hasattr(source, "weights")


def uses_torch(source) -> bool:
    """Whether a model (or a Pool of servers) computes with torch (its thread count is torch's)."""
    if isinstance(source, (list, tuple)):
        return any(uses_torch(s) for s in source)
    if isinstance(source, Pool):
        return hasattr(source.servers[0], "module")
    return model_uses_torch(source)


def unit_count(units: int | None, sp_degree: int, drafts: bool = True) -> int:
    """The processing units an Engine of models makes for ``units`` (None: sp_degree + 1 with a drafter, else
    sp_degree); 0 for units=1: one unit of every server."""
    if units == 1:
        return 0
    if units is None:
        return sp_degree + 1 if drafts else sp_degree
    return units


def servers_of_units(n: int, sp_degree: int) -> tuple[int, int]:
    """(target servers, drafter servers per drafter model) of ``n`` units (0: one unit of sp_degree targets)."""
    return (n, n) if n else (sp_degree, 1)


class Engine:
    """Loaded models, their servers and a runtime, for many requests (see the module docstring).

    target, drafter: models (SimulatedModel and its drafter, TransformersModel, LlamaModel), ready-made Pools of
        servers, GGUF files or local directories / hub ids of transformers models, or neither (the default pair,
        `specpar[models]`).
        drafter: a list of models, the smallest first, for HSD (or to merge their token trees); None for non-SI.
    speculative_config: each request's default :class:`SpeculativeConfig` (or vLLM's shape of it, ``{"method":
        "dsi", "num_speculative_tokens": 5, "sp_degree": 4}``); its fields may also be given as keywords
        (``algorithm=``, ``lookahead=``, ``sp_degree=``, ...). ``sp_degree`` is also the number of target servers
        the engine makes (default: a Pool's size, else 2 for real models and 4 for simulated ones); a request may
        use fewer.
    runtime: a name ("virtual", "threads", "ray") or a :class:`RuntimeConfig`, default threads for real models and
        virtual for simulated ones; its fields may also be given as keywords (``cancel_frees=``,
        ``call_timeout_s=``, ...), and ``runtime_options`` passes the runtime's own keyword arguments.
    devices: real models: the drafter on the first, target servers round-robin over the others.
    max_tokens: real models: the longest sequence a server holds (prompt + output), for the memory check.
    keep_actors: Ray: keep each server's actor for the engine's next request (killed at close() when the engine
        made the servers; servers given as Pools keep theirs for whoever owns them).
    backend: for models given as paths or the default pair: "llama" (GGUF files on llama.cpp, CPU) or
        "transformers"; default: llama for GGUF files on the CPU when llama-cpp-python is installed.
    units: processing units (default: sp_degree + 1 with a drafter, else sp_degree), each with a target and a
        drafter server; requests run at once on units of their own. Real models: set it to the cores or devices
        the servers may use at once (each server then runs one torch thread per core it has). units=1: one unit of
        sp_degree target servers and a drafter, one request at a time on all of them (as ready-made Pools are).
    policy: how requests share the units (:mod:`specpar.planning.load`): "adaptive" (default: each request's
        fastest option on its share, shares chosen for the most tokens per second in all), or one fixed option
        for every request: "dsi" (each waits for its whole DSI share), "si" (one unit each), "nonsi".
    """

    def __init__(
        self,
        target=None,
        drafter=None,
        *,
        speculative_config: SpeculativeConfig | Mapping | None = None,
        runtime: str | RuntimeConfig | None = None,
        runtime_options: Mapping | None = None,
        devices: Sequence[str] | None = None,
        dtype: str | None = None,
        max_tokens: int = 4096,
        keep_actors: bool = True,
        units: int | None = None,
        policy: str = "adaptive",
        backend: str | None = None,
        **options,
    ):
        spec_fields, runtime_fields, _ = split_options(options)
        spec = speculative_config_of(speculative_config, spec_fields)
        runtime_config = RuntimeConfig.coerce(runtime, runtime_options, **runtime_fields)
        self._owns_servers = not isinstance(target, Pool)
        if target is None or isinstance(target, str) or hasattr(target, "__fspath__"):
            target, drafter = self._load(target, drafter, devices, dtype, backend)
        drafter = fit_drafters(target, drafter)  # rows that differ from the target's only by padding
        check_model("target", target)
        for d in drafter if isinstance(drafter, (list, tuple)) else [] if drafter is None else [drafter]:
            check_model("drafter", d)
        self.real = is_real(target)
        self.torch = uses_torch([target, drafter])  # torch's threads are set per request (threads_for)
        sp_degree = spec.sp_degree or (len(target) if isinstance(target, Pool) else 2 if self.real else 4)
        self.spec = spec.replace(sp_degree=sp_degree)  # each request's defaults
        self.runtime_config = runtime_config.replace(
            name=runtime_config.name or ("threads" if self.real else "virtual")
        )
        self.keep_actors = keep_actors
        self.target_model = model_of(target)
        self.drafter_model = model_of(drafter[-1] if isinstance(drafter, (list, tuple)) and drafter else drafter)
        self.tokenizer = getattr(self.target_model, "tokenizer", None)
        self.end_of_text = end_of_text_ids(self.target_model)
        if not devices:  # where the models are: the drafter's device first, then the target's
            first = self.drafter_model if self.drafter_model is not None else self.target_model
            devices = list(dict.fromkeys(getattr(m, "device", "cpu") for m in (first, self.target_model)))
        target_devices = devices[1:] if len(devices) > 1 else devices
        if policy not in POLICIES:
            raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy = policy
        n = self._unit_count(units, target, drafter, sp_degree)
        targets, drafters = servers_of_units(n, sp_degree)
        levels = len(drafter) if isinstance(drafter, (list, tuple)) else 0 if drafter is None else 1
        check_servers(self.runtime_config, targets, drafters * levels)  # before any is made (a thread or process each)
        self.targets = self._servers(target, targets, "target", target_devices, max_tokens)
        if isinstance(drafter, (list, tuple)):  # HSD's levels (or merged drafters), the smallest first
            self.drafters = [
                self._servers(m, drafters, f"level{i}", devices[:1], max_tokens) for i, m in enumerate(drafter)
            ]
        else:
            self.drafters = None if drafter is None else self._servers(drafter, drafters, "drafter", devices[:1],
                                                                        max_tokens)  # fmt: skip
        self.units = self._units(n)
        self.scheduler = Scheduler(self.units)
        self._curves: dict = {}
        self._specs: dict = {}  # a request's changed fields -> its SpeculativeConfig (see _request_config)
        # requests run at once; reset() and close() wait for them (a plain lock: a request takes it twice)
        self._lock = threading.Lock()
        self._gate = threading.Condition(self._lock)
        self._active = 0
        self._exclusive = False
        # torch's threads only for torch models; llama.cpp servers here (on Ray their actors set their own)
        self._threads = SharedThreads(self.torch, self.all if self.runtime != "ray" else [])
        self.closed = False
        self._warned_sampling = False  # the one SamplingDefaultWarning (_note_default_sampling)
        if log.isEnabledFor(logging.INFO):
            for s in self.all:
                log.info("server %s on %s", s.name, getattr(s, "device", self.runtime))

    @property
    def sp_degree(self) -> int:
        """The most target servers a request's DSI verifies on at once."""
        return self.spec.sp_degree

    @property
    def runtime(self) -> str:
        """The runtime's name: "virtual", "threads" or "ray"."""
        return self.runtime_config.name

    # -- loading -------------------------------------------------------------------------------
    @staticmethod
    def _load(target, drafter, devices, dtype, backend=None):
        backend = choose_backend(backend, target, drafter, devices)
        if backend == "llama":
            devices = list(devices or ["cpu"])
        else:
            from specpar.backends.transformers_model import available_devices

            devices = list(devices) if devices else available_devices()
        target_device = devices[1] if len(devices) > 1 else None
        return load_pair(target, drafter, devices[0], dtype, target_device=target_device, backend=backend)

    def _servers(self, source, n: int, name: str, devices, max_tokens: int) -> Pool:
        if isinstance(source, Pool):
            return source
        if hasattr(source, "servers") and self.real:  # transformers: placed on devices, checked to fit
            pool = Pool(source.servers(n, devices, name, max_tokens), name)
        else:
            pool = Pool([source.server(f"{name}{i}") for i in range(n)], name)
        pool.model = source  # what the servers were made from (lookahead="auto" reads its acceptance rate)
        return pool

    def _unit_count(self, units, target, drafter, sp_degree: int) -> int:
        """Units of one target and one drafter server each; 0: one unit of every server (Pools, or units=1)."""
        if units is not None and not is_int(units, 1, 1024):
            raise ConfigError(f"units must be an integer in [1, 1024], got {units!r}")
        if any(isinstance(x, Pool) for x in (target, *(drafter if isinstance(drafter, (list, tuple)) else [drafter]))):
            if units not in (None, 1):
                raise ConfigError("servers given as Pools form one processing unit: give models for units > 1")
            return 0
        return unit_count(units, sp_degree, drafter is not None)

    def _units(self, n: int) -> list[Unit]:
        """The processing units: one per target server, each with its drafter server(s); one for ready-made Pools."""
        levels = self.drafters if isinstance(self.drafters, list) else []
        drafters = self.drafters if isinstance(self.drafters, Pool) else None
        if n == 0:
            return [Unit(0, self.targets.servers, drafters.servers if drafters else [], [p.servers for p in levels])]
        return [
            Unit(
                i,
                [self.targets.servers[i]],
                [drafters.servers[i]] if drafters else [],
                [[p.servers[i]] for p in levels],
            )
            for i in range(n)
        ]

    @property
    def all(self) -> list:
        """Every server the engine owns."""
        drafters = self.drafters if isinstance(self.drafters, list) else [self.drafters] if self.drafters else []
        return self.targets.servers + [s for p in drafters for s in p.servers]

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

        params: the request's SamplingParams (or give its fields as keywords); with a list of prompts, one
        SamplingParams for all or a list of them, one per prompt (as vLLM's LLM.generate). The default is vLLM's:
        it *samples* at temperature 1 (where ``generate()`` and the command line are greedy unless a temperature is
        given, and the server samples as OpenAI's does); a request with neither params nor a ``temperature=`` gets a
        one-time SamplingDefaultWarning saying so (``temperature=0``: the target's greedy tokens). speculative_config (or
        its fields as keywords: ``algorithm=``, ``lookahead=``, ``tree=``, ``sp_degree=`` up to the engine's, ...):
        this request's speculation, over the engine's defaults. stream: called with each run of newly verified
        token ids (with a list of prompts, from the thread of whichever request verified them).

        A list of prompts runs at once, as that many requests from as many clients: the scheduler shares the
        processing units among them (:class:`Engine`'s ``policy``). On the threads and Ray runtimes they are taken
        in order by one thread per unit; on the virtual clock (simulated models) they all arrive at time 0 on one
        shared virtual clock (as ``specpar simulate --load`` runs requests), so that each one's share, and so its
        times, do not depend on the threads' timing.
        """
        if isinstance(prompts, Iterator):  # (read once)
            prompts = list(prompts)
        self._note_default_sampling(params, options)
        if _one_prompt(prompts):
            spec, params = self._request_config(speculative_config, params, options)
            check_stream(stream)
            return self._request(prompts, params, spec, stream)
        prompts = list(prompts)
        many = isinstance(params, (list, tuple))
        spec, one = self._request_config(speculative_config, None if many else params, options)
        check_stream(stream)
        if many:
            if len(params) != len(prompts) or options.keys() & set(SAMPLING_FIELDS):
                raise ConfigError(
                    f"give one SamplingParams per prompt ({len(prompts)}), without sampling keywords; got {len(params)}"
                )
            each = [_params(p, {}) for p in params]
        else:
            each = [one] * len(prompts)
        ids = [self.prompt_ids(p) for p in prompts]  # every prompt checked before any runs
        return self._many(ids, each, spec, stream)

    def _many(self, prompts: list[list[int]], params: list[SamplingParams], spec, stream) -> list[GenerationResult]:
        """Requests at once (see :meth:`generate`): at most one per processing unit in the scheduler at a time (more
        would only wait there), taken in order; the first error (by prompt) is raised once the others have
        ended, and no request starts after it."""
        n = len(prompts)
        if self.runtime == "virtual" and n > 1:
            return self._burst(prompts, params, spec, stream)
        workers = min(n, len(self.units))
        if workers <= 1:
            return [self._request(p, q, spec, stream) for p, q in zip(prompts, params)]
        results: list = [None] * n
        failed: dict[int, BaseException] = {}
        order = iter(range(n))
        lock = threading.Lock()

        def work() -> None:
            while not failed:
                with lock:
                    i = next(order, None)
                if i is None:
                    return
                try:
                    results[i] = self._request(prompts[i], params[i], spec, stream)
                except BaseException as exc:  # raised in the caller's thread below
                    failed[i] = exc

        threads = [threading.Thread(target=work, name="specpar-request", daemon=True) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failed:
            raise failed[min(failed)]
        return results

    def stream(
        self,
        prompt,
        params: SamplingParams | None = None,
        *,
        speculative_config=None,
        cancel: threading.Event | None = None,
        **options,
    ) -> Iterator:
        """The output as it is verified: text pieces where the target has a tokenizer (joined, exactly the
        result's text; never any of a stop string), else lists of token ids. The generation runs on a thread
        of its own; closing the iterator early ends it, and so does setting ``cancel`` (from any thread: the
        generation ends at its next verified tokens, the iterator then ends and returns None). Arguments as
        :meth:`generate`'s."""
        self._note_default_sampling(params, options)
        spec, params = self._request_config(speculative_config, params, options)
        ids = self.prompt_ids(prompt)
        pieces: queue.Queue = queue.Queue()
        abandoned = threading.Event()
        text = TextStream(self.tokenizer, ids, *_texts(params)) if self.tokenizer is not None else None
        done: list[GenerationResult] = []

        def on_tokens(tokens):
            if abandoned.is_set() or (cancel is not None and cancel.is_set()):
                raise _Abandoned
            piece = text.push(tokens) if text is not None else list(tokens)
            if piece:
                pieces.put(piece)

        def work():
            try:
                done.append(self._request(ids, params, spec, on_tokens))
                if text is not None:
                    rest = text.finish()
                    if rest:
                        pieces.put(rest)
                pieces.put(_END)
            except _Abandoned:
                pieces.put(_END)
            except BaseException as exc:  # handed to the reader
                pieces.put(exc)

        worker = threading.Thread(target=work, name="specpar-stream", daemon=True)
        worker.start()
        try:
            while (item := pieces.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            abandoned.set()
            worker.join()
        return done[0] if done else None

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

    def _request_config(self, speculative_config, params, options) -> tuple[SpeculativeConfig, SamplingParams]:
        """A request's SpeculativeConfig (the engine's, with the request's changes) and SamplingParams."""
        spec_fields, runtime_fields, sampling = split_options(options, sampling=SAMPLING_FIELDS)
        if runtime_fields:
            raise ConfigError(f"the runtime is the engine's: {sorted(runtime_fields)} cannot change per request")
        if speculative_config is None and spec_fields:  # the engine's defaults with a few fields changed: made once
            try:
                key = tuple(spec_fields.items())
                spec = self._specs.get(key)
            except TypeError:  # an unhashable value (a list): made each time
                key = spec = None
            if spec is None:
                spec = self._spec(None, spec_fields)
                if key is not None:
                    if len(self._specs) >= MAX_SPECS:
                        self._specs.clear()
                    self._specs[key] = spec
        else:
            spec = self._spec(speculative_config, spec_fields)
        return spec, _params(params, sampling)

    def _spec(self, speculative_config, spec_fields: dict) -> SpeculativeConfig:
        base = self.spec if speculative_config is None else SpeculativeConfig.coerce(speculative_config)
        spec = base.for_request(**spec_fields)
        if spec.sp_degree is None:
            spec = spec.replace(sp_degree=self.sp_degree)
        if spec.sp_degree > self.sp_degree:
            raise ConfigError(f"sp_degree {spec.sp_degree} is more than the engine's {self.sp_degree} target servers")
        return spec

    def prompt_ids(self, prompt) -> list[int]:
        if type(prompt) is list and prompt:  # the common case, without the abstract classes' checks
            return list(prompt)
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ConfigError("a text prompt needs a target with a tokenizer: give token ids")
            ids = self.target_model.encode(prompt)
        elif isinstance(prompt, (bytes, Mapping)) or not isinstance(prompt, Iterable):
            raise ConfigError(f"the prompt must be text or a list of token ids, got {type(prompt).__name__}")
        else:
            ids = list(prompt)
        if not ids:
            raise ConfigError("prompt is empty: give at least one token (the target needs a prefix to continue)")
        return ids

    def stopping(self, prompt_ids: Sequence[int], params: SamplingParams) -> Stopping | None:
        """The request's stop conditions: end of text (unless ignore_eos), its stop ids and strings."""
        ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.end_of_text))
        if not ids and not params.stop:
            return None
        return Stopping(ids, params.stop, self.tokenizer, prompt_ids, params.min_tokens)

    def _request(self, prompt, params: SamplingParams, spec: SpeculativeConfig, stream) -> GenerationResult:
        if self.closed:
            raise ConfigError("this engine is closed")
        request, spec = self._make(prompt, params, spec, stream, self.scheduler, self.runtime_config)
        # on the virtual clock the collector stays paused until the result is made (collector_paused)
        self._enter()
        try:
            result = self._run(request, request.prompt, spec)
        finally:
            self._leave()
        return self._finished(result, request.prompt, params)

    def _make(self, prompt, params: SamplingParams, spec: SpeculativeConfig, stream, scheduler: Scheduler,
              runtime: RuntimeConfig) -> tuple[Request, SpeculativeConfig]:  # fmt: skip
        """A request on ``scheduler`` and ``runtime`` (not yet run), and its speculation (lookahead "auto" chosen)."""
        ids = self.prompt_ids(prompt)
        if spec.uses_drafter and self.drafters is None:
            raise ConfigError(f"algorithm {spec.algorithm!r} needs a drafter: give the engine one")
        curve = self.curve(spec, params.max_tokens)
        if spec.lookahead == "auto" and curve.option(curve.max_units).ms_per_token is None:
            spec = spec.replace(lookahead=self.auto_lookahead(spec, params.max_tokens))  # (or its clear error)
        decoding = params.decoding(len(ids), self.end_of_text)
        query = Query(ids, params.max_tokens, decoding, self.stopping(ids, params), stream)
        request = Request(scheduler, query, spec, curve, runtime, self.keep_actors)
        return request, spec

    def _finished(self, result: GenerationResult, ids: list[int], params: SamplingParams) -> GenerationResult:
        """``result`` with its text, logged."""
        if self.tokenizer is not None:
            result.text = detokenize(self.tokenizer, ids, result.tokens, *_texts(params))
        if log.isEnabledFor(logging.INFO):
            log.info(
                "%s: %d prompt + %d new tokens in %.1f ms (%s), finish %s, acceptance rate %.2f, mean acceptance "
                "length %.2f, lookahead %s",
                result.algorithm,
                len(ids),
                len(result.tokens),
                result.time_ms,
                result.runtime,
                result.finish_reason,
                result.acceptance_rate,
                result.mean_acceptance_length,
                result.lookahead,
            )
        return result

    def _burst(self, prompts: list[list[int]], params: list[SamplingParams], spec, stream) -> list[GenerationResult]:
        """The virtual clock's requests at once: every one arrives at time 0 on one shared clock, on a scheduler of
        the engine's units of its own (as ``specpar simulate --load`` runs them), while no other request runs; each
        result's times are those under this load. The first error (by prompt) is raised once every request ended."""
        from specpar.runtimes.shared_clock import SharedClock

        clock = SharedClock()
        scheduler = Scheduler(self.units, clock)
        runtime = self.runtime_config.replace(options={**self.runtime_config.options, "clock": clock})
        made = [self._make(p, q, spec, stream, scheduler, runtime) for p, q in zip(prompts, params)]
        results: list = [None] * len(made)
        failed: dict[int, BaseException] = {}

        def one(i: int) -> None:
            try:
                results[i] = made[i][0].run()
            except BaseException as exc:  # raised in the caller's thread below
                failed[i] = exc

        with self._alone(), collector_paused(True):
            if self.closed:
                raise ConfigError("this engine is closed")
            for i in range(len(made)):
                clock.spawn(one, i)
            clock.run()
        if failed:
            raise failed[min(failed)]
        for (request, _), result, p in zip(made, results, params):
            result.overhead, result.queue_ms = None, request.queue_ms
            self._finished(result, request.prompt, p)
        return results

    def _run(self, request: Request, ids: list[int], spec: SpeculativeConfig) -> GenerationResult:
        """``request`` run; its result with the time outside forward passes (``overhead``) and waiting for units
        (``queue_ms``)."""
        if not self.real:
            with collector_paused(self.runtime == "virtual"):
                result = request.run()
                result.overhead = None  # no forward log here to measure from
        else:
            local = self.runtime != "ray"  # on Ray the forward passes run in the actors
            marks = {id(s): len(s.forward_log) for s in self.all} if local else None
            with self._threads(self.threads_for(spec.algorithm, spec.uses_drafter)):
                t0 = time.perf_counter()
                result = request.run()
                t1 = time.perf_counter()
            if local:  # the forward passes of the servers this request ran on
                intervals = [iv for s in request.servers for iv in s.forward_log[marks[id(s)] :]]
                result.overhead = overhead(intervals, t0, t1)
            else:  # on Ray the forward passes run in the actors: no forward log here to measure from
                result.overhead = None
        result.queue_ms = request.queue_ms
        return result

    # -- the scheduler ----------------------------------------------------------------------------
    def curve(self, spec: SpeculativeConfig, max_tokens: int) -> ShareCurve:
        """A request's options per share of the units (:mod:`specpar.prediction.shares`), per config and length."""
        key = (spec, min(max_tokens, 100))
        curve = self._curves.get(key)
        if curve is None:
            if len(self.units) == 1:  # ready-made servers: the request's own configuration on all of them
                k = spec.lookahead if isinstance(spec.lookahead, int) else None
                curve = fixed(Option(1, spec.algorithm, spec.sp_degree or 1, k))
            else:
                from specpar.prediction.shares import share_curve

                curve = share_curve(self.policy, spec, self.targets, self.drafters, len(self.units), max_tokens)
            self._curves[key] = curve
        return curve

    def load_metrics(self) -> LoadMetrics:
        """Requests running and waiting, units in use and per request, output tokens and goodput
        (:class:`specpar.scheduling.LoadMetrics`), for an exporter."""
        return self.scheduler.metrics()

    def _enter(self) -> None:
        """A request starts (many may run at once); reset() and close() wait until none runs."""
        with self._lock:
            while self._exclusive:
                self._gate.wait()
            if self.closed:
                raise ConfigError("this engine is closed")
            self._active += 1

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1
            if not self._active and self._exclusive:
                self._gate.notify_all()  # reset() or close() waits for the last request

    @contextmanager
    def _alone(self):
        """No request runs inside (those running finish first; new ones wait)."""
        with self._gate:
            while self._exclusive:
                self._gate.wait()
            self._exclusive = True
            while self._active:
                self._gate.wait()
        try:
            yield
        finally:
            with self._gate:
                self._exclusive = False
                self._gate.notify_all()

    # -- real models: threads and memory ---------------------------------------------------------
    def threads_for(self, algorithm: str, uses_drafter: bool = True) -> int:
        """torch threads per forward pass, so that the servers running at once share the cores without
        oversubscribing them: one unit's worth of cores (on Ray, a server's CPU bundle, as each actor has); with
        ready-made servers (one unit), as before the scheduler: all cores for the one server SI and non-SI run at a
        time, a share of them for DSI's (a drafter model the n-gram proposer leaves idle takes none)."""
        if self.runtime == "ray":
            return max(1, int(self.runtime_config.cpus_per_server))
        if len(self.units) > 1:
            return max(1, cpu_cores() // len(self.units))
        running = self.all if uses_drafter else self.targets.servers
        cpu = [s for s in running if getattr(s, "device", None) == "cpu"]
        busy = len(cpu) if algorithm in ("dsi", "hsd-sp") else 1  # non-SI and SI run one server at a time
        return max(1, cpu_cores() // max(1, busy))

    def check_length(self, prompt_len: int, max_tokens: int) -> None:
        """Refuse a prompt and output longer than the models' context windows, before any work."""
        check_context_window(prompt_len, max_tokens, self.target_model, self.drafter_model)

    def auto_lookahead(self, spec: SpeculativeConfig, max_tokens: int) -> int:
        """lookahead="auto": the fastest by simulation of the models' latencies and acceptance rate."""
        from specpar.prediction.lookahead_choice import auto_lookahead

        k = auto_lookahead(
            self.targets, self.drafters, spec.algorithm, spec.sp_degree, max_tokens, spec.dedicated_cursor
        )
        log.info("lookahead %d: the fastest %s's simulation predicts (lookahead='auto')", k, spec.algorithm)
        return k

    # -- lifetime --------------------------------------------------------------------------------
    def reset(self) -> None:
        """Empty every server's cache (the next request starts with a prefill), the Ray actors' too, once the
        requests running have finished (new ones wait)."""
        with self._alone():
            for s in self.all:
                if hasattr(s, "reset"):
                    s.reset()
            if self.runtime == "ray":
                from specpar.runtimes.ray_actors import reset_kept

                reset_kept(self.all)

    def close(self) -> None:
        """Refuse further requests (after those running) and free the servers' caches."""
        with self._gate:
            self.closed = True
        with self._alone():
            for s in self.all:
                if hasattr(s, "reset"):
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


_END = object()


class _Abandoned(Exception):
    """The reader of a stream stopped reading: the generation ends."""


def speculative_config_of(base, changes) -> SpeculativeConfig:
    return SpeculativeConfig.coerce(base).replace(**changes)


def check_model(role: str, source) -> None:
    """Refuse up front a target or drafter that is neither a model nor a Pool of servers."""
    if not (isinstance(source, Pool) or hasattr(source, "server") or hasattr(source, "servers")):
        raise ConfigError(
            f"the {role} must be a model (e.g. a SimulatedModel, a TransformersModel), a Pool of servers, or a model "
            f"directory; got {type(source).__name__} {source!r:.60}"
        )


def check_stream(stream) -> None:
    if stream is not None and not callable(stream):
        raise ConfigError(f"stream must be a function called with each run of new token ids, got {stream!r:.60}")


def _texts(params: SamplingParams) -> tuple:
    """The stop strings' settings of a request's text: (stop, min_tokens, include_stop_str_in_output)."""
    return params.stop, params.min_tokens, params.include_stop_str_in_output


def _one_prompt(prompts) -> bool:
    if type(prompts) is list:  # the common case, without the abstract classes' checks
        return not prompts or not isinstance(prompts[0], (str, list, tuple))
    if isinstance(prompts, str) or not isinstance(prompts, Iterable):
        return True  # one prompt (prompt_ids refuses what is not one)
    seq = list(prompts) if not isinstance(prompts, Sequence) else prompts
    return len(seq) == 0 or not isinstance(seq[0], (str, list, tuple))


def _params(params: SamplingParams | None, sampling: dict) -> SamplingParams:
    if params is not None and sampling:
        raise ConfigError(
            f"give the sampling parameters either as params= or as keywords, not both: {sorted(sampling)}"
        )
    if params is not None and not isinstance(params, SamplingParams):
        raise ConfigError(f"params must be a SamplingParams, got {type(params).__name__}")
    return params if params is not None else SamplingParams.from_kwargs(**sampling)
