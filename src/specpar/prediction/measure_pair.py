"""Measuring a target/drafter pair on this machine into the figures of a machine profile, step by step.

:func:`measure_pair` runs :mod:`specpar.prediction.measure`'s measurements in this order, each a progress step:

1. per sample prompt, the target's greedy decoding by non-SI, then the drafter's prefill of the prompt and its greedy
   token at each of the target's positions (its direct acceptance, greedy SI's walks and App. F.2's exact-match
   prefix, which ends at its first miss: the drafter's own greedy decoding is not run);
2. both models' prefill of prompts of a few lengths at each thread count the engine uses (all cores, one);
3. v(k) for k = 1..K of both models at each of those thread counts;
4. the contention of 1..cores + 1 target servers at once;
5. the runtimes' per-call overheads (threads; Ray when asked);
6. the n-gram proposer's rates on the target's outputs (no model pass).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, fields

from specpar.algorithms.checks import check_context_window
from specpar.backends.cpu_threads import cpu_cores
from specpar.core.errors import ConfigError
from specpar.core.model import as_model
from specpar.core.numbers import is_int
from specpar.prediction import measure, pair_profile, profile_cache

WALKS = (2, 4, 8)  # the lookaheads of greedy SI's walks over the drafter's hits
PROFILE_WALK = 4  # the walk whose rate is the profile's acceptance rate


@dataclass(frozen=True)
class MeasureOptions:
    """How much to measure.

    tokens: greedy tokens per sample prompt; prefill_lengths: the prompt lengths whose prefill is timed (those the
    context windows and the sample allow); max_pass: K, the longest pass timed; repeats: timings of each pass length
    (median); lookahead: the drafts of App. F.1's verification pass; runtime: "threads" (real models) or "virtual"
    (simulated ones); overheads: the runtimes whose round trip is measured; ngram_lookahead: drafts per lookup.
    """

    tokens: int = 48
    prefill_lengths: tuple[int, ...] = (32, 128, 256)
    max_pass: int = 10
    repeats: int = 3
    lookahead: int = 5
    runtime: str = "threads"
    overheads: tuple[str, ...] = ("threads",)
    ngram_lookahead: int = 8

    def __post_init__(self):
        for name in ("tokens", "max_pass", "repeats", "lookahead", "ngram_lookahead"):
            if not is_int(getattr(self, name), 1):
                raise ConfigError(f"measuring a pair needs {name} >= 1, got {getattr(self, name)!r}")
        if self.max_pass < self.lookahead + 1:
            raise ConfigError(f"the longest pass timed ({self.max_pass}) must cover a verification of {self.lookahead} "
                              f"drafts ({self.lookahead + 1} tokens)")  # fmt: skip
        if self.tokens < self.max_pass + 1:
            raise ConfigError(f"the greedy tokens per prompt ({self.tokens}) must exceed the longest pass timed "
                              f"({self.max_pass}): the passes are timed over them")  # fmt: skip

    def measurement(self, prompts: Sequence[Sequence[int]]) -> dict:
        """What a profile measured so on ``prompts`` is keyed by: every option but ``overheads`` (the profile records
        those) and the sample's fingerprint."""
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "overheads"}
        options["prefill_lengths"] = list(self.prefill_lengths)  # as JSON keeps it
        return {"options": options, "sample": profile_cache.sample_fingerprint(prompts)}

    def steps(self, prompts: int, cores: int) -> int:
        """How many progress steps :func:`measure_pair` reports."""
        return 2 * prompts + 4 * len(measure.thread_counts(cores)) + 1 + len(self.overheads)


