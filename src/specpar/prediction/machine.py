"""The machine profile: what each forward pass of a model pair costs on this machine, measured, and its JSON form.

A :class:`MachineProfile` holds, for one target/drafter pair on one backend with its settings, each model's
:class:`ModelCosts` (prefill and v(k) per thread count), the contention between busy servers, the runtimes'
overheads, the drafter's and the n-gram proposer's acceptance, and the ``key`` it is valid for (a cache keyed by it
is invalid once the models, the backend's settings or the machine change). JSON: ``"format": "specpar-machine/1"``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.json_output import parse
from specpar.core.latency import MAX_LATENCY_MS, LatencyProfile, PassCosts, check_contention
from specpar.core.model import as_model
from specpar.core.numbers import int_at_least, is_number
from specpar.core.paths import read_text

FORMAT = "specpar-machine/1"
DEFAULT_MAX_PASS = 16
"""The longest pass (new tokens) a constructed profile tabulates: lookaheads up to 15 plus the bonus row."""
RAY_CALL_MS = 1.5
"""One Ray actor call's round trip (ms) a prediction assumes when its profile did not measure Ray's: `specpar profile
--ray` measured 1.466 ms on a 2-core Xeon at load 0.3 (docs/predict.md)."""


def _number(value, name: str, hi: float = MAX_LATENCY_MS) -> float:
    """``value`` as a float in [0, hi]: ms by default, a rate with ``hi`` 1; else a ConfigError."""
    if not is_number(value, 0, hi):
        what = "a number of ms" if hi == MAX_LATENCY_MS else "a number"
        raise ConfigError(f"{name} must be {what} in [0, {hi:g}], got {value!r}")
    return float(value)


def _mapping(value, message: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{message}, got {value!r}")
    return value


def _is_list(value) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


@dataclass(frozen=True)
class ModelCosts:
    """One model's forward-pass costs on this machine, in ms.

    prefill_ms: points ((prompt_tokens, ms), ...), lengths increasing: a prompt's pass on an empty cache, linear
        between points and past the last (one point: every length).
    pass_ms: {threads: (v(1), ..., v(K))}: one pass over k new tokens on a warm cache with ``threads`` threads (v(1)
        as the engine runs it: llama.cpp's exact mode runs it on one thread). Past K, the line through v(K-1), v(K).
    prefill_by_threads: {threads: points}: the prefill per thread count; empty: ``prefill_ms`` for every count.
    """

    name: str
    prefill_ms: tuple[tuple[int, float], ...]
    pass_ms: Mapping[int, tuple[float, ...]]
    prefill_by_threads: Mapping[int, tuple[tuple[int, float], ...]] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ConfigError(f"a model's name must be text, got {self.name!r}")
        points = _points(self.prefill_ms, "prefill_ms")
        given = _mapping(self.prefill_by_threads, "prefill_by_threads must map thread counts to points")
        by_threads = {_threads(t): _points(p, f"prefill_by_threads[{t}]") for t, p in given.items()}
        object.__setattr__(self, "prefill_by_threads", dict(sorted(by_threads.items())))
        if not isinstance(self.pass_ms, Mapping) or not self.pass_ms:
            raise ConfigError(f"pass_ms must map thread counts to v(1..K) in ms, got {self.pass_ms!r}")
        table = {}
        for threads, v in sorted((_threads(t), v) for t, v in self.pass_ms.items()):
            if not _is_list(v) or not v:
                raise ConfigError(f"pass_ms[{threads}] must be v(1..K) in ms, got {v!r}")
            table[threads] = tuple(_number(x, f"pass_ms[{threads}]") for x in v)
        object.__setattr__(self, "prefill_ms", points)
        object.__setattr__(self, "pass_ms", table)

    def table(self, threads: int) -> tuple[float, ...]:
        """v(1..K) for passes given ``threads`` threads (:func:`_nearest` measured count)."""
        return _nearest(self.pass_ms, threads)

    def prefill_points(self, threads: int | None = None) -> tuple[tuple[int, float], ...]:
        """The prefill's points for ``threads`` threads (as :meth:`table`); ``prefill_ms`` for None."""
        if threads is None or not self.prefill_by_threads:
            return self.prefill_ms
        return _nearest(self.prefill_by_threads, threads)

    def costs(self, threads: int, call_ms_extra: float = 0.0) -> PassCosts:
        """A simulated server's call costs with ``threads`` threads, ``call_ms_extra`` (a round trip) per call."""
        return PassCosts(self.prefill_points(threads), self.table(threads), call_ms_extra)

    def pass_cost(self, k: int, threads: int) -> float:
        """v(k): one pass over ``k`` >= 1 new tokens on a warm cache, with ``threads`` threads (ms)."""
        return self.costs(threads).v(k)

    def prefill(self, tokens: int, threads: int | None = None) -> float:
        """A prefill of a prompt of ``tokens`` tokens (ms), never below 0, with ``threads`` threads (None: any)."""
        return PassCosts(self.prefill_points(threads), self.table(threads or min(self.pass_ms))).prefill_ms(tokens)

    def latency_profile(self, threads: int, prompt_tokens: int = 128) -> LatencyProfile:
        """These costs' linear summary (a :class:`LatencyProfile`): TTFT the prefill of ``prompt_tokens``, TPOT v(1),
        per extra token the mean slope of v, with ``threads`` threads."""
        costs = self.costs(threads)
        return LatencyProfile(costs.prefill_ms(prompt_tokens), costs.tpot_ms, costs.per_token_ms)

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "prefill_ms": [list(p) for p in self.prefill_ms],
            "pass_ms": {str(t): list(v) for t, v in self.pass_ms.items()},
        }
        if self.prefill_by_threads:
            out["prefill_by_threads"] = {str(t): [list(p) for p in v] for t, v in self.prefill_by_threads.items()}
        return out

    @classmethod
    def from_dict(cls, d, where: str = "model costs") -> ModelCosts:
        if not isinstance(d, Mapping) or not {"prefill_ms", "pass_ms"} <= set(d):
            raise ConfigError(f"{where}: expected an object with name, prefill_ms and pass_ms, got {d!r:.80}")
        try:
            return cls(str(d.get("name", "")), d["prefill_ms"], d["pass_ms"], d.get("prefill_by_threads") or {})
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_latency(cls, name: str, latency: LatencyProfile, max_pass: int = DEFAULT_MAX_PASS,
                     threads: int = 1) -> ModelCosts:  # fmt: skip
        """The linear model of a :class:`LatencyProfile`: prefill ttft, v(k) = tpot + per_token_ms (k - 1)."""
        v = tuple(latency.tpot_ms + latency.per_token_ms * (k - 1) for k in range(1, max_pass + 1))
        return cls(name, ((1, latency.ttft_ms),), {threads: v})


