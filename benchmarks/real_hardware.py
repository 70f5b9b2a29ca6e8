"""Issue 10 item 4: measured non-SI / SI / DSI (`specpar bench` JSONL, Ray and threads) beside the virtual clock's
prediction from a `specpar profile` measured in the same placement (one core per model).

Two predictions: from the profile as measured (its acceptance rate, iid per position), and per prompt, with that
prompt's measured acceptance rate (mean of SI's and DSI's in that run) in place of the profile's, so that how
much of the gap comes from the acceptance varying across prompts is visible. With --calibrate (files written by
`bench --timeline`), the predictions calibrated in the same placement: latencies refit on the run's recorded calls
(of non-SI and SI, so that DSI is predicted out of sample; or of DSI), a cancelled target pass running to its end
(as on threads and Ray), each prompt's measured a; with --trace, also each prompt's acceptance pattern
(benchmarks/dsi_gap.py explains each step, call by call).

    python benchmarks/real_hardware.py --profile P.json --skip-first --run Ray=A.jsonl,B.jsonl --run threads=C.jsonl
    python benchmarks/real_hardware.py --profile P.json --skip-first --calibrate [--trace T.json] --run Ray=A.jsonl

--skip-first drops each file's first prompt: its first forward pass in each process pays a cold start (the
weights paged in: about 10 s for the target here) that lands on whichever algorithm runs first (non-SI, then SI
for the drafter), which would flatter DSI.

Prints a Markdown table (seconds per prompt, mean over the prompts; speedups as ratios of the means).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

ALGOS = ("nonsi", "si", "dsi")


def predict(profile: dict, a: float, k: int, n: int, repeats: int) -> dict:
    """Mean virtual-clock ms per algorithm for the profile's latencies at acceptance rate a."""
    plain = {"target": profile["target"], "drafter": profile["drafter"], "acceptance_rate": a}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(plain, f)
        f.flush()
        cmd = [sys.executable, "-m", "specpar", "simulate", "--profile", f.name, "--sp-degree", "1", "-N", str(n)]
        out = subprocess.run(cmd + ["-k", str(k), "--repeats", str(repeats), "--json"], capture_output=True, text=True)
    res = json.loads(out.stdout)["results"]
    return {algo: res[algo]["mean_ms"] for algo in ALGOS}


def load(paths: list[str], skip_first: bool) -> dict:
    """{(file, prompt_id): {algorithm: row}} from `specpar bench --out` files."""
    rows: dict = {}
    for path in paths:
        mine: dict = {}
        for line in open(path):
            r = json.loads(line)
            mine.setdefault((path, r["prompt_id"]), {})[r["algorithm"]] = r
        rows.update(list(mine.items())[1 if skip_first else 0 :])
    return rows


CALIBRATIONS = (
    (("nonsi", "si"), "latencies refit on non-SI's and SI's calls"),
    (("dsi",), "latencies refit on DSI's calls"),
)


