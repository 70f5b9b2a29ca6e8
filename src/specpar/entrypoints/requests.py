"""An engine's request path, one request or many at once: :class:`~specpar.Engine` makes one :class:`Requests`.

One request: its token ids, a :class:`~specpar.scheduling.request.Request` made from its configuration (the engine's
defaults with its changes, "auto" resolved for its :class:`~specpar.core.query.RequestShape`), the
:class:`~specpar.core.query.Query` that carries the ids down to the algorithm; then its text and a log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager

from specpar.backends.cpu_threads import SharedThreads, busy_servers, cpu_cores, pass_threads
from specpar.core.config import RuntimeConfig, SpeculativeConfig, split_options
from specpar.core.errors import ConfigError
from specpar.core.params import SAMPLING_FIELDS, SamplingParams
from specpar.core.query import Query, RequestShape
from specpar.core.results import GenerationResult, overhead
from specpar.core.stopping import detokenize, end_of_text_ids
from specpar.prediction.shares import Curves, choice_curve
from specpar.runtimes import Pool
from specpar.runtimes.base import model_of
from specpar.runtimes.virtual import collector_paused
from specpar.scheduling import Scheduler, Unit
from specpar.scheduling.request import Request, configure

log = logging.getLogger(__name__)

MAX_SPECS = 1024  # requests' SpeculativeConfigs kept made (each a set of changed fields)


class Gate:
    """Requests run at once; :meth:`alone` waits until none runs and holds new ones back (reset, close, a burst)."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._exclusive = False
        self.closed = False

    @contextmanager
    def request(self):
        """One request runs inside (a ConfigError once closed)."""
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            if self.closed:
                raise ConfigError("this engine is closed")
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if not self._active and self._exclusive:
                    self._cond.notify_all()  # alone() waits for the last request

    @contextmanager
    def alone(self, close: bool = False):
        """No request runs inside (those running finish first; new ones wait). close: none starts after it."""
        with self._cond:
            self.closed = self.closed or close
            while self._exclusive:
                self._cond.wait()
            self._exclusive = True
            while self._active:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Requests:
    """The request path of an engine's servers (module docstring): its Pools (drafters: one Pool, a list of level
    Pools, or None), units, runtime, each request's default ``spec`` (its sp_degree the most a request may use)."""

    def __init__(
        self,
        targets: Pool,
        drafters,
        units: list[Unit],
        runtime: RuntimeConfig,
        spec: SpeculativeConfig,
        policy: str,
        keep_actors: bool,
    ):
        self.targets, self.drafters, self.units, self.runtime = targets, drafters, units, runtime
        self.spec, self.keep_actors = spec, keep_actors
        self.scheduler = Scheduler(units)
        self.curves = Curves(policy, targets, drafters, len(units))
        self.model = model_of(targets)
        self.tokenizer = self.model.tokenizer
        self.end_of_text = end_of_text_ids(self.model)
        self.servers = [s for u in units for s in u.servers]
        # torch's threads only for torch models; llama.cpp servers here (on Ray their actors set their own)
        torch = any(model_of(p).kind == "transformers" for p in [targets, *listed(drafters)])
        self.threads = SharedThreads(torch, self.servers if runtime.name != "ray" else [])
        self.gate = Gate()
        self._specs: dict = {}  # a request's changed fields -> its SpeculativeConfig (see config)
        self.profile, self._auto = None, None  # algorithm="auto"'s machine profile (as the engine was given it)
        self._auto_lock = threading.Lock()  # one chooser made (one profile measured) however many ask at once

    # -- one request ------------------------------------------------------------------------------
    def one(self, prompt, params: SamplingParams, spec: SpeculativeConfig, stream=None) -> GenerationResult:
        """One request, run now on the engine's scheduler; its result with its text."""
        ids = self.prompt_ids(prompt)
        request, query = self.prepared(ids, params, spec, stream, self.scheduler, self.runtime)
        with self.gate.request():
            result = self.run(request, query)
        return self.finished(result, request, ids, params)

    def prepared(self, ids: list[int], params: SamplingParams, spec: SpeculativeConfig, stream, scheduler: Scheduler,
                 runtime) -> tuple[Request, Query]:  # fmt: skip
        """The request made for prompt ``ids`` (:meth:`make`) and the query it runs: ids, length, decoding, stops."""
        decoding = params.decoding(len(ids), self.end_of_text)
        shape = RequestShape(len(ids), params.max_tokens, decoding.processors is not None)
        request = self.make(shape, spec, scheduler, runtime)
        stopping = params.stopping(ids, self.end_of_text, self.tokenizer)
        return request, Query(ids, params.max_tokens, decoding, stopping, stream)

    def make(self, shape: RequestShape, spec: SpeculativeConfig, scheduler: Scheduler, runtime) -> Request:
        """A request of ``shape`` on ``scheduler`` and ``runtime``, not yet run: ``spec`` resolved for it (algorithm
        "auto" the predicted fastest method it can run, token trees taking no logits processors; then lookahead
        "auto" the fastest by simulation where its share curve does not choose it), its share curve, what ``auto``
        chose."""
        if self.gate.closed:
            raise ConfigError("this engine is closed")
        choice = None
        if spec.algorithm == "auto":
            spec, choice = self.auto().resolve(spec, shape)
        if spec.uses_drafter and self.drafters is None:
            raise ConfigError(f"algorithm {spec.algorithm!r} needs a drafter: give the engine one")
        if choice is not None:  # its largest share runs what auto chose, the smaller ones as auto predicts them
            curve = choice_curve(choice, len(self.units), self.curves.policy)
        else:
            curve = self.curves.of(spec, shape.max_tokens)
        if spec.lookahead == "auto" and curve.option(curve.max_units).ms_per_token is None:
            from specpar.prediction.lookahead_choice import auto_lookahead  # (or its clear error)

            k = auto_lookahead(self.targets, self.drafters, spec.algorithm, spec.sp_degree, shape.max_tokens,
                               spec.dedicated_cursor)  # fmt: skip
            log.info("lookahead %d: the fastest %s's simulation predicts (lookahead='auto')", k, spec.algorithm)
            spec = spec.replace(lookahead=k)
        request = Request(scheduler, spec, curve, runtime, self.keep_actors)
        request.choice = choice
        return request

    def run(self, request: Request, query: Query) -> GenerationResult:
        """``query`` run as ``request``; its result with the time outside forward passes (``overhead``: real models
        on this process's threads) and waiting for units (``queue_ms``)."""
        local = self.model.real and self.runtime.name != "ray"  # on Ray the passes run in the actors
        if not self.model.real:
            with collector_paused(self.runtime.name == "virtual"):
                result = request.run(query)
        else:
            spec = request.spec
            marks = {id(s): len(s.forward_log) for s in self.servers} if local else None
            with self.threads(self.threads_for(spec.algorithm, spec.uses_drafter, spec.sp_degree)):
                t0 = time.perf_counter()
                result = request.run(query)
                t1 = time.perf_counter()
            if local:  # the forward passes of the servers this request ran on
                intervals = [iv for s in request.servers for iv in s.forward_log[marks[id(s)] :]]
                result.overhead = overhead(intervals, t0, t1)
        result.queue_ms = request.queue_ms
        return result

    def finished(self, result: GenerationResult, request: Request, prompt, params: SamplingParams) -> GenerationResult:
        """``result`` (of ``request``, after ``prompt``) with its text and what ``auto`` chose for it, logged."""
        if request.choice is not None:  # what ran: the choice, or (on fewer units, under load) what its shares ran
            result.auto = request.choice.ran([(configure(request.spec, o), o.ms_per_token) for o, _, _ in request.segments],
                                             len(result.tokens))  # fmt: skip
        if self.tokenizer is not None:
            result.text = detokenize(self.tokenizer, prompt, result.tokens, *texts(params))
        if log.isEnabledFor(logging.INFO):
            log.info(
                "%s: %d prompt + %d new tokens in %.1f ms (%s), finish %s, acceptance rate %.2f, mean acceptance "
                "length %.2f, lookahead %s", result.algorithm, len(prompt), len(result.tokens), result.time_ms,
                result.runtime, result.finish_reason, result.acceptance_rate, result.mean_acceptance_length,
                result.lookahead,
            )  # fmt: skip
        return result

    # -- many at once -----------------------------------------------------------------------------
    def many(self, prompts: list[list[int]], params: list[SamplingParams], spec, stream) -> list[GenerationResult]:
        """Requests at once: on the virtual clock a burst (:meth:`burst`); else taken in order by one thread per unit
        (more would only wait in the scheduler), :func:`in_threads`."""
        if self.runtime.name == "virtual" and len(prompts) > 1:
            return self.burst(prompts, params, spec, stream)
        return in_threads(
            [lambda p=p, q=q: self.one(p, q, spec, stream) for p, q in zip(prompts, params)], len(self.units)
        )

    def burst(self, prompts: list[list[int]], params: list[SamplingParams], spec, stream) -> list[GenerationResult]:
        """The virtual clock's requests at once, all arriving at time 0 on one shared clock and a scheduler of their
        own (as ``specpar simulate load`` runs them) while no other request runs. The first error (by prompt) is
        raised once every request ended."""
        from specpar.runtimes.shared_clock import SharedClock

        clock = SharedClock()
        scheduler = Scheduler(self.units, clock)
        runtime = self.runtime.replace(options={**self.runtime.options, "clock": clock})
        made, queries = zip(
            *(self.prepared(ids, p, spec, stream, scheduler, runtime) for ids, p in zip(prompts, params))
        )
        results: list = [None] * len(made)
        failed: dict[int, BaseException] = {}

        def one(i: int) -> None:
            try:
                results[i] = made[i].run(queries[i])
            except BaseException as exc:  # raised in the caller's thread below
                failed[i] = exc

        with self.gate.alone(), collector_paused(True):
            if self.gate.closed:
                raise ConfigError("this engine is closed")
            for i in range(len(made)):
                clock.spawn(one, i)
            clock.run()
        if failed:
            raise failed[min(failed)]
        for request, result, ids, p in zip(made, results, prompts, params):
            result.queue_ms = request.queue_ms
            self.finished(result, request, ids, p)
        return results

    # -- what a request is made of -------------------------------------------------------------------
    def config(self, speculative_config, params, options: Mapping) -> tuple[SpeculativeConfig, SamplingParams]:
        """A request's SpeculativeConfig (the engine's, with the request's changes) and SamplingParams."""
        spec_fields, runtime_fields, sampling = split_options(options, sampling=SAMPLING_FIELDS)
        if runtime_fields:
            raise ConfigError(f"the runtime is the engine's: {sorted(runtime_fields)} cannot change per request")
        # the engine's defaults with a few fields changed: made once (unless a value is unhashable, a list)
        key = tuple(spec_fields.items()) if speculative_config is None and spec_fields else None
        try:
            spec = self._specs.get(key)
        except TypeError:
            key = spec = None
        if spec is None:
            spec = self._spec(speculative_config, spec_fields)
            if key is not None:
                if len(self._specs) >= MAX_SPECS:
                    self._specs.clear()
                self._specs[key] = spec
        return spec, sampling_params(params, sampling)

    def _spec(self, speculative_config, spec_fields: dict) -> SpeculativeConfig:
        base = self.spec if speculative_config is None else SpeculativeConfig.coerce(speculative_config)
        spec = base.for_request(**spec_fields)
        most = self.spec.sp_degree
        if spec.sp_degree is None:
            spec = spec.replace(sp_degree=most)
        if spec.sp_degree > most:
            raise ConfigError(f"sp_degree {spec.sp_degree} is more than the engine's {most} target servers")
        return spec

    def prompt_ids(self, prompt) -> list[int]:
        """A prompt (text, or token ids) as token ids; a ConfigError for anything else, or an empty one."""
        if type(prompt) is list and prompt:  # the common case, without the abstract classes' checks
            return list(prompt)
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ConfigError("a text prompt needs a target with a tokenizer: give token ids")
            ids = self.model.encode(prompt)
        elif isinstance(prompt, (bytes, Mapping)) or not isinstance(prompt, Iterable):
            raise ConfigError(f"the prompt must be text or a list of token ids, got {type(prompt).__name__}")
        else:
            ids = list(prompt)
        if not ids:
            raise ConfigError("prompt is empty: give at least one token (the target needs a prefix to continue)")
        return ids

    def threads_for(self, algorithm: str, uses_drafter: bool = True, sp_degree: int | None = None) -> int:
        """torch threads per forward pass so that the CPU servers running at once share the cores
        (:func:`~specpar.backends.cpu_threads.pass_threads`): the request's ``sp_degree`` targets (default: the
        engine's) and its drafter unless ``uses_drafter`` is False (the n-gram proposer)."""
        ray = self.runtime.cpus_per_server if self.runtime.name == "ray" else None
        targets = self.targets.servers[: sp_degree or self.spec.sp_degree]
        drafters = [s for p in listed(self.drafters) for s in p.servers] if uses_drafter else []
        cpu = [s for s in (*targets, *drafters) if s.device == "cpu"]
        return pass_threads(cpu_cores(), len(self.units), busy_servers(algorithm, len(cpu)), ray)

    def auto(self, profile=None):
        """``algorithm="auto"``'s chooser (:class:`specpar.prediction.auto.Auto`), made once, on first use (from
        ``profile`` when the engine was given none)."""
        if self._auto is None:
            from specpar.prediction.auto import for_servers

            with self._auto_lock:
                if self._auto is None:
                    self._auto = for_servers(self.profile or profile, self.targets, self.drafters, len(self.units), self.runtime,
                                             self.spec.sp_degree, self.curves.policy)  # fmt: skip
        return self._auto


