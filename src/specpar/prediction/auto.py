"""``algorithm="auto"``: the fastest exact method on this machine, by the prediction of every method.

An engine asked for "auto" resolves it before the request runs (:meth:`Auto.resolve`): every method the engine can
run is predicted at its best settings on the engine's machine profile for the request's prompt and output lengths
(:func:`specpar.prediction.methods.predict_methods`), and the request runs the fastest, with one line saying what
and why, e.g. ``non-SI: predicted 8.1 s; SI k=4 12.0 s, DSI k=2 SP 1 10.9 s; a pass over 5 tokens costs 4.6 decode
steps on this machine``. Every method here is exact (lossless), and the profile is of one backend mode (llama.cpp's
exact settings or not: its key), so the choice is among exact methods of that mode.

The profile: the one given to the engine (a :class:`~specpar.prediction.machine.MachineProfile` or its JSON file);
else, for simulated models, their own latency profiles and the drafter's acceptance rate (no contention: each server
simulated apart); else the profile measured on this machine for the engine's models
(:func:`specpar.prediction.machine.load_or_build`).

Choices are kept per (prompt length rounded up to a power of two, output length, SP degree allowed), so that a
server answering many requests predicts once per kind of request; a request's predicted times are the kept ones
moved by the target's prefill at its own prompt length.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, replace

from specpar.core.config import AUTO_CHOOSES, SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.prediction.machine import MachineProfile, load_or_build
from specpar.prediction.methods import METHODS, EngineShape, MethodPredictions, Prediction, predict_methods

log = logging.getLogger(__name__)

KEPT = 256  # choices an engine keeps
MARGIN = 0.01
"""A method that drafts is chosen over non-SI only when predicted faster by more than this fraction: non-SI's
prediction has no draws to be wrong about, the others' average over sample draws."""


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
        self._kept: dict[tuple, MethodPredictions] = {}
        self._lock = threading.Lock()

    def predictions(self, prompt_tokens: int, max_tokens: int, sp_degree: int | None = None) -> MethodPredictions:
        """Every method's best setting for a prompt of ``prompt_tokens`` (rounded up to a power of two) and
        ``max_tokens`` output tokens, DSI on at most ``sp_degree`` target servers (default: the engine's)."""
        targets = min(sp_degree or self.shape.targets, self.shape.targets)
        key = (bucket(prompt_tokens), max_tokens, targets)
        with self._lock:
            kept = self._kept.get(key)
        if kept is None:
            kept = predict_methods(self.profile, key[0], max_tokens, replace(self.shape, targets=targets), self.methods)
            with self._lock:
                if len(self._kept) >= KEPT:
                    self._kept.pop(next(iter(self._kept)))
                self._kept[key] = kept
        return kept

    def choose(self, prompt_tokens: int, max_tokens: int, sp_degree: int | None = None) -> Choice:
        """The fastest method for this request, and why."""
        predictions = self.predictions(prompt_tokens, max_tokens, sp_degree)
        shift = self.profile.target.prefill(prompt_tokens) - self.profile.target.prefill(predictions.prompt_tokens)
        best = chosen(predictions)
        return Choice(best.spec, best, best.ms + shift, reason(best, predictions, self.profile, shift), predictions)

    def resolve(self, spec: SpeculativeConfig, prompt_tokens: int, max_tokens: int) -> tuple[SpeculativeConfig, Choice]:
        """``spec`` with algorithm "auto" made the fastest method's configuration (its sp_degree caps DSI's)."""
        given = [name for name in AUTO_CHOOSES if getattr(spec, name) not in (None, "auto")]
        if given:
            raise ConfigError(
                f'algorithm="auto" chooses the method and its settings: give no {", ".join(given)} with it '
                "(sp_degree caps DSI's servers)"
            )
        choice = self.choose(prompt_tokens, max_tokens, spec.sp_degree)
        log.info("auto: %s", choice.reason)
        return choice.spec, choice


def bucket(tokens: int) -> int:
    """``tokens`` rounded up to a power of two (at least 16): the prompt lengths predicted for."""
    n = 16
    while n < tokens:
        n *= 2
    return n


def profile_of(given, target_model, drafter_model, latencies) -> MachineProfile:
    """The profile ``auto`` predicts from (module docstring): ``given`` (a MachineProfile or a JSON file's path);
    else the simulated models' ``latencies`` (target, drafter: LatencyProfiles, or None when unknown) and the
    drafter's acceptance rate; else the profile measured for the models (``load_or_build``)."""
    if isinstance(given, MachineProfile):
        return given
    if isinstance(given, (str, os.PathLike)):
        return MachineProfile.load(given)
    if given is not None:
        raise ConfigError(f"profile must be a MachineProfile or a JSON file's path, got {type(given).__name__}")
    t, d = latencies
    rate = getattr(drafter_model, "acceptance_rate", None)
    simulated = not target_model.real  # a simulated model: its latency profile is its cost
    if simulated and t is not None:
        with_drafter = d is not None and rate is not None
        return MachineProfile.from_latency(t, d if with_drafter else None, rate if with_drafter else None,
                                           names=(_name(target_model), _name(drafter_model)))  # fmt: skip
    return load_or_build(target=target_model, drafter=drafter_model)


def _name(model) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def for_servers(profile, targets, drafters, units: int, runtime, sp_degree: int) -> Auto:
    """``auto`` for an engine's servers: the ``targets`` Pool and ``drafters`` (a Pool, levels, or None), ``units``
    processing units, ``runtime`` (its RuntimeConfig) and ``sp_degree`` target servers at most; its profile is
    :func:`profile_of` ``profile`` (as the engine was given it)."""
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
        targets=sp_degree,
        runtime=runtime.name,
        cpus_per_server=runtime.cpus_per_server if runtime.name == "ray" else None,
        cpu=target_model.real and all(getattr(s, "device", "cpu") == "cpu" for s in servers),
        drafter=drafter is not None,
        cancel_frees=runtime.cancel_frees if runtime.name == "virtual" else {"target": "end"},
    )
    return Auto(profile, shape)


def predict_request(engine, spec: SpeculativeConfig, prompt_tokens: int, max_tokens: int) -> float:
    """The predicted time (ms) of one request of ``spec`` on ``engine`` run alone, as the engine will run it (its
    defaults resolved for the engine's models: :func:`specpar.algorithms.defaults.resolve`); for "auto", its
    choice's. A ConfigError when the engine has no machine profile."""
    from specpar.algorithms.defaults import resolve
    from specpar.algorithms.registry import ALGORITHMS
    from specpar.prediction.methods import NAMES, available, method_of
    from specpar.prediction.simulate import predicted_ms

    auto = engine.auto()
    if spec.algorithm == "auto":
        return auto.choose(prompt_tokens, max_tokens, spec.sp_degree).predicted_ms
    drafter = engine.drafters if spec.speculates else None
    resolved = resolve(spec, ALGORITHMS[spec.algorithm], engine.targets, drafter, prompt_tokens)
    method = method_of(resolved)
    if not available(auto.profile, auto.shape, [method]):
        raise ConfigError(f"no prediction of {NAMES[method]} here: the engine or its profile has no drafter or rates")
    return predicted_ms(auto.profile, resolved, prompt_tokens, max_tokens, auto.shape)