def calibrated(rows: dict, profile_path: str, trace_path: str | None) -> tuple[list[dict], list[str]]:
    """Mean virtual-clock ms per algorithm, and labels, for the predictions calibrated in the same placement:
    latencies refit on the run's recorded calls (of non-SI and SI: DSI predicted out of sample; or of DSI), target
    passes that run to their end when cancelled, each prompt's measured a (and with a trace, its acceptance
    pattern, on DSI's refit)."""
    from dsi_gap import refit, simulate
    from specpar.prediction.pair_profile import PairProfile

    pair = PairProfile.load(profile_path)
    traces = json.load(open(trace_path)) if trace_path else None
    jobs = [(refit(rows, algos, pair), None, label) for algos, label in CALIBRATIONS]
    if traces:
        jobs.append((jobs[-1][0], traces, f"{CALIBRATIONS[-1][1]}, each prompt's acceptance pattern"))
    preds, labels = [], []
    for (t_lat, d_lat), trace, label in jobs:
        per = [
            simulate(
                r,
                t_lat,
                d_lat,
                statistics.mean(r[x]["acceptance_rate"] for x in ("si", "dsi")),
                {"target": "end"},
                trace[key[1]] if trace else None,
            )
            for key, r in rows.items()
        ]
        preds.append({algo: statistics.mean(pp[algo] for pp in per) for algo in ALGOS})
        labels.append(f"virtual clock calibrated: {label}, cancelled passes run to their end")
    return preds, labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", required=True)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--skip-first", action="store_true", help="drop each file's first (cold) prompt")
    p.add_argument("--run", action="append", required=True, help="NAME=FILE[,FILE...]: bench JSONL files")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="add the predictions calibrated in the same placement (bench --timeline files): latencies refit on "
        "the run's recorded calls, a cancelled target pass running to its end (benchmarks/dsi_gap.py)",
    )
    p.add_argument("--trace", help="with --calibrate: also with each prompt's acceptance pattern (dsi_gap.py's)")
    args = p.parse_args()
    profile = json.load(open(args.profile))
    a_profile = profile["acceptance_rate"]["geometric"]
    lines = [
        "| runtime | prompts | non-SI s | SI s | DSI s | DSI / SI | DSI / non-SI | per-prompt DSI / SI | "
        "per-prompt DSI / non-SI | same tokens |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in args.run:
        name, _, files = run.partition("=")
        rows = load(files.split(","), args.skip_first)
        first = next(iter(rows.values()))
        k, n = first["dsi"]["lookahead"], first["nonsi"]["target_forwards"]  # non-SI: one pass per token
        mean = {algo: statistics.mean(r[algo]["time_ms"] for r in rows.values()) / 1000 for algo in ALGOS}
        per = {
            b: [r[b]["time_ms"] / r["dsi"]["time_ms"] for r in rows.values()] for b in ("si", "nonsi")
        }  # per-prompt speedups of DSI
        same = all(r[algo]["same_tokens_as_nonsi"] for r in rows.values() for algo in ("si", "dsi"))
        lines.append(
            f"| {name} measured | {len(rows)} | {mean['nonsi']:.1f} | {mean['si']:.1f} | {mean['dsi']:.1f} | "
            f"{mean['si'] / mean['dsi']:.2f}x | {mean['nonsi'] / mean['dsi']:.2f}x | "
            f"{min(per['si']):.2f}-{max(per['si']):.2f} | {min(per['nonsi']):.2f}-{max(per['nonsi']):.2f} | "
            f"{'yes' if same else 'NO'} |"
        )
        preds = [predict(profile, a_profile, k, n, args.repeats)]
        label = [f"virtual clock, profile a = {a_profile:.3f}"]
        per_prompt = [
            predict(profile, statistics.mean(r[x]["acceptance_rate"] for x in ("si", "dsi")), k, n, args.repeats)
            for r in rows.values()
        ]
        preds.append({algo: statistics.mean(pp[algo] for pp in per_prompt) for algo in ALGOS})
        label.append("virtual clock, each prompt's measured a")
        if args.calibrate:
            more, labels = calibrated(rows, args.profile, args.trace)
            preds += more
            label += labels
        for lab, pr in zip(label, preds):
            s = {algo: pr[algo] / 1000 for algo in ALGOS}
            ratio = {algo: mean[algo] / s[algo] for algo in ALGOS}
            lines.append(
                f"| {name}: {lab} | | {s['nonsi']:.1f} ({ratio['nonsi']:.2f}) | {s['si']:.1f} ({ratio['si']:.2f}) | "
                f"{s['dsi']:.1f} ({ratio['dsi']:.2f}) | {s['si'] / s['dsi']:.2f}x | {s['nonsi'] / s['dsi']:.2f}x | | | |"
            )
    print("\n".join(lines))
    print("\n(in brackets: measured / predicted)")


if __name__ == "__main__":
    main()
