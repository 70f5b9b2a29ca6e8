"""How well the machine profile predicts real runs: every arm's predicted time beside its measured time, per prompt.

One engine (``units=1``, threads, ``--sp-degree`` target servers and the drafter: the same servers, cores and thread
settings for every arm), the pair's machine profile (specpar's cache, measured on first need, or ``--profile
FILE``). Round r runs prompt r with every arm, the arms' order rotating from round to round, each from a cold cache
(``engine.reset()``), greedy, N tokens (ignore_eos); each arm's tokens are checked equal to non-SI's. For each run:
the measured time (the generation's own clock, ``result.time_ms``) and the predicted time of the same configuration
on the same engine (:func:`specpar.prediction.auto.predict_request`: the algorithm's code on the virtual clock with
the profile's costs, for this prompt's length); for ``auto``, the time of what it chose.

Goals (issue 29): over every arm and prompt, median |predicted - measured| / measured <= 10% and worst <= 25%; the
predicted fastest arm is the measured fastest, or within 5% of it, on >= 9 of 10 prompts; ``auto`` >= 0.95x the
fastest arm on every prompt.

    python -m benchmarks prediction_accuracy                   # the default pair on llama.cpp, 10 HumanEval prompts
    python -m benchmarks prediction_accuracy --tiny            # the tiny transformers pair (tests/tiny_transformers.py)
"""

from __future__ import annotations

import contextlib
import random
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.runner import Arm, Benchmark

ARMS = {
    "nonsi": {"algorithm": "nonsi"},
    "si-k2": {"algorithm": "si", "lookahead": 2},
    "si-k4": {"algorithm": "si", "lookahead": 4},
    "dsi-sp1": {"algorithm": "dsi", "lookahead": 4, "sp_degree": 1},
    "dsi-sp2": {"algorithm": "dsi", "lookahead": 4, "sp_degree": 2},
    "ngram": {"algorithm": "si", "proposer": "ngram", "lookahead": 8},
    "tree": {"algorithm": "si", "tree": "2,2,1"},
    "auto": {"algorithm": "auto"},
}
GOALS = {"median": 0.10, "worst": 0.25, "fastest_within": 0.05, "fastest_prompts": 0.9, "auto": 0.95}


def options(p) -> None:
    p.add_argument("-N", "--max-tokens", type=int, default=64, help="tokens per generation (default 64)")
    p.add_argument("--sp-degree", type=int, default=2, help="the engine's target servers (default 2)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default all: {','.join(ARMS)})")
    p.add_argument("--tiny", action="store_true", help="the tiny transformers pair on synthetic prompts")
    p.add_argument("--backend", default=None, help="the default pair's backend (default: the engine's choice)")
    p.add_argument("--profile", default=None, help="a machine profile file (default: the cached one)")
    p.add_argument("--measure", action="store_true", help="measure the pair's profile first (the cache's replaced)")


def arms(args) -> list[Arm]:
    names = [a for a in args.arms.split(",") if a]
    unknown = [a for a in names if a not in ARMS]
    if unknown:
        raise SystemExit(f"prediction_accuracy: unknown arms {unknown}; the arms are {', '.join(ARMS)}")
    return [Arm(a, ARMS[a]) for a in names]


@contextlib.contextmanager
def session(args):
    """(engine, prompts as token ids): the pair loaded once, its profile read, or measured first (``--measure``: on
    the prompts after the measured ones, so that the sample is not the test) before any run is timed."""
    from specpar import Engine
    from specpar.backends.loading import load_pair
    from specpar.prediction.machine import MachineProfile, load_or_build
    from specpar.prediction.measure_pair import MeasureOptions

    with tempfile.TemporaryDirectory(prefix="specpar-tiny-") as folder:
        if args.tiny:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from tiny_transformers import save_tiny_pair

            target, drafter = load_pair(*save_tiny_pair(Path(folder)), dtype="float64", backend="transformers")
            sample = MeasureOptions().tokens  # the profile's greedy tokens per sample prompt
            texts = tiny_prompts(args.rounds, max_len=target.context_window - args.max_tokens - 1)
            texts += tiny_prompts(3, max_len=target.context_window - sample - 1, seed=1)
        else:
            from specpar.experiments import prompts

            target, drafter = load_pair(backend=args.backend, progress=False)
            texts = [p.text for p in prompts.load("humaneval", args.rounds + 3)]
        ids = [target.encode(t) for t in texts]
        if args.profile:
            profile = MachineProfile.load(args.profile)
        else:
            profile = load_or_build(target=target, drafter=drafter, prompts=ids[args.rounds :], refresh=args.measure)
        with Engine(target, drafter, sp_degree=args.sp_degree, runtime="threads", units=1, profile=profile) as engine:
            yield engine, ids[: args.rounds]