def _points(points, name: str) -> tuple[tuple[int, float], ...]:
    """Prefill points ((prompt_tokens, ms), ...), checked: at least one, lengths increasing."""
    if not _is_list(points) or not all(_is_list(p) and len(p) == 2 for p in points):
        raise ConfigError(f"{name} must be a list of (prompt_tokens, ms) pairs, got {points!r}")
    out = tuple((int_at_least(f"a {name} point's prompt_tokens", n), _number(ms, name)) for n, ms in points)
    if not out or any(a[0] >= b[0] for a, b in zip(out, out[1:])):
        raise ConfigError(f"{name} needs points with increasing prompt lengths, got {points!r}")
    return out


def _nearest(by_threads: Mapping[int, object], threads: int):
    """The entry for ``threads``: its own, else the largest count measured below it, else the smallest measured."""
    if threads in by_threads:
        return by_threads[threads]
    below = [t for t in by_threads if t <= threads]
    return by_threads[max(below) if below else min(by_threads)]


def _threads(key) -> int:
    """A pass_ms key: a thread count, as an int or (JSON) its digits."""
    return int_at_least("pass_ms's thread counts", int(key) if isinstance(key, str) and key.isdigit() else key)


def _meta(d: Mapping) -> dict:
    """A profile file's meta; a hand-written one that names no Ray overhead measured those it names."""
    meta, given = dict(d.get("meta") or {}), d.get("overhead_ms", {})
    if "overheads_measured" not in meta and isinstance(given, Mapping) and "ray" not in given:
        meta["overheads_measured"] = sorted(given)
    return meta


