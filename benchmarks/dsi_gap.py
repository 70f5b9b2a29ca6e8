"""Issue 10 item 4: where DSI's measured time on real models departs from the virtual clock's prediction, call by
call.

Reads `specpar bench --timeline --out` files (every server call of every run: server, kind, start and end ms,
tokens, drafts, tokens its server had cached at its start, cancelled) and the `specpar profile` JSON behind the
prediction, and prints three accounts:

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

    python benchmarks/dsi_gap.py --profile P.json --skip-first --run Ray=R.jsonl [--trace T.json]
    python benchmarks/dsi_gap.py --write-trace T.json --drafter DIR --run Ray=R.jsonl   # one drafter pass a prompt
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np

from real_hardware import ALGOS, load
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.backends.simulated import SimulatedDrafter, SimulatedLM
from specpar.prediction.pair_profile import PairProfile

SEEDS = 20  # iid acceptance draws per prompt
VOCAB = 1000


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


def is_target(rec: dict) -> bool:
    return rec["server"].startswith("target")


def call_costs(rows: dict, pair: PairProfile, fitted: tuple[LatencyProfile, LatencyProfile]) -> list[str]:
    """Per algorithm and kind of call: how many, their mean new tokens and drafts, and their total measured time
    beside the profile's price and the refit latencies' price (``fitted``: target, drafter)."""
    lines = [
        "| algorithm | call | calls | new tokens / call | drafts / call | measured s | profile s | measured / profile "
        "| refit s | measured / refit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for algo in ALGOS:
        acc = defaultdict(lambda: [0, 0, 0, 0.0, 0.0, 0.0])
        for r in rows.values():
            for rec in r[algo]["timeline"]:
                a = acc[category(rec)]
                lat, fit = (pair.target, fitted[0]) if is_target(rec) else (pair.drafter, fitted[1])
                a[0] += 1
                a[1] += rec["tokens"] - rec["cached"]
                a[2] += rec["drafts"]
                a[3] += (rec["end_ms"] - rec["start_ms"]) / 1000
                a[4] += price(rec, lat) / 1000
                a[5] += price(rec, fit) / 1000
        for cat in sorted(acc):
            n, new, drafts, meas, prof, refit_s = acc[cat]
            lines.append(
                f"| {algo} | {cat} | {n} | {new / n:.1f} | {drafts / n:.1f} | {meas:.1f} | {prof:.1f} | "
                f"{meas / prof:.2f} | {refit_s:.1f} | {meas / refit_s:.2f} |"
            )
    return lines


# -- 2. DSI's target timeline ---------------------------------------------------------------------------------------
def split(timeline: list[dict], wall_ms: float) -> tuple[float, float, float]:
    """(target ms in passes that counted, in cancelled passes, idle) over a run of ``wall_ms`` (one target server)."""
    done = sum(r["end_ms"] - r["start_ms"] for r in timeline if is_target(r) and not r["cancelled"])
    lost = sum(r["end_ms"] - r["start_ms"] for r in timeline if is_target(r) and r["cancelled"])
    return done, lost, wall_ms - done - lost


# -- 3. the virtual clock ---------------------------------------------------------------------------------------------
class TraceDrafter(SimulatedDrafter):
    """A greedy drafter that agrees with the target exactly where the real drafter did: at position i of the
    target's own output iff ``agrees[i]`` (drafted from the right prefix; what follows a wrong draft is
    rejected with it, whatever it is)."""

    def __init__(self, target: SimulatedModel, prompt, agrees, latency: LatencyProfile):
        super().__init__(target, 1.0, latency)
        h, self.agree = target.prefix_hash(prompt), set()
        for token, ok in zip(target.greedy_tokens(prompt, len(agrees)), agrees):
            if ok:
                self.agree.add(h)
            h = target.extend(h, token)

    def disagree(self, h: int, mode: int) -> int:
        return mode if h in self.agree else (mode + 1) % self.vocab_size

    def greedy_run(self, h: int, k: int, hashes: list[int]) -> list[int]:
        return SimulatedLM.greedy_run(self, h, k, hashes)


def simulate(row: dict, target_lat, drafter_lat, a: float, cancel, trace=None) -> dict:
    """Mean virtual-clock ms per algorithm for one prompt (SEEDS iid draws, or the trace's one pattern)."""
    k, n, prompt = row["dsi"]["lookahead"], len(row["nonsi"]["tokens"]), [1] * row["nonsi"]["prompt_tokens"]
    out = {}
    for algo in ALGOS:
        times = []
        for seed in range(1 if trace is not None else SEEDS):
            target = SimulatedModel(VOCAB, seed=seed, latency=target_lat)
            drafter = (
                TraceDrafter(target, prompt, trace, drafter_lat)
                if trace is not None
                else target.drafter(a, drafter_lat, seed=seed + 1000)
            )
            kw = dict(algorithm=algo, lookahead=k if algo != "nonsi" else None, sp_degree=1, max_tokens=n)
            times.append(generate(prompt, target, drafter, cancel_frees=cancel, **kw).time_ms)
        out[algo] = statistics.mean(times)
    return out


def refit(rows: dict, algos, pair: PairProfile) -> tuple[LatencyProfile, LatencyProfile]:
    """Target and drafter latencies fitted (least squares) to the completed calls of ``algos``: a warm target
    pass tpot + per_token x (new tokens - 1), a prefill ttft + per_token x drafts; a warm draft of k tokens
    tpot x k + per_token x (new tokens - 1), a cold one ttft + tpot x (k - 1)."""
    recs = [rec for r in rows.values() for algo in algos for rec in r[algo]["timeline"] if not rec["cancelled"]]
    ms = lambda rec: rec["end_ms"] - rec["start_ms"]  # noqa: E731
    warm_t = [rec for rec in recs if is_target(rec) and rec["cached"]]
    x = np.array([[1.0, max(rec["tokens"] - rec["cached"], 1) - 1] for rec in warm_t])
    tpot, per = np.linalg.lstsq(x, np.array([ms(rec) for rec in warm_t]), rcond=None)[0]
    cold = [ms(rec) - per * rec["drafts"] for rec in recs if is_target(rec) and not rec["cached"]]
    target = LatencyProfile(statistics.mean(cold) if cold else pair.target.ttft_ms, float(tpot), max(float(per), 0))
    warm_d = [rec for rec in recs if not is_target(rec) and rec["cached"]]
    if not warm_d:
        return target, pair.drafter
    x = np.array([[rec["drafts"], max(rec["tokens"] - rec["cached"], 1) - 1] for rec in warm_d], dtype=float)
    d_tpot, d_per = np.linalg.lstsq(x, np.array([ms(rec) for rec in warm_d]), rcond=None)[0]
    cold = [ms(rec) - d_tpot * (rec["drafts"] - 1) for rec in recs if not is_target(rec) and not rec["cached"]]
    drafter = LatencyProfile(statistics.mean(cold), float(d_tpot), max(float(d_per), 0))
    return target, drafter


def show(lat: LatencyProfile) -> str:
    return f"TTFT {lat.ttft_ms:.0f} ms, TPOT {lat.tpot_ms:.0f} ms, +{lat.per_token_ms:.0f} ms per extra token"


def predictions(name: str, rows: dict, pair: PairProfile, traces: dict | None) -> list[str]:
    measured = {algo: statistics.mean(r[algo]["time_ms"] for r in rows.values()) for algo in ALGOS}
    a_of = {key: statistics.mean(r[x]["acceptance_rate"] for x in ("si", "dsi")) for key, r in rows.items()}
    fit_base, fit_dsi = refit(rows, ("nonsi", "si"), pair), refit(rows, ("dsi",), pair)
    print(f"{name}: refit on non-SI + SI calls: target {show(fit_base[0])}; drafter {show(fit_base[1])}")
    print(f"{name}: refit on DSI's calls: target {show(fit_dsi[0])}; drafter {show(fit_dsi[1])}")
    end = {"target": "end"}
    variants = [
        ("a. profile, each prompt's acceptance rate", pair.target, pair.drafter, "now", False),
        ("b. + cancelled target passes run to their end", pair.target, pair.drafter, end, False),
        ("c. + latencies refit on non-SI and SI calls", *fit_base, end, False),
        ("d. + latencies refit on DSI's calls", *fit_dsi, end, False),
    ]
    if traces:
        variants.append(("e. + each prompt's real acceptance pattern (d's latencies)", *fit_dsi, end, True))
    lines = [
        f"| {name} | non-SI s | SI s | DSI s | DSI / SI | DSI / non-SI |",
        "|---|---|---|---|---|---|",
        f"| measured ({len(rows)} prompts) | {measured['nonsi'] / 1000:.1f} | {measured['si'] / 1000:.1f} | "
        f"{measured['dsi'] / 1000:.1f} | {measured['si'] / measured['dsi']:.2f}x | "
        f"{measured['nonsi'] / measured['dsi']:.2f}x |",
    ]
    for label, t_lat, d_lat, cancel, use_trace in variants:
        per = [
            simulate(r, t_lat, d_lat, a_of[key], cancel, traces[key[1]] if use_trace else None)
            for key, r in rows.items()
        ]
        p = {algo: statistics.mean(x[algo] for x in per) for algo in ALGOS}
        cells = " | ".join(f"{p[algo] / 1000:.1f} ({measured[algo] / p[algo]:.2f})" for algo in ALGOS)
        lines.append(f"| {label} | {cells} | {p['si'] / p['dsi']:.2f}x | {p['nonsi'] / p['dsi']:.2f}x |")
    lines.append("\n(in brackets: measured / predicted)")
    return lines


def timeline_split(name: str, rows: dict, pair: PairProfile) -> list[str]:
    """DSI's wall time split on the target, measured and on the virtual clock (profile, cancelled passes as
    measured: to their end)."""
    m, v = np.zeros(4), np.zeros(4)
    for r in rows.values():
        row = r["dsi"]
        m += [row["time_ms"], *split(row["timeline"], row["time_ms"])]
        a = statistics.mean(r[x]["acceptance_rate"] for x in ("si", "dsi"))
        prompt = [1] * row["prompt_tokens"]
        for seed in range(SEEDS):
            target = SimulatedModel(VOCAB, seed=seed, latency=pair.target)
            out = generate(
                prompt,
                target,
                target.drafter(a, pair.drafter, seed=seed + 1000),
                algorithm="dsi",
                lookahead=row["lookahead"],
                sp_degree=1,
                max_tokens=len(row["tokens"]),
                cancel_frees={"target": "end"},
            )
            recs = [asdict(x) for x in out.timeline]
            v += np.array([out.time_ms, *split(recs, out.time_ms)]) / SEEDS
    n = len(rows)
    cells = lambda x: " | ".join(f"{y / n / 1000:.1f}" for y in x)  # noqa: E731
    return [
        f"| DSI, {name}, s per prompt | wall | target passes that counted | target passes cancelled | target idle |",
        "|---|---|---|---|---|",
        f"| measured | {cells(m)} |",
        f"| virtual clock (profile, cancelled passes to their end) | {cells(v)} |",
    ]


# -- the acceptance trace -----------------------------------------------------------------------------------------------
def write_trace(path: str, drafter_dir: str, rows: dict) -> None:
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
        print(f"{pid}: drafter agrees at {sum(traces[pid])} of {len(out)} positions")
    json.dump(traces, open(path, "w"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile")
    p.add_argument("--skip-first", action="store_true", help="drop each file's first (cold) prompt")
    p.add_argument("--run", action="append", required=True, help="NAME=FILE[,FILE...]: bench --timeline files")
    p.add_argument("--trace", help="the acceptance trace --write-trace wrote")
    p.add_argument("--write-trace", metavar="FILE")
    p.add_argument("--drafter", metavar="DIR", help="with --write-trace: the drafter's directory")
    args = p.parse_args()
    runs = []
    for run in args.run:
        name, _, files = run.partition("=")
        runs.append((name, load(files.split(","), args.skip_first)))
    if args.write_trace:
        write_trace(args.write_trace, args.drafter, runs[0][1])
        return
    pair = PairProfile.load(args.profile)
    traces = json.load(open(args.trace)) if args.trace else None
    print(f"profile: target {show(pair.target)}; drafter {show(pair.drafter)}; a = {pair.acceptance_rate:.3f}\n")
    for name, rows in runs:
        print(f"## {name}\n")
        print("\n".join(call_costs(rows, pair, refit(rows, ("dsi",), pair))) + "\n")
        print("\n".join(timeline_split(name, rows, pair)) + "\n")
        print("\n".join(predictions(name, rows, pair, traces)) + "\n")


if __name__ == "__main__":
    main()
