"""Issue 10 item 4: where DSI's measured time on real models departs from the virtual clock's prediction, call by
call.

Reads `specpar bench --timeline -o` files (every server call of every run: server, kind, start and end ms, tokens,
drafts, tokens its server had cached at its start, cancelled) and the `specpar profile` JSON behind the prediction,
and gives three accounts (the arms are 3's rows for each --run; 1 and 2 are in the summary):

1. Per-call costs: every recorded call priced by the profile's latency model (``LatencyProfile.call_ms``, the
   virtual clock's own) beside its measured time, summed by kind of call (target prefill, target pass on the
   cursor, target verification of drafts, drafts; cancelled calls apart), per algorithm; and priced again with
   the latencies refit on DSI's recorded calls (3d below).
2. DSI's target timeline, measured and on the virtual clock (profile, each prompt's acceptance rate): the wall time
   split into target passes that counted, target passes cancelled (work thrown away) and target idle.
3. Predictions, measured / predicted per algorithm, changing one thing at a time:
   a. the profile as measured, iid acceptance at each prompt's measured rate;
   b. + a cancelled target pass runs to its end (``cancel_frees={"target": "end"}``), as on threads and Ray;
   c. + latencies refit from the recorded calls of non-SI and SI (same placement; DSI's own calls not used);
   d. + latencies refit from DSI's own calls (its placement: both cores busy at once);
   e. + each prompt's real acceptance pattern (``--trace``: where the drafter agrees with the target, position by
      position, from one teacher-forced drafter pass per prompt) instead of iid draws.

    python -m benchmarks dsi_gap --profile P.json --skip-first --run Ray=R.jsonl [--trace T.json]
    python -m benchmarks dsi_gap --write-trace T.json --drafter DIR --run Ray=R.jsonl   # one drafter pass a prompt
"""

from __future__ import annotations

import contextlib
import json
import statistics
from collections import defaultdict
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np

from benchmarks.calibration import (
    ALGOS,
    REPORTS,
    SEEDS,
    VOCAB,
    is_target,
    predicted,
    prompt_rate,
    read_runs,
    refit,
    seconds,
    show,
)
from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.prediction.pair_profile import PairProfile

END = {"target": "end"}
VARIANTS = (  # (label, latencies: the profile's or refit on which calls, how a cancelled pass frees, the trace)
    ("a. profile, each prompt's acceptance rate", None, "now", False),
    ("b. + cancelled target passes run to their end", None, END, False),
    ("c. + latencies refit on non-SI and SI calls", ("nonsi", "si"), END, False),
    ("d. + latencies refit on DSI's calls", ("dsi",), END, False),
    ("e. + each prompt's real acceptance pattern (d's latencies)", ("dsi",), END, True),
)


def options(p) -> None:
    p.add_argument("--profile", help="the `specpar profile` file behind the prediction")
    p.add_argument("--skip-first", action="store_true", help="drop each file's first (cold) prompt")
    p.add_argument("--run", action="append", required=True, help="NAME=FILE[,FILE...]: bench --timeline files")
    p.add_argument("--trace", help="the acceptance trace --write-trace wrote")
    p.add_argument("--write-trace", metavar="FILE", help="write the acceptance trace instead (with --drafter)")
    p.add_argument("--drafter", metavar="DIR", help="with --write-trace: the drafter's directory")


def arms(args) -> list[Arm]:
    if args.write_trace:
        return [Arm("acceptance trace", {"write": args.write_trace})]
    out = []
    for spec in args.run:
        name = spec.partition("=")[0]
        out.append(Arm(f"{name}: measured", {"run": name, "variant": None}))
        for i, (label, *_, trace) in enumerate(VARIANTS):
            if args.trace or not trace:
                out.append(Arm(f"{name}: {label}", {"run": name, "variant": i}))
    return out