def tiny_prompts(count: int, max_len: int, seed: int = 0) -> list[str]:
    """Word prompts for the tiny pair's vocabulary (w0 .. w47): lengths from 8 to ``max_len``, half of them repeating
    a phrase (where the n-gram proposer finds matches)."""
    rng = random.Random(29 + seed)
    out = []
    for i in range(count):
        length = 8 + (max_len - 8) * i // max(1, count - 1)
        if i % 2:
            phrase = [f"w{rng.randrange(1, 48)}" for _ in range(6)]
            words = (phrase * (length // 6 + 1))[:length]
        else:
            words = [f"w{rng.randrange(1, 48)}" for _ in range(length)]
        out.append(" ".join(words))
    return out


def measure(arm: Arm, args, r: int) -> dict:
    from specpar import SamplingParams
    from specpar.core.config import SpeculativeConfig
    from specpar.prediction.auto import predict_request

    engine, prompts = args.session
    ids = prompts[r % len(prompts)]
    settings = dict(arm.settings)
    engine.reset()
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    result = engine.generate(ids, params, **settings)
    spec = SpeculativeConfig(**{"sp_degree": args.sp_degree, **settings})
    predicted = predict_request(engine, spec, len(ids), args.max_tokens)
    chose = getattr(result, "auto", None)
    return {
        "measured_ms": result.time_ms,
        "predicted_ms": predicted,
        "error": (predicted - result.time_ms) / result.time_ms,
        "prompt_tokens": len(ids),
        **breakdown(result),
        "tokens": list(result.tokens),
        "chose": None if chose is None else str(getattr(chose, "label", chose)),
    }


def breakdown(result) -> dict:
    """Where a run's time went, from its timeline: the target's first call (the prefill), the median of its later
    calls, the drafter's calls, and the time no call ran (the algorithm's own, the hand-offs), all ms."""
    timeline = [t for t in result.timeline if not t.cancelled]
    target = sorted((t for t in timeline if t.kind == "verify"), key=lambda t: t.start_ms)
    drafts = [t.end_ms - t.start_ms for t in timeline if t.kind == "draft"]
    busy, end = 0.0, 0.0
    for t in sorted(result.timeline, key=lambda t: t.start_ms):
        a, b = max(t.start_ms, end), t.end_ms
        if b > a:
            busy, end = busy + b - a, b
    later = [t.end_ms - t.start_ms for t in target[1:]]
    return {
        "first_target_call_ms": target[0].end_ms - target[0].start_ms if target else None,
        "target_call_median_ms": statistics.median(later) if later else None,
        "target_calls": len(target),
        "draft_calls_ms": sum(drafts),
        "outside_calls_ms": max(0.0, result.time_ms - busy),
    }


def summarize(results, args) -> dict:
    by = {a.arm.name: a for a in results}
    errors = [abs(e) for a in results if a.arm.name != "auto" for e in a.values("error")]
    same = all(a.values("tokens") == by["nonsi"].values("tokens") for a in results) if "nonsi" in by else None
    out = {
        "median_abs_error": statistics.median(errors),
        "worst_abs_error": max(errors),
        "worst_arm": max(
            (a for a in results if a.arm.name != "auto"), key=lambda a: max(map(abs, a.values("error")))
        ).arm.name,  # fmt: skip
        "every_arm_same_tokens_as_nonsi": same,
    }
    fixed = [a for a in results if a.arm.name != "auto"]
    agree, auto_ratios = [], []
    for r in range(args.rounds):
        measured = {a.arm.name: a.runs[r]["measured_ms"] for a in fixed}
        predicted = {a.arm.name: a.runs[r]["predicted_ms"] for a in fixed}
        best = min(measured.values())
        agree.append(measured[min(predicted, key=predicted.get)] <= best * (1 + GOALS["fastest_within"]))
        if "auto" in by:
            auto_ratios.append(best / by["auto"].runs[r]["measured_ms"])
    out["predicted_fastest_is_fastest_within_5pct"] = f"{sum(agree)}/{len(agree)}"
    if auto_ratios:
        out["auto_vs_fastest_per_prompt"] = [round(x, 3) for x in auto_ratios]
        out["auto_choices"] = by["auto"].values("chose")
    met = [
        out["median_abs_error"] <= GOALS["median"],
        out["worst_abs_error"] <= GOALS["worst"],
        sum(agree) >= GOALS["fastest_prompts"] * len(agree),
        not auto_ratios or min(auto_ratios) >= GOALS["auto"],
    ]
    out["goals"] = ", ".join(
        f"{what}: {'met' if ok else 'NOT met'}"
        for what, ok in zip(("median <= 10%", "worst <= 25%", "fastest >= 9/10", "auto >= 0.95x"), met)
    )
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "measured_ms": "the generation's time, ms (median over prompts)",
        "predicted_ms": "its prediction from the machine profile, ms",
        "error": "(predicted - measured) / measured",
        "prompt_tokens": "prompt length, tokens",
        "first_target_call_ms": "the target's first call (the prefill), ms",
        "target_call_median_ms": "the target's later calls, median ms",
        "target_calls": "the target's calls",
        "draft_calls_ms": "the drafter's calls, ms in all",
        "outside_calls_ms": "time no call ran, ms",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    rounds=10,
    session=session,
)
