"""``algorithm="auto"``: the fastest exact method on this machine, by the prediction of every method.

An engine asked for "auto" resolves it before the request runs (:meth:`Auto.resolve`): every method the engine can
run is predicted at its best settings on the engine's machine profile for the request's prompt and output lengths
(:func:`specpar.prediction.methods.predict_methods`), and the request runs the fastest, with one line saying what
and why, e.g. ``non-SI: predicted 8.1 s; SI k=4 12.0 s, DSI k=2 SP 1 10.9 s; a pass over 5 tokens costs 4.6 decode
steps on this machine``. Every method is exact, and the profile is of one backend mode (its key).

Choices are kept per (prompt length rounded up to a power of two, output length up to MAX_SIMULATED tokens, SP
degree allowed, logits processors or not), so that a server predicts once per kind of request; a request's times
are the kept ones moved by the target's prefill at its own prompt length.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace

from specpar.core.config import AUTO_CHOOSES, SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.model import Model
from specpar.core.query import RequestShape
from specpar.prediction.machine import MachineProfile, load_or_build
from specpar.prediction.methods import METHODS, EngineShape, MethodPredictions, Prediction, predict_methods
from specpar.prediction.simulate import MAX_SIMULATED

log = logging.getLogger(__name__)

KEPT = 256  # choices an engine keeps
MARGIN = 0.01
"""A method that drafts is chosen over non-SI only when predicted faster by more than this fraction: non-SI's
prediction has no draws to be wrong about."""


def seconds(ms: float) -> str:
    """A time for people: "8.1 s", "640 ms", "3.2 ms"."""
    if ms >= 1000:
        return f"{ms / 1000:.1f} s"
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"


@dataclass(frozen=True)
class Choice:
    """What ``auto`` chose for a request: ``spec`` (the configuration it runs), the prediction it won by, and the
    one-line ``reason``; ``predictions``: every method's best setting, fastest first."""

    spec: SpeculativeConfig
    chosen: Prediction
    predicted_ms: float
    reason: str
    predictions: MethodPredictions

    @property
    def method(self) -> str:
        return self.chosen.method

    def to_dict(self) -> dict:
        """The response's ``specpar`` field: the method, its settings in words, the predicted ms and why."""
        return {
            "method": self.chosen.method,
            "label": self.chosen.label,
            "predicted_ms": self.predicted_ms,
            "reason": self.reason,
        }

    def ran(self, configurations: list[tuple[SpeculativeConfig, float | None]], tokens: int) -> dict:
        """:meth:`to_dict` for a request that ran ``configurations`` ((SpeculativeConfig, predicted ms per token), in
        order) and made ``tokens`` tokens; when it did not run as chosen (fewer units under load), what ran."""
        from specpar.prediction.methods import method_of

        ran = [Prediction(method_of(spec), spec, self.chosen.runtime, 0, 0.0) for spec, _ in configurations]
        if all(p.label == self.chosen.label for p in ran):
            return self.to_dict()
        known = all(ms is not None for _, ms in configurations)
        return {
            "method": ran[-1].method,
            "label": ", then ".join(dict.fromkeys(p.label for p in ran)),
            "predicted_ms": sum(ms for _, ms in configurations) / len(configurations) * tokens if known else 0.0,
            "reason": self.reason,
            "chosen": self.chosen.label,
        }


def chosen(predictions: MethodPredictions) -> Prediction:
    """The method ``auto`` runs: the fastest, unless it beats non-SI by no more than MARGIN (then non-SI)."""
    best, plain = predictions.fastest, predictions.of("nonsi")
    if plain is not None and best.ms > plain.ms / (1 + MARGIN):
        return plain
    return best