@contextlib.contextmanager
def session(args):
    pair = PairProfile.load(args.profile) if args.profile else None
    traces = None
    if args.trace:
        with open(args.trace) as f:
            traces = json.load(f)
    yield SimpleNamespace(runs=dict(read_runs(args.run, args.skip_first)), pair=pair, traces=traces, fits={})


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    if "write" in arm.settings:
        return write_trace(arm.settings["write"], args.drafter, next(iter(s.runs.values())))
    rows = s.runs[arm.settings["run"]]
    measured = {algo: statistics.mean(x[algo]["time_ms"] for x in rows.values()) for algo in ALGOS}
    if arm.settings["variant"] is None:
        return seconds(measured)
    _, fit_on, cancel, use_trace = VARIANTS[arm.settings["variant"]]
    t_lat, d_lat = (s.pair.target, s.pair.drafter) if fit_on is None else fitted(s, arm.settings["run"], fit_on)
    return seconds(predicted(rows, t_lat, d_lat, cancel, s.traces if use_trace else None), measured)


def fitted(s, run: str, algos) -> tuple[LatencyProfile, LatencyProfile]:
    key = (run, algos)
    if key not in s.fits:
        s.fits[key] = refit(s.runs[run], algos, s.pair)
    return s.fits[key]


def summarize(results, args) -> dict:
    """Accounts 1 and 2 for each run, and the refit latencies."""
    s = args.session
    if args.write_trace:
        return {}
    out = {"profile": f"target {show(s.pair.target)}; drafter {show(s.pair.drafter)}; a = {s.pair.acceptance_rate:.3f}"}
    for name, rows in s.runs.items():
        for algos in (("nonsi", "si"), ("dsi",)):
            t, d = fitted(s, name, algos)
            out[f"{name}: latencies refit on {', '.join(algos)}"] = f"target {show(t)}; drafter {show(d)}"
        out[f"{name}: 1. calls, measured beside the profile's and the refit (DSI's calls) price"] = call_costs(
            rows, s.pair, fitted(s, name, ("dsi",)))  # fmt: skip
        out[f"{name}: 2. DSI's target time per prompt, s"] = timeline_split(rows, s.pair)
    return out


# -- 1. calls priced by the profile ----------------------------------------------------------------------------------
def price(rec: dict, lat: LatencyProfile) -> float:
    """The virtual clock's time for a recorded call (LatencyProfile.call_ms on a stand-in of the call)."""
    call = SimpleNamespace(
        kind=rec["kind"], context=range(rec["tokens"]), n_drafts=rec["drafts"], k=rec["drafts"], extra_tokens=0
    )
    return lat.call_ms(call, rec["cached"])


def category(rec: dict) -> str:
    if rec["kind"] == "draft":
        name = "draft, cold" if rec["cached"] == 0 else "draft"
    elif rec["cached"] == 0:
        name = "target prefill"
    else:
        name = "target verification" if rec["drafts"] else "target pass on the cursor"
    return name + (" (cancelled)" if rec["cancelled"] else "")


def call_costs(rows: dict, pair: PairProfile, fit: tuple[LatencyProfile, LatencyProfile]) -> list[dict]:
    """Per algorithm and kind of call: how many, their mean new tokens and drafts, and their total measured time
    beside the profile's price and the refit latencies' price (``fit``: target, drafter), s."""
    out = []
    for algo in ALGOS:
        acc = defaultdict(lambda: [0, 0, 0, 0.0, 0.0, 0.0])
        for r in rows.values():
            for rec in r[algo]["timeline"]:
                a = acc[category(rec)]
                lat, refit_lat = (pair.target, fit[0]) if is_target(rec) else (pair.drafter, fit[1])
                a[0] += 1
                a[1] += rec["tokens"] - rec["cached"]
                a[2] += rec["drafts"]
                a[3] += (rec["end_ms"] - rec["start_ms"]) / 1000
                a[4] += price(rec, lat) / 1000
                a[5] += price(rec, refit_lat) / 1000
        for cat in sorted(acc):
            n, new, drafts, meas, prof, refit_s = acc[cat]
            out.append({"algorithm": algo, "call": cat, "calls": n, "new_tokens_per_call": round(new / n, 1),
                        "drafts_per_call": round(drafts / n, 1), "measured_s": round(meas, 1),
                        "profile_s": round(prof, 1), "measured_over_profile": round(meas / prof, 2),
                        "refit_s": round(refit_s, 1), "measured_over_refit": round(meas / refit_s, 2)})  # fmt: skip
    return out