@dataclass(frozen=True)
class MachineProfile:
    """A target/drafter pair's costs on one machine with one backend and its settings.

    key: what the profile is valid for (:func:`specpar.prediction.profile_cache.profile_key`), compared whole.
    contention: (f(1), f(2), ...): a pass takes f(n) times its v(k) while n servers are busy at once; f(1) == 1.0,
        in proportion to n past the last entry.
    overhead_ms: {"threads": a call's round trip through the threads runtime, "ray": through a Ray actor}.
    per_token_ms: the engine's own cost per output token.
    acceptance_rate: the drafter's per-token rate (greedy SI's accepted / tested drafts); None: no drafter.
    ngram: the n-gram proposer's "match_rate" and "acceptance_rate"; empty when not measured.
    cores: the CPU cores the engine may use. meta: when, load, seconds taken ...; not compared.
    """

    key: Mapping
    target: ModelCosts
    drafter: ModelCosts | None = None
    contention: tuple[float, ...] = (1.0,)
    overhead_ms: Mapping[str, float] = field(default_factory=lambda: {"threads": 0.0, "ray": 0.0})
    per_token_ms: float = 0.0
    acceptance_rate: float | None = None
    ngram: Mapping[str, float] = field(default_factory=dict)
    cores: int = 1
    meta: Mapping = field(default_factory=dict, compare=False)

    def __post_init__(self):
        _mapping(self.key, "a machine profile's key must be an object")
        if not isinstance(self.target, ModelCosts) or not isinstance(self.drafter, (ModelCosts, type(None))):
            raise ConfigError("a machine profile's target (and drafter) must be ModelCosts")
        object.__setattr__(self, "contention", check_contention(self.contention))
        given = _mapping(self.overhead_ms, "overhead_ms must map runtimes to ms")
        over = {"threads": 0.0, "ray": 0.0, **{str(r): _number(ms, f"overhead_ms[{r!r}]") for r, ms in given.items()}}
        object.__setattr__(self, "overhead_ms", over)
        object.__setattr__(self, "per_token_ms", _number(self.per_token_ms, "per_token_ms"))
        if self.acceptance_rate is not None:
            object.__setattr__(self, "acceptance_rate", _number(self.acceptance_rate, "acceptance_rate", 1))
        ngram = _mapping(self.ngram, "ngram must map 'match_rate' and 'acceptance_rate' to rates")
        object.__setattr__(self, "ngram", {str(k): _number(v, f"ngram[{k!r}]", 1) for k, v in ngram.items()})
        int_at_least("cores", self.cores)
        _mapping(self.meta, "meta must be an object")

    @property
    def has_contention(self) -> bool:
        return any(f != 1.0 for f in self.contention)

    def for_runtime(self, runtime: str) -> MachineProfile:
        """This profile for a prediction on ``runtime``: on Ray, when the measurement did not time Ray's round trip
        (``meta["overheads_measured"]`` without "ray"), :data:`RAY_CALL_MS` per call, with one warning. A profile
        without that record (a what-if) is taken as it states its overheads."""
        measured = self.meta.get("overheads_measured")
        if runtime != "ray" or measured is None or "ray" in measured:
            return self
        warnings.warn(
            f"the machine profile did not measure a Ray call's round trip; predicting with {RAY_CALL_MS} ms per call "
            "(measure it: specpar profile --ray)", SpecparWarning, stacklevel=2,
        )  # fmt: skip
        over = {**self.overhead_ms, "ray": RAY_CALL_MS}
        return replace(self, overhead_ms=over, meta={**self.meta, "overheads_assumed": {"ray": RAY_CALL_MS}})

    def with_free_cores(self, n: int) -> MachineProfile:
        """This profile where up to ``n`` servers each have cores of their own (processor sharing beyond)."""
        int_at_least("free cores", n)
        return replace(self, contention=(1.0,) * n, cores=n, key={**self.key, "cores": n, "what_if": "free cores"})

    @classmethod
    def from_latency(
        cls,
        target: LatencyProfile,
        drafter: LatencyProfile | None = None,
        acceptance_rate: float | None = None,
        *,
        names: tuple[str, str] = ("target", "drafter"),
        max_pass: int = DEFAULT_MAX_PASS,
        cores: int = 1,
    ) -> MachineProfile:
        """The old linear model: LatencyProfiles (ttft, tpot, per_token_ms), no contention, no overheads."""
        return cls(
            key={"what_if": "latency profiles"},
            target=ModelCosts.from_latency(names[0], target, max_pass),
            drafter=None if drafter is None else ModelCosts.from_latency(names[1], drafter, max_pass),
            acceptance_rate=acceptance_rate,
            cores=cores,
        )

    @classmethod
    def gpu_like(
        cls,
        step_ms: float,
        drafter_fraction: float,
        acceptance_rate: float,
        *,
        per_token_fraction: float = 0.0,
        devices: int = 8,
        max_pass: int = DEFAULT_MAX_PASS,
    ) -> MachineProfile:
        """A GPU-like device per server: a pass over k tokens costs ``step_ms`` (1 + per_token_fraction (k - 1)),
        prefill one step, the drafter ``drafter_fraction`` of the target, no contention between ``devices``."""
        target = LatencyProfile(step_ms, step_ms, step_ms * per_token_fraction)
        profile = cls.from_latency(target, target.scaled(drafter_fraction), acceptance_rate, max_pass=max_pass)
        return replace(profile, key={"what_if": "gpu-like", "gpu": f"{devices} devices"}, cores=devices)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "key": dict(self.key),
            "target": self.target.to_dict(),
            "drafter": None if self.drafter is None else self.drafter.to_dict(),
            "contention": list(self.contention),
            "overhead_ms": dict(self.overhead_ms),
            "per_token_ms": self.per_token_ms,
            "acceptance_rate": self.acceptance_rate,
            "ngram": dict(self.ngram),
            "cores": self.cores,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, d, where: str = "the machine profile") -> MachineProfile:
        if not isinstance(d, Mapping) or d.get("format") != FORMAT:
            raise ConfigError(f'{where} is not a specpar machine profile (expected "format": "{FORMAT}")')
        if not isinstance(d.get("target"), Mapping):
            raise ConfigError(f"{where} has no 'target' costs (re-run `specpar profile`)")
        drafter = d.get("drafter")
        try:
            return cls(
                key=d.get("key", {}),
                target=ModelCosts.from_dict(d["target"], f"{where}: target"),
                drafter=None if drafter is None else ModelCosts.from_dict(drafter, f"{where}: drafter"),
                contention=tuple(d.get("contention", (1.0,))),
                overhead_ms=d.get("overhead_ms", {}),
                per_token_ms=d.get("per_token_ms", 0.0),
                acceptance_rate=d.get("acceptance_rate"),
                ngram=d.get("ngram") or {},
                cores=d.get("cores", 1),
                meta=_meta(d),
            )
        except (TypeError, ValueError) as exc:  # ConfigError is a ValueError
            raise ConfigError(f"{where}: {exc}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON form (atomically)."""
        from specpar.prediction import profile_cache

        profile_cache.write(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> MachineProfile:
        """Read a profile's JSON file; a missing, unreadable or malformed file is one ConfigError naming it."""
        if not Path(path).is_file():
            raise ConfigError(f"machine profile {str(path)!r} does not exist (write one with `specpar profile`)")
        text = read_text(path, "machine profile")
        d = parse(text, f"machine profile {str(path)!r}")
        if isinstance(d, dict) and isinstance(d.get("machine"), dict):  # `specpar profile --out`: App. F's file
            d = d["machine"]
        return cls.from_dict(d, f"machine profile {str(path)!r}")


def load_or_build(
    path: str | os.PathLike | None = None,
    *,
    target=None,
    drafter=None,
    prompts: Sequence[Sequence[int]] | None = None,
    options=None,
    progress=None,
    refresh: bool = False,
) -> MachineProfile:
    """The machine profile to predict from: the file ``path`` when given; otherwise the ``target`` and ``drafter``
    models' from specpar's cache (:mod:`specpar.prediction.profile_cache`), measured on first need.

    prompts: the sample's token ids (default: :data:`profile_cache.SAMPLE_TEXTS` in the target's tokenizer);
    options: a MeasureOptions; progress: called with each step's label (default: a bar on stderr when it is a
    terminal); refresh: measure again even when the cache holds one.
    """
    if path is not None:
        return MachineProfile.load(path)
    if target is None:
        raise ConfigError("a machine profile needs a profile file or the models to measure (target=, drafter=)")
    from specpar.prediction import measure_pair, profile_cache

    ids = prompts if prompts is not None else profile_cache.sample_prompts(target)
    opts = options or measure_pair.MeasureOptions()
    key = profile_cache.profile_key(target, drafter, opts.measurement(ids))

    def measure() -> dict:
        with profile_cache.steps_shown(opts.steps(len(ids), int(key["cores"])), progress) as step:
            fig = measure_pair.measure_pair(target, drafter, ids, opts, step)
        return {"format": FORMAT, **fig.profile_fields(key)}

    return profile_cache.load_or_measure(key, measure, MachineProfile.from_dict, refresh=refresh)


def default_key(target, drafter=None) -> dict | None:
    """The cache key of the profile :func:`load_or_build` measures without prompts and options; None for a target
    without a tokenizer."""
    from specpar.prediction import measure_pair, profile_cache

    if as_model(target).tokenizer is None:
        return None
    measurement = measure_pair.MeasureOptions().measurement(profile_cache.sample_prompts(target))
    return profile_cache.profile_key(target, drafter, measurement)


def cached(target, drafter=None) -> MachineProfile | None:
    """The default measurement's profile of the ``target`` and ``drafter`` models if the cache holds one; else None."""
    from specpar.prediction import profile_cache

    key = default_key(target, drafter)
    if key is None or not profile_cache.cacheable(key):
        return None
    return profile_cache.read(profile_cache.cache_path(key), key, MachineProfile.from_dict)