@dataclass
class PairFigures:
    """What :func:`measure_pair` measured (ms; per model "target" / "drafter").

    prefill: {model: {threads: [(prompt_tokens, ms), ...]}}; passes: {model: {threads: (v(1), ..., v(K))}};
    steps: {model: the greedy decodings' one-token steps}; sample_prefill: {model: [(prompt_tokens, ms) of each
    sample prompt's prefill, on all cores]}; outside_ms: non-SI's time outside its calls per output token;
    acceptance: App. F.2's estimates and "walk": {k: greedy SI's rate at lookahead k}; app_f: the App. F profile.
    """

    prefill: dict = field(default_factory=lambda: {"target": {}, "drafter": {}})
    passes: dict = field(default_factory=lambda: {"target": {}, "drafter": {}})
    steps: dict = field(default_factory=lambda: {"target": [], "drafter": []})
    sample_prefill: dict = field(default_factory=lambda: {"target": [], "drafter": []})
    contention: tuple = (1.0,)
    overhead_ms: dict = field(default_factory=dict)
    outside_ms: float = 0.0
    acceptance: dict = field(default_factory=dict)
    ngram: dict = field(default_factory=dict)
    app_f: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)

    def profile_fields(self, key) -> dict:
        """The machine profile's JSON fields (without the format), keyed ``key``: the acceptance rate greedy SI's at
        lookahead PROFILE_WALK; App. F.2's estimates, the other walks and the App. F profile in ``meta``."""

        def costs(role: str) -> dict:
            prefill = {str(t): sorted(points) for t, points in sorted(self.prefill[role].items())}
            return {"name": self.names.get(role, role), "prefill_ms": next(iter(prefill.values())),
                    "pass_ms": {str(t): list(v) for t, v in sorted(self.passes[role].items())},
                    "prefill_by_threads": prefill}  # fmt: skip

        steps = {role: statistics.median(v) for role, v in self.steps.items() if v}
        return {
            "key": dict(key),
            "target": costs("target"),
            "drafter": costs("drafter"),
            "contention": list(self.contention),
            "overhead_ms": dict(self.overhead_ms),
            "per_token_ms": self.per_token_ms,
            "acceptance_rate": self.acceptance["walk"][PROFILE_WALK],
            "ngram": {k: self.ngram[k] for k in ("match_rate", "acceptance_rate")},
            "cores": self.meta["cores"],
            "meta": {**self.meta, "acceptance": self.acceptance, "ngram": self.ngram, "median_step_ms": steps,
                     "sample_prefill_ms": self.sample_prefill, "outside_ms_per_token": self.outside_ms,
                     "overheads_measured": sorted(self.overhead_ms), "app_f": self.app_f},
        }  # fmt: skip

    @property
    def per_token_ms(self) -> float:
        """The algorithm's own time per output token, the threads runtime's hand-off per call (one a token) out."""
        return max(0.0, self.outside_ms - self.overhead_ms.get("threads", 0.0))


def measure_pair(
    target,
    drafter,
    prompts: Sequence[Sequence[int]],
    options: MeasureOptions = MeasureOptions(),
    progress: Callable[[str], None] | None = None,
) -> PairFigures:
    """Measure ``target`` and ``drafter`` (models) on this machine over ``prompts`` (token ids; module docstring)."""
    if not prompts:
        raise ConfigError("measuring a pair needs at least one sample prompt")
    for ids in prompts:  # each prompt and its greedy tokens fit in both models' context windows
        check_context_window(len(ids), options.tokens + 1, target, drafter)
    step, spent = _timed_steps(progress or (lambda label: None))
    t0, load0, cores = time.perf_counter(), _load(), cpu_cores()
    fig = PairFigures(
        names={"target": as_model(target).name or "target", "drafter": as_model(drafter).name or "drafter"}
    )
    outs = _decode(target, drafter, prompts, options, fig, step, cores)
    sample = [t for ids, out in zip(prompts, outs) for t in (*ids, *out)]
    lengths = _lengths(options.prefill_lengths, len(sample), target, drafter)
    seq, held = list(prompts[0]) + outs[0], len(prompts[0]) + options.tokens - options.max_pass
    for role, model in (("target", target), ("drafter", drafter)):
        for n in measure.thread_counts(cores):
            ms = measure.prefill_ms(model, [sample[:m] for m in lengths], options.runtime, n)
            fig.prefill[role][n] = list(zip(lengths, ms))
            step(f"{role} prefills of {', '.join(map(str, lengths))} tokens, {n} thread(s)")
            fig.passes[role][n] = _passes(model, seq, held, n, options, len(prompts[0]))
            step(f"{role} passes over 1..{options.max_pass} tokens, {n} thread(s)")
    fig.contention = measure.contention(target, seq, held, cores + 1, options.runtime, prompt_len=len(prompts[0]))
    step(f"contention of 1..{cores + 1} servers")
    for runtime in options.overheads:
        fig.overhead_ms[runtime] = measure.call_overhead_ms(runtime)
        step(f"{runtime} runtime's overhead per call")
    rates = [measure.ngram_rates(p, o, options.ngram_lookahead) for p, o in zip(prompts, outs)]
    fig.ngram = _pooled(rates)
    fig.app_f = _app_f(target, drafter, fig, len(prompts), options, cores)
    fig.meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_average": [load0, _load()],
                "seconds": time.perf_counter() - t0, "step_seconds": spent, "prompts": len(prompts),
                "tokens": options.tokens,
                "cores": cores}  # fmt: skip
    return fig