# -- 2. DSI's target timeline ---------------------------------------------------------------------------------------
def split(timeline: list[dict], wall_ms: float) -> tuple[float, float, float]:
    """(target ms in passes that counted, in cancelled passes, idle) over a run of ``wall_ms`` (one target server)."""
    done = sum(r["end_ms"] - r["start_ms"] for r in timeline if is_target(r) and not r["cancelled"])
    lost = sum(r["end_ms"] - r["start_ms"] for r in timeline if is_target(r) and r["cancelled"])
    return done, lost, wall_ms - done - lost


def timeline_split(rows: dict, pair: PairProfile) -> dict:
    """DSI's wall time split on the target, measured and on the virtual clock (profile, cancelled passes as
    measured: to their end), s per prompt: [wall, target passes that counted, cancelled, target idle]."""
    m, v = np.zeros(4), np.zeros(4)
    for r in rows.values():
        row = r["dsi"]
        m += [row["time_ms"], *split(row["timeline"], row["time_ms"])]
        prompt = [1] * row["prompt_tokens"]
        for seed in range(SEEDS):
            target = SimulatedModel(VOCAB, seed=seed, latency=pair.target)
            out = generate(prompt, target, target.drafter(prompt_rate(r), pair.drafter, seed=seed + 1000),
                           algorithm="dsi", lookahead=row["lookahead"], sp_degree=1, max_tokens=len(row["tokens"]),
                           cancel_frees=END)  # fmt: skip
            v += np.array([out.time_ms, *split([asdict(x) for x in out.timeline], out.time_ms)]) / SEEDS
    n = len(rows)
    return {"columns": ["wall", "target passes that counted", "target passes cancelled", "target idle"],
            "measured": [round(float(x) / n / 1000, 1) for x in m],
            "virtual clock (profile, cancelled passes to their end)": [round(float(x) / n / 1000, 1) for x in v]}  # fmt: skip


# -- the acceptance trace -----------------------------------------------------------------------------------------------
def write_trace(path: str, drafter_dir: str, rows: dict) -> dict:
    """{prompt_id: [1 if the drafter's greedy token from the right prefix is the target's, else 0 per position]}
    from one teacher-forced drafter pass over each prompt and non-SI's output (the target's own tokens)."""
    import torch

    from specpar.backends.transformers_model import TransformersModel
    from specpar.experiments import prompts

    drafter = TransformersModel(drafter_dir, dtype="float32")
    by_id = {p.id: p for p in prompts.load("humaneval", 164)}
    module = drafter.module_on("cpu")
    traces = {}
    for (_, pid), r in rows.items():
        ids, out = by_id[pid].token_ids(drafter), r["nonsi"]["tokens"]
        assert len(ids) == r["nonsi"]["prompt_tokens"], pid
        with torch.no_grad():
            logits = module(input_ids=torch.tensor([ids + out[:-1]])).logits[0, len(ids) - 1 :]
        traces[pid] = [int(t == o) for t, o in zip(logits.argmax(-1).tolist(), out)]
    with open(path, "w") as f:
        json.dump(traces, f)
    return {"agreements": {pid: f"{sum(t)} of {len(t)}" for pid, t in traces.items()}, "written": path}


BENCHMARK = Benchmark(
    description=__doc__,
    reports={**REPORTS, "agreements": "--write-trace: positions where the drafter agrees, per prompt"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