def reason(chosen: Prediction, predictions: MethodPredictions, profile: MachineProfile, shift: float = 0.0,
           others: int = 3) -> str:  # fmt: skip
    """The line that says what ``auto`` chose and why: the method chosen and its time, the next ``others`` methods'
    times, and what a pass over k + 1 tokens costs in decode steps (k: the fastest speculative setting's)."""
    rest = [p for p in predictions.best if p is not chosen]
    words = f"{chosen.label}: predicted {seconds(chosen.ms + shift)}"
    if rest:
        words += "; " + ", ".join(f"{p.label} {seconds(p.ms + shift)}" for p in rest[:others])
    if chosen.method == "nonsi" and rest and rest[0].ms <= chosen.ms:
        words += f" (within {MARGIN:.0%}: plain decoding)"
    drafting = next((p for p in predictions.best if p.method != "nonsi" and p.spec.lookahead), None)
    k = drafting.spec.lookahead if drafting is not None else 5
    threads = drafting.threads if drafting is not None else chosen.threads
    v1 = profile.target.pass_cost(1, threads)
    if v1 > 0:
        steps = profile.target.pass_cost(k + 1, threads) / v1
        words += f"; a pass over {k + 1} tokens costs {steps:.1f} decode steps on this machine"
    return words


class Auto:
    """``auto`` for one engine: its machine profile and shape, and the choices made so far (thread-safe)."""

    def __init__(self, profile: MachineProfile, shape: EngineShape, methods=METHODS):
        self.profile = profile
        self.shape = shape
        self.methods = tuple(methods)
        self._kept: dict[tuple, Future] = {}  # the searches, done or under way (their MethodPredictions)
        self._lock = threading.Lock()

    def predictions(self, prompt_tokens: int, max_tokens: int, sp_degree: int | None = None,
                    processors: bool = False) -> MethodPredictions:  # fmt: skip
        """Every method's best setting for a prompt of ``prompt_tokens`` (rounded up to a power of two) and
        ``max_tokens`` output tokens (past MAX_SIMULATED: that search, scaled), DSI on at most ``sp_degree`` target
        servers; with ``processors`` (logits processors) no token trees, which do not take them."""
        targets = min(sp_degree or self.shape.targets, self.shape.targets)
        key = (bucket(prompt_tokens), min(max_tokens, MAX_SIMULATED), targets, processors)
        with self._lock:  # one search per key: requests asking meanwhile wait for its result
            search = self._kept.get(key)
            mine = search is None
            if mine:
                if len(self._kept) >= KEPT:
                    self._kept.pop(next(iter(self._kept)))
                search = self._kept[key] = Future()
        if mine:
            try:
                methods = [m for m in self.methods if not (processors and m.startswith("tree"))]
                shape = replace(self.shape, targets=targets)
                search.set_result(predict_methods(self.profile, key[0], key[1], shape, methods))
            except BaseException as exc:
                with self._lock:
                    if self._kept.get(key) is search:  # a failed search is not kept
                        del self._kept[key]
                search.set_exception(exc)
                raise
        kept = search.result()
        return kept if max_tokens == key[1] else kept.scaled(max_tokens)

    def choose(self, prompt_tokens: int, max_tokens: int, sp_degree: int | None = None,
               processors: bool = False) -> Choice:  # fmt: skip
        """The fastest method for this request (``processors``: it has logits processors), and why."""
        predictions = self.predictions(prompt_tokens, max_tokens, sp_degree, processors)
        shift = self.profile.target.prefill(prompt_tokens) - self.profile.target.prefill(predictions.prompt_tokens)
        best = chosen(predictions)
        return Choice(best.spec, best, best.ms + shift, reason(best, predictions, self.profile, shift), predictions)

    def resolve(self, spec: SpeculativeConfig, shape: RequestShape) -> tuple[SpeculativeConfig, Choice]:
        """``spec`` with algorithm "auto" made the fastest method's configuration (its sp_degree caps DSI's) for a
        request of ``shape``."""
        given = [name for name in AUTO_CHOOSES if getattr(spec, name) not in (None, "auto")]
        if given:
            raise ConfigError(
                f'algorithm="auto" chooses the method and its settings: give no {", ".join(given)} with it '
                "(sp_degree caps DSI's servers)"
            )
        choice = self.choose(shape.prompt_tokens, shape.max_tokens, spec.sp_degree, shape.processors)
        log.info("auto: %s", choice.reason)
        return choice.spec, choice


def bucket(tokens: int) -> int:
    """``tokens`` rounded up to a power of two (at least 16): the prompt lengths predicted for."""
    return max(16, 1 << (tokens - 1).bit_length())