def in_threads(calls: list, workers: int) -> list:
    """Each of ``calls`` (functions of no argument) made on one of ``workers`` threads, taken in order; their
    results in order. The first error (by call) is raised once the threads have ended; no call starts after it,
    nor after an exception in the caller's thread while it waits (Ctrl-C): the threads are daemons, so the process
    can exit while a call is still running."""
    n = len(calls)
    workers = min(n, workers)
    if workers <= 1:
        return [call() for call in calls]
    results: list = [None] * n
    failed: dict[int, BaseException] = {}
    order = iter(range(n))
    lock = threading.Lock()
    stop = threading.Event()

    def work() -> None:
        while not failed and not stop.is_set():
            with lock:
                i = next(order, None)
            if i is None:
                return
            try:
                results[i] = calls[i]()
            except BaseException as exc:  # raised in the caller's thread below
                failed[i] = exc

    threads = [threading.Thread(target=work, name="specpar-request", daemon=True) for _ in range(workers)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.1)  # a timed join: a signal's handler (Ctrl-C) runs in this thread between two
    except BaseException:
        stop.set()
        raise
    if failed:
        raise failed[min(failed)]
    return results


def one_prompt(prompts) -> bool:
    """Whether ``prompts`` is one prompt (text or token ids), not a list of them."""
    if type(prompts) is list:  # the common case, without the abstract classes' checks
        return not prompts or not isinstance(prompts[0], (str, list, tuple))
    if isinstance(prompts, str) or not isinstance(prompts, Iterable):
        return True  # one prompt (prompt_ids refuses what is not one)
    seq = list(prompts) if not isinstance(prompts, Sequence) else prompts
    return len(seq) == 0 or not isinstance(seq[0], (str, list, tuple))


def sampling_params(params: SamplingParams | None, sampling: dict) -> SamplingParams:
    """A request's SamplingParams: ``params``, or one made of the ``sampling`` keywords (not both)."""
    if params is not None and sampling:
        raise ConfigError(
            f"give the sampling parameters either as params= or as keywords, not both: {sorted(sampling)}"
        )
    if params is not None and not isinstance(params, SamplingParams):
        raise ConfigError(f"params must be a SamplingParams, got {type(params).__name__}")
    return params if params is not None else SamplingParams.from_kwargs(**sampling)


def check_stream(stream) -> None:
    if stream is not None and not callable(stream):
        raise ConfigError(f"stream must be a function called with each run of new token ids, got {stream!r:.60}")


def texts(params: SamplingParams) -> tuple:
    """The stop strings' settings of a request's text: (stop, min_tokens, include_stop_str_in_output)."""
    return params.stop, params.min_tokens, params.include_stop_str_in_output


def listed(drafter) -> list:
    """The drafter(s) as a list: none, one, or the list given."""
    return drafter if isinstance(drafter, list) else [] if drafter is None else [drafter]
