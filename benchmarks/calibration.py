"""What the real-hardware analyses share (a helper module, no benchmark): reading ``specpar bench -o`` files, and the
virtual clock calibrated to them (latencies refit on their recorded calls, a drafter that agrees where a real one
did). Used by ``real_hardware`` and ``dsi_gap``."""

from __future__ import annotations

import json
import statistics

import numpy as np

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.backends.simulated import SimulatedDrafter, SimulatedLM
from specpar.prediction.pair_profile import PairProfile

ALGOS = ("nonsi", "si", "dsi")
SEEDS = 20  # iid acceptance draws per prompt
VOCAB = 1000


def read_runs(specs: list[str], skip_first: bool) -> list[tuple[str, dict]]:
    """[(name, rows)] for each NAME=FILE[,FILE...] of --run (rows: :func:`load`'s)."""
    out = []
    for spec in specs:
        name, _, files = spec.partition("=")
        out.append((name, load(files.split(","), skip_first)))
    return out


def load(paths: list[str], skip_first: bool) -> dict:
    """{(file, prompt_id): {algorithm: row}} from `specpar bench -o` files (``skip_first``: each file's first prompt
    left out)."""
    rows: dict = {}
    for path in paths:
        mine: dict = {}
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                mine.setdefault((path, r["prompt_id"]), {})[r["algorithm"]] = r
        rows.update(list(mine.items())[1 if skip_first else 0 :])
    return rows


def is_target(rec: dict) -> bool:
    return rec["server"].startswith("target")


def prompt_rate(r: dict) -> float:
    """A prompt's measured acceptance rate: the mean of SI's and DSI's on it."""
    return statistics.mean(r[x]["acceptance_rate"] for x in ("si", "dsi"))


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

    def disagree(self, h: int, mode: int, position: int | None = None) -> int:
        return mode if h in self.agree else (mode + 1) % self.vocab_size

    def greedy_run(self, h: int, k: int, hashes: list[int], position: int | None = None) -> list[int]:
        return SimulatedLM.greedy_run(self, h, k, hashes, position)


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
    tpot x k + per_token x (new tokens - 1), a cold one ttft + tpot x (k - 1). Plain floats (the engine's default
    rules compare them: NumPy's would give NumPy booleans)."""
    recs = [rec for r in rows.values() for algo in algos for rec in r[algo]["timeline"] if not rec["cancelled"]]
    ms = lambda rec: rec["end_ms"] - rec["start_ms"]  # noqa: E731
    warm_t = [rec for rec in recs if is_target(rec) and rec["cached"]]
    x = np.array([[1.0, max(rec["tokens"] - rec["cached"], 1) - 1] for rec in warm_t])
    tpot, per = np.linalg.lstsq(x, np.array([ms(rec) for rec in warm_t]), rcond=None)[0]
    cold = [ms(rec) - per * rec["drafts"] for rec in recs if is_target(rec) and not rec["cached"]]
    target = LatencyProfile(float(statistics.mean(cold)) if cold else pair.target.ttft_ms, float(tpot),
                            max(float(per), 0))  # fmt: skip
    warm_d = [rec for rec in recs if not is_target(rec) and rec["cached"]]
    if not warm_d:
        return target, pair.drafter
    x = np.array([[rec["drafts"], max(rec["tokens"] - rec["cached"], 1) - 1] for rec in warm_d], dtype=float)
    d_tpot, d_per = np.linalg.lstsq(x, np.array([ms(rec) for rec in warm_d]), rcond=None)[0]
    cold = [ms(rec) - d_tpot * (rec["drafts"] - 1) for rec in recs if not is_target(rec) and not rec["cached"]]
    drafter = LatencyProfile(float(statistics.mean(cold)), float(d_tpot), max(float(d_per), 0))
    return target, drafter


def predicted(rows: dict, target_lat, drafter_lat, cancel, traces: dict | None = None) -> dict:
    """Mean virtual-clock ms per algorithm over the prompts of ``rows``, each at its measured acceptance rate (or,
    with ``traces``, its acceptance pattern)."""
    per = [simulate(x, target_lat, drafter_lat, prompt_rate(x), cancel, traces[key[1]] if traces else None)
           for key, x in rows.items()]  # fmt: skip
    return {algo: statistics.mean(p[algo] for p in per) for algo in ALGOS}


def seconds(ms: dict, measured: dict | None = None) -> dict:
    """The figures of a row of times (ms per algorithm): seconds, DSI's speedups, and measured / predicted when the
    row is a prediction of ``measured``."""
    out = {f"{a}_s": ms[a] / 1000 for a in ALGOS}
    out.update(dsi_vs_si=ms["si"] / ms["dsi"], dsi_vs_nonsi=ms["nonsi"] / ms["dsi"])
    if measured is not None:
        out.update({f"{a}_measured_over_predicted": measured[a] / ms[a] for a in ALGOS})
    return out


REPORTS = {  # the figures of :func:`seconds`
    "nonsi_s": "non-SI, s per prompt (mean)",
    "si_s": "SI",
    "dsi_s": "DSI",
    "dsi_vs_si": "SI s / DSI s",
    "dsi_vs_nonsi": "non-SI s / DSI s",
    "nonsi_measured_over_predicted": "predictions: measured / predicted, non-SI",
    "si_measured_over_predicted": "SI",
    "dsi_measured_over_predicted": "DSI",
}


def show(lat: LatencyProfile) -> str:
    return f"TTFT {lat.ttft_ms:.0f} ms, TPOT {lat.tpot_ms:.0f} ms, +{lat.per_token_ms:.0f} ms per extra token"