def _decode(target, drafter, prompts, options: MeasureOptions, fig: PairFigures, step, cores: int) -> list[list[int]]:
    """Step 1: the target's greedy decoding of every prompt, the drafter's prefill of it and hits on the target's
    output; returns the target's outputs."""
    outs, hits, outside = [], [], []
    for i, ids in enumerate(prompts):
        with closing(target.server(f"sample{i}")) as server:
            run = measure.greedy_run(target, server, ids, options.tokens, options.runtime, cores)
        outs.append(run["tokens"])
        fig.sample_prefill["target"].append((len(ids), run["prefill_ms"]))
        fig.steps["target"] += run["steps_ms"]
        outside.append(run["outside_ms"])
        step("target decodes a sample prompt")
        with closing(drafter.server(f"sample{i}")) as server, measure.threads(drafter, [server], cores):
            ms, mine = measure.drafter_hits(server, ids, run["tokens"], options.runtime)
        hits.append(mine)
        fig.sample_prefill["drafter"].append((len(ids), ms))
        step("drafter's acceptance on it")
    fig.outside_ms = statistics.fmean(outside)
    prefixes = [next((j for j, hit in enumerate(h) if not hit), len(h)) for h in hits]
    fig.acceptance = pair_profile.acceptance_of(prefixes, sum(map(sum, hits)), sum(map(len, hits)))
    fig.acceptance["walk"] = {k: _pooled([measure.walk(h, k) for h in hits])["acceptance_rate"] for k in WALKS}
    return outs


def _lengths(wanted: Sequence[int], available: int, *models) -> list[int]:
    """The prefill lengths to time: those of ``wanted`` the sample's ``available`` tokens and the models' context
    windows allow, else the longest allowed."""
    windows = [as_model(m).context_window for m in models]
    most = min([available, *(w - 1 for w in windows if w is not None)])
    return sorted({n for n in wanted if n <= most} or {most})


def _passes(model, seq, held: int, n_threads: int, options: MeasureOptions, prompt_len: int) -> tuple[float, ...]:
    """v(1..K) of a fresh server of ``model`` holding ``seq[:held]``, its passes given ``n_threads`` threads."""
    with measure.one_server(model, "passes", options.runtime, n_threads) as (_, rt, pool):
        return measure.pass_costs(rt, pool, seq, held, options.max_pass, options.repeats, prompt_len)


def _pooled(rates: list[dict]) -> dict:
    """Several prompts' walks (:func:`measure.ngram_rates`, :func:`measure.walk`) as one: counts summed, rates
    recomputed."""
    total = {k: sum(r.get(k, 0) for r in rates) for k in ("steps", "lookups", "drafted", "accepted", "tested")}
    total["matched"] = sum(round(r.get("match_rate", 0.0) * r.get("lookups", 0)) for r in rates)
    return {
        "match_rate": total["matched"] / total["lookups"] if total["lookups"] else 0.0,
        "acceptance_rate": total["accepted"] / total["tested"] if total["tested"] else 0.0,
        "accepted_share": total["accepted"] / total["drafted"] if total["drafted"] else 0.0,
        **{k: total[k] for k in ("steps", "drafted", "accepted")},
    }


def _app_f(target, drafter, fig: PairFigures, prompts: int, options: MeasureOptions, cores: int) -> dict:
    """App. F's profile from the figures: TTFT the prefills, TPOT the median step, the verification of
    ``options.lookahead`` drafts v(lookahead + 1), all on all cores."""

    def model(role: str, m) -> dict:
        ttft = statistics.fmean(ms for _, ms in fig.sample_prefill[role])
        tpot = statistics.median(fig.steps[role]) if fig.steps[role] else fig.passes[role][cores][0]
        verify = fig.passes[role][cores][options.lookahead]
        figures = pair_profile.latency(ttft, tpot, verify, options.lookahead)
        return {"name": as_model(m).name or role, "device": as_model(m).device or "cpu", **figures}

    return pair_profile.profile(
        model("target", target), model("drafter", drafter), fig.acceptance, prompts, options.tokens, options.lookahead
    )


def _timed_steps(progress: Callable[[str], None]) -> tuple[Callable[[str], None], list]:
    """``progress`` that also records each step's label and seconds since the one before in the list returned
    beside it (the profile's ``meta["step_seconds"]``)."""
    spent, last = [], [time.perf_counter()]

    def step(label: str) -> None:
        now = time.perf_counter()
        spent.append([label, round(now - last[0], 3)])
        last[0] = now
        progress(label)

    return step, spent


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not Unix
        return []
