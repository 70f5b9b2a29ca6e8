"""Issue 10 item 4: measured non-SI / SI / DSI (`specpar bench` JSONL, Ray and threads) beside the virtual clock's
prediction from a `specpar profile` measured in the same placement (one core per model).

For each --run NAME=FILES, the arms are its measurement and its predictions: from the profile as measured (its
acceptance rate, iid per position), and per prompt with that prompt's measured acceptance rate (mean of SI's and
DSI's in that run) in place of the profile's, so that how much of the gap comes from the acceptance varying across
prompts is visible. With --calibrate (files written by `bench --timeline`), the predictions calibrated in the same
placement: latencies refit on the run's recorded calls (of non-SI and SI, so that DSI is predicted out of sample;
or of DSI), a cancelled target pass running to its end (as on threads and Ray), each prompt's measured a; with
--trace, also each prompt's acceptance pattern (`python -m benchmarks dsi_gap` explains each step, call by call).

    python -m benchmarks real_hardware --profile P.json --skip-first --run Ray=A.jsonl,B.jsonl --run threads=C.jsonl
    python -m benchmarks real_hardware --profile P.json --skip-first --calibrate [--trace T.json] --run Ray=A.jsonl

--skip-first drops each file's first prompt: its first forward pass in each process pays a cold start (the weights
paged in: about 10 s for the target here) that lands on whichever algorithm runs first (non-SI, then SI for the
drafter), which would flatter DSI. Seconds are per prompt, the mean over the prompts; speedups ratios of the means.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from types import SimpleNamespace

from benchmarks.calibration import ALGOS, REPORTS, predicted, prompt_rate, read_runs, refit, seconds
from benchmarks.runner import Arm, Benchmark

CALIBRATIONS = (
    (("nonsi", "si"), "latencies refit on non-SI's and SI's calls"),
    (("dsi",), "latencies refit on DSI's calls"),
)


def options(p) -> None:
    p.add_argument("--profile", required=True, help="the `specpar profile` file behind the predictions")
    p.add_argument("--repeats", type=int, default=20, help="simulated runs per prediction (default 20)")
    p.add_argument("--skip-first", action="store_true", help="drop each file's first (cold) prompt")
    p.add_argument("--run", action="append", required=True, help="NAME=FILE[,FILE...]: bench JSONL files")
    p.add_argument("--calibrate", action="store_true", help="add the predictions calibrated in the same placement "
                   "(bench --timeline files): latencies refit on the run's recorded calls, a cancelled target pass "
                   "running to its end")  # fmt: skip
    p.add_argument("--trace", help="with --calibrate: also with each prompt's acceptance pattern (dsi_gap's)")


def arms(args) -> list[Arm]:
    out = []
    for spec in args.run:
        name = spec.partition("=")[0]
        out += [Arm(f"{name} measured", {"run": name, "predict": None}),
                Arm(f"{name}: virtual clock, the profile's a", {"run": name, "predict": "profile"}),
                Arm(f"{name}: virtual clock, each prompt's measured a", {"run": name, "predict": "prompt"})]  # fmt: skip
        if args.calibrate:
            for i, (_, label) in enumerate(CALIBRATIONS):
                out.append(Arm(f"{name}: calibrated, {label}", {"run": name, "predict": i}))
            if args.trace:
                out.append(Arm(f"{name}: calibrated, {CALIBRATIONS[-1][1]}, each prompt's acceptance pattern",
                               {"run": name, "predict": "trace"}))  # fmt: skip
    return out


@contextlib.contextmanager
def session(args):
    with open(args.profile) as f:
        profile = json.load(f)
    traces = None
    if args.trace:
        with open(args.trace) as f:
            traces = json.load(f)
    yield SimpleNamespace(profile=profile, runs=dict(read_runs(args.run, args.skip_first)), traces=traces)


def measure(arm: Arm, args, r: int) -> dict:
    rows = args.session.runs[arm.settings["run"]]
    measured = {algo: statistics.mean(x[algo]["time_ms"] for x in rows.values()) for algo in ALGOS}
    kind = arm.settings["predict"]
    if kind is None:
        per = {b: [x[b]["time_ms"] / x["dsi"]["time_ms"] for x in rows.values()] for b in ("si", "nonsi")}
        return {**seconds(measured), "prompts": len(rows),
                "per_prompt_dsi_vs_si": f"{min(per['si']):.2f}-{max(per['si']):.2f}",
                "per_prompt_dsi_vs_nonsi": f"{min(per['nonsi']):.2f}-{max(per['nonsi']):.2f}",
                "same_tokens": all(x[a]["same_tokens_as_nonsi"] for x in rows.values() for a in ("si", "dsi"))}  # fmt: skip
    return seconds(prediction(kind, rows, args), measured)


def prediction(kind, rows: dict, args) -> dict:
    """Mean virtual-clock ms per algorithm, as ``kind`` says: the profile's a, each prompt's a, or calibrated."""
    profile = args.session.profile
    first = next(iter(rows.values()))
    k, n = first["dsi"]["lookahead"], first["nonsi"]["target_forwards"]  # non-SI: one pass per token
    if kind == "profile":
        return predict(profile, profile["acceptance_rate"]["geometric"], k, n, args.repeats)
    if kind == "prompt":
        per = [predict(profile, prompt_rate(x), k, n, args.repeats) for x in rows.values()]
        return {algo: statistics.mean(p[algo] for p in per) for algo in ALGOS}
    from specpar.prediction.pair_profile import PairProfile

    algos = CALIBRATIONS[-1 if kind == "trace" else kind][0]
    t_lat, d_lat = refit(rows, algos, PairProfile.load(args.profile))
    return predicted(rows, t_lat, d_lat, {"target": "end"}, args.session.traces if kind == "trace" else None)


def predict(profile: dict, a: float, k: int, n: int, repeats: int) -> dict:
    """Mean virtual-clock ms per algorithm for the profile's latencies at acceptance rate a (`specpar simulate`)."""
    plain = {"target": profile["target"], "drafter": profile["drafter"], "acceptance_rate": a}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(plain, f)
        f.flush()
        cmd = [sys.executable, "-m", "specpar", "simulate", "--profile", f.name, "--sp-degree", "1", "-N", str(n)]
        out = subprocess.run(cmd + ["-k", str(k), "--repeats", str(repeats), "--json"], capture_output=True, text=True)
    res = json.loads(out.stdout)["results"]
    return {algo: res[algo]["mean_ms"] for algo in ALGOS}


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        **REPORTS,
        "per_prompt_dsi_vs_si": "measured: DSI's speedup over SI per prompt, range",
        "per_prompt_dsi_vs_nonsi": "measured: over non-SI",
        "same_tokens": "measured: every output equals non-SI's",
    },
    arms=arms,
    measure=measure,
    options=options,
    session=session,
)