def profile_of(given, target_model: Model, drafter_model: Model | None, latencies) -> MachineProfile:
    """The profile ``auto`` predicts from: ``given`` (a MachineProfile or a JSON file's path); else the simulated
    models' ``latencies`` (target, drafter: LatencyProfiles or None) and the drafter's acceptance rate (no
    contention: each server simulated apart); else the profile measured for the models (``load_or_build``)."""
    if isinstance(given, MachineProfile):
        return given
    if isinstance(given, (str, os.PathLike)):
        return MachineProfile.load(given)
    if given is not None:
        raise ConfigError(f"profile must be a MachineProfile or a JSON file's path, got {type(given).__name__}")
    t, d = latencies
    rate = drafter_model.acceptance_rate if drafter_model is not None else None
    simulated = not target_model.real  # a simulated model: its latency profile is its cost
    if simulated and t is not None:
        with_drafter = d is not None and rate is not None
        return MachineProfile.from_latency(t, d if with_drafter else None, rate if with_drafter else None,
                                           names=(_name(target_model), _name(drafter_model)))  # fmt: skip
    return load_or_build(target=target_model, drafter=drafter_model)


def _name(model: Model | None) -> str:
    return str(model.name if model is not None and model.name else type(model).__name__)


def for_servers(profile, targets, drafters, units: int, runtime, sp_degree: int, policy: str = "adaptive") -> Auto:
    """``auto`` for an engine's servers: the ``targets`` Pool and ``drafters`` (a Pool, levels, or None), ``units``
    processing units, ``runtime`` (its RuntimeConfig), ``sp_degree`` target servers at most, its ``profile`` as the
    engine was given it (:func:`profile_of`) and its scheduling ``policy`` (auto chooses among what it runs)."""
    from specpar.runtimes import Pool
    from specpar.runtimes.base import latency_of, model_of

    drafter = drafters if isinstance(drafters, Pool) else None  # (HSD's levels: not predicted)
    target_model = model_of(targets)
    latencies = (latency_of(targets), latency_of(drafter) if drafter is not None else None)
    profile = profile_of(profile, target_model, model_of(drafter) if drafter else None, latencies)
    profile = profile.for_runtime(runtime.name)  # Ray's round trip: measured, or assumed with a warning
    servers = targets.servers + (drafter.servers if drafter is not None else [])
    shape = EngineShape(
        units=units,
        targets=sp_degree if units == 1 else max(1, min(sp_degree, units - 1)),  # DSI SP s: s + 1 units
        runtime=runtime.name,
        cpus_per_server=runtime.cpus_per_server if runtime.name == "ray" else None,
        cpu=target_model.real and all(s.device == "cpu" for s in servers),
        drafter=drafter is not None,
        cancel_frees=runtime.cancel_frees if runtime.name == "virtual" else {"target": "end"},
    )
    return Auto(profile, shape, policy_methods(policy))


def policy_methods(policy: str) -> tuple[str, ...]:
    """The methods an engine of scheduling ``policy`` runs as chosen (a fixed "si" runs DSI as SI, "nonsi" runs
    everything as non-SI)."""
    if policy == "nonsi":
        return ("nonsi",)
    if policy == "si":
        return tuple(m for m in METHODS if not m.endswith("dsi"))
    return METHODS


def predict_request(engine, spec: SpeculativeConfig, prompt_tokens: int, max_tokens: int) -> float:
    """The predicted time (ms) of one request of ``spec`` on ``engine`` run alone, its defaults resolved as the
    engine resolves them; for "auto", its choice's. A ConfigError when the engine has no machine profile."""
    from specpar.algorithms.defaults import resolve
    from specpar.algorithms.registry import ALGORITHMS
    from specpar.prediction.methods import NAMES, available, method_of
    from specpar.prediction.simulate import predicted_ms

    auto = engine.auto()
    if spec.algorithm == "auto":
        return auto.choose(prompt_tokens, max_tokens, spec.sp_degree).predicted_ms
    drafter = engine.drafters if spec.speculates else None
    resolved = resolve(spec, ALGORITHMS[spec.algorithm], engine.targets, drafter)
    method = method_of(resolved)
    if method not in METHODS or not available(auto.profile, auto.shape, [method]):
        raise ConfigError(f"no prediction of {NAMES[method]} here: the engine or its profile has no drafter or rates")
    return predicted_ms(auto.profile, resolved, prompt_tokens, max_tokens, auto.shape)
