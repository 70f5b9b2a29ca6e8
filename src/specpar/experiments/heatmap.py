"""The paper's offline heatmaps (Fig. 2, and Fig. 7 at a fixed lookahead): non-SI, SI and DSI over drafter latency
c x acceptance rate a, on the virtual clock (one target forward pass = 1, the drafter's = c).

Each cell averages ``repeats`` generations of ``n`` tokens per algorithm; speedup of X over Y = mean(Y) / mean(X).
non-SI: n target passes. SI: its best lookahead in ``lookaheads`` (or the fixed one), and (``si_eq1``) its best among
Eq. 1's, as the authors' heatmap code compares them (panel (b); (b') is against SI's unrestricted best). DSI: its
fastest lookahead satisfying Eq. 1 on ``sp_degree`` target servers (:func:`valid_lookaheads`), or the fixed one.
Runs share common random numbers: repeat r's draft at position i is right iff u[r, i] < a, for every algorithm,
lookahead and c. Latencies come from :mod:`specpar.prediction.fastpath`, which matches the event-driven simulator run
by run (:func:`event_cell` runs that simulator itself, for cross-checks).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specpar.core.errors import ConfigError
from specpar.core.numbers import is_int, positive_int
from specpar.planning import min_lookahead, sp_degree_needed
from specpar.prediction.fastpath import acceptance_uniforms, dsi_latency, next_rejection, si_counts, si_time

PANELS = {  # name: (title, numerator, denominator) of speedup = numerator latency / denominator latency
    "si_vs_nonsi": ("(a) SI vs non-SI", "nonsi", "si"),
    "dsi_vs_si_eq1": ("(b) DSI vs SI, both over Eq. 1's lookaheads (the authors')", "si_eq1", "dsi"),
    "dsi_vs_si": ("(b') DSI vs SI at its unrestricted best", "si", "dsi"),
    "dsi_vs_nonsi": ("(c) DSI vs non-SI", "nonsi", "dsi"),
    "dsi_vs_best": ("(d) DSI vs the faster of SI and non-SI", "best", "dsi"),
}


MAX_RESOLUTION = 1000  # 10^6 cells; the per-lookahead arrays of a finer grid need tens of GB


def grid(resolution: int) -> tuple[np.ndarray, np.ndarray]:
    """The paper's axes with ``resolution`` drafter latencies: c from 0.01 to 1 [res] and a from 0 to 1 [res+1],
    evenly spaced; 100 gives the paper's c in {0.01, ..., 1} x a in {0, 0.01, ..., 1}, and every resolution
    keeps the corners (the fastest drafter, a useless one, a perfect one)."""
    if not is_int(resolution, 2, MAX_RESOLUTION):
        raise ConfigError(
            f"resolution must be an integer in [2, {MAX_RESOLUTION}] (the paper's is 100), got {resolution!r}"
        )
    return np.round(np.linspace(0.01, 1.0, resolution), 6), np.round(np.linspace(0.0, 1.0, resolution + 1), 6)


@dataclass
class Heatmap:
    """Mean latencies [len(c), len(a)] in target forward passes, and the lookaheads used."""

    c: np.ndarray
    a: np.ndarray
    nonsi: np.ndarray
    si: np.ndarray
    dsi: np.ndarray
    si_lookahead: np.ndarray  # [C, A] SI's (best) lookahead per cell
    si_eq1: np.ndarray  # [C, A] SI at its best lookahead among those satisfying Eq. 1 (DSI's candidates)
    si_eq1_lookahead: np.ndarray  # [C, A] that lookahead
    dsi_lookahead: np.ndarray  # [C, A] DSI's (best valid) lookahead per cell
    sp_needed: np.ndarray  # [C, A] target servers DSI needs at its lookahead (sp_degree_needed)
    sp_degree: int
    n: int
    repeats: int
    fixed_lookahead: int | None = None
    lookaheads: tuple[int, int] = (1, 200)
    seed: int = 0

    @property
    def best(self) -> np.ndarray:
        """The faster of SI and non-SI, per cell."""
        return np.minimum(self.si, self.nonsi)

    def speedup(self, panel: str) -> np.ndarray:
        _, num, den = PANELS[panel]
        return getattr(self, num) / getattr(self, den)

    @property
    def description(self) -> str:
        if self.fixed_lookahead is not None:
            how = f"lookahead {self.fixed_lookahead} for SI and DSI (DSI on {self.sp_degree} target servers)"
        else:
            how = (
                f"SI's best lookahead in {self.lookaheads[0]}..{self.lookaheads[1]}; DSI's best lookahead "
                f"satisfying Eq. 1 for SP = {self.sp_degree}"
            )
        return f"N = {self.n}, {self.repeats} repeats per cell, {how}"

    def write_csv(self, path: str) -> None:
        arrays = ("nonsi", "si", "si_lookahead", "si_eq1", "si_eq1_lookahead", "dsi", "dsi_lookahead")
        speed = {p: self.speedup(p) for p in PANELS}
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["drafter_latency", "acceptance_rate", *arrays, "sp_degree", "eq1_satisfied", *PANELS])
            for i, c in enumerate(self.c):
                for j, a in enumerate(self.a):
                    cells = [_csv_cell(name, getattr(self, name)[i, j]) for name in arrays]
                    eq1 = int(self.sp_needed[i, j] <= self.sp_degree)
                    speedups = [f"{speed[p][i, j]:.6g}" for p in PANELS]
                    w.writerow([f"{c:g}", f"{a:g}", *cells, self.sp_degree, eq1, *speedups])


def _csv_cell(name: str, value):
    """A lookahead as an integer, a latency with 6 significant digits."""
    return int(value) if name.endswith("_lookahead") else f"{value:.6g}"


def _check(n, repeats, sp_degree, lookaheads, fixed_lookahead):
    for name, v in (("N", n), ("repeats", repeats), ("sp_degree", sp_degree)):
        positive_int(name, v)
    lo, hi = lookaheads
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ConfigError(f"the lookahead range must be 1 <= first <= last, got {lo}..{hi}")
    if fixed_lookahead is not None and (not isinstance(fixed_lookahead, int) or fixed_lookahead < 1):
        raise ConfigError(f"lookahead must be a positive integer, got {fixed_lookahead!r}")


def compute_heatmap(
    resolution: int = 100,
    *,
    n: int = 100,
    repeats: int = 5,
    sp_degree: int = 7,
    lookaheads: tuple[int, int] = (1, 200),
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    **cells,
) -> Heatmap:
    """Fig. 2 (every lookahead in ``lookaheads``) or Fig. 7 (``fixed_lookahead=5``) on :func:`grid` (``resolution``).

    cells: ``c``, ``a``: explicit axes instead of the paper's grid at ``resolution``; ``fixed_lookahead``: one
    lookahead for every cell. progress(done, total): called as batches of work finish.
    """
    unknown = sorted(set(cells) - {"c", "a", "fixed_lookahead"})
    if unknown:
        raise ConfigError(f"compute_heatmap takes no option {', '.join(unknown)}")
    fixed = cells.get("fixed_lookahead")
    _check(n, repeats, sp_degree, lookaheads, fixed)
    cs, as_ = _axes(resolution, cells.get("c"), cells.get("a"))
    ks = np.array([fixed] if fixed is not None else range(lookaheads[0], lookaheads[1] + 1))
    nz = next_rejection(acceptance_uniforms(repeats, n, seed), as_)  # [A, repeats, n+1]
    # DSI's candidate lookaheads per c (Eq. 1's, or the fixed one): SI's too under the authors' protocol
    allowed = [[fixed] if fixed is not None else valid_lookaheads(float(c), sp_degree, lookaheads, n) for c in cs]
    beyond = sorted({k for row in allowed for k in row} - {int(k) for k in ks})  # Eq. 1's smallest past the range
    ks_si = np.concatenate([ks, np.array(beyond, dtype=ks.dtype)])
    si_batches = max(1, math.ceil(len(ks_si) / 25))
    si_all = _si_latencies(nz, ks_si, cs, n, si_batches)
    best = np.argmin(si_all[: len(ks)], axis=0)  # SI's unrestricted best: over the range only
    si, si_lookahead = np.take_along_axis(si_all, best[None], axis=0)[0], ks[best]
    si_eq1, si_eq1_lookahead = _si_over(si_all, ks_si, allowed)
    pairs = [(i, k) for i in range(len(cs)) for k in allowed[i]]
    dsi, dsi_k = _best_dsi(nz, pairs, cs, n, sp_degree, (si_batches, progress))
    sp_needed = np.array([[sp_degree_needed(1.0, float(cs[i]), int(k)) for k in dsi_k[i]] for i in range(len(cs))])
    return Heatmap(
        c=cs, a=as_, nonsi=np.full((len(cs), len(as_)), float(n)), si=si, dsi=dsi, si_lookahead=si_lookahead,
        si_eq1=si_eq1, si_eq1_lookahead=si_eq1_lookahead, dsi_lookahead=dsi_k, sp_needed=sp_needed, sp_degree=sp_degree, n=n, repeats=repeats, fixed_lookahead=fixed,
        lookaheads=tuple(lookaheads), seed=seed,
    )  # fmt: skip


def _axes(resolution: int, c, a) -> tuple[np.ndarray, np.ndarray]:
    """The drafter latencies c [C] and acceptance rates a [A]: those given, else the paper's grid."""
    cs, as_ = grid(resolution) if c is None or a is None else (None, None)
    cs = np.asarray(c if c is not None else cs, dtype=float)
    as_ = np.asarray(a if a is not None else as_, dtype=float)
    if cs.size == 0 or as_.size == 0 or not ((cs > 0) & (cs <= 1)).all() or not ((as_ >= 0) & (as_ <= 1)).all():
        raise ConfigError("drafter latencies c must lie in (0, 1] and acceptance rates a in [0, 1]")
    return cs, as_


def _si_latencies(nz: np.ndarray, ks: np.ndarray, cs: np.ndarray, n: int, batches: int) -> np.ndarray:
    """SI's mean latency [K, C, A] at each lookahead of ``ks``: drafted tokens and rounds per (lookahead, a, repeat)
    from ``nz`` [A, repeats, n+1], the latency (si_time) for every c at once."""
    A, repeats = nz.shape[0], nz.shape[1]
    drafted = np.empty((len(ks), A))
    rounds = np.empty((len(ks), A))
    flat = nz.reshape(A * repeats, n + 1)
    for ks_batch in np.array_split(np.arange(len(ks)), batches):
        kk = np.repeat(ks[ks_batch], A * repeats)
        d, r = si_counts(np.tile(flat, (len(ks_batch), 1)), kk, n)
        drafted[ks_batch] = d.reshape(len(ks_batch), A, repeats).mean(axis=2)
        rounds[ks_batch] = r.reshape(len(ks_batch), A, repeats).mean(axis=2)
    return si_time(drafted[:, None, :], rounds[:, None, :], cs[None, :, None])  # [K, C, A]


def _best_dsi(nz: np.ndarray, pairs: list, cs: np.ndarray, n: int, sp_degree: int, progress: tuple):
    """DSI's fastest lookahead per cell and its latency, [C, A] each: one run per (c, k, a, repeat) for every
    candidate (c's index, k) in ``pairs``, in batches. progress: (batches done before these, the callback)."""
    A, repeats = nz.shape[0], nz.shape[1]
    before, report = progress
    n_batches = min(len(pairs), math.ceil(len(pairs) * A * repeats / 20000))  # never an empty batch
    batches = np.array_split(np.arange(len(pairs)), max(1, n_batches))
    total = before + len(batches)
    if report:
        report(before, total)
    dsi = np.full((len(cs), A), np.inf)
    dsi_k = np.zeros((len(cs), A), dtype=np.int64)
    for done, batch in enumerate(batches, before + 1):
        cis, kks = np.array([pairs[b] for b in batch]).T  # [len(batch)] c's index and k of each candidate
        draws = np.broadcast_to(nz[None], (len(batch),) + nz.shape).reshape(len(batch) * A * repeats, n + 1)
        lat = dsi_latency(draws, np.repeat(kks, A * repeats), np.repeat(cs[cis], A * repeats), n, sp_degree)
        means = lat.reshape(len(batch), A, repeats).mean(axis=2)
        for row, i, k in zip(means, cis, kks):
            better = row < dsi[i] - 1e-12  # ties keep the smaller lookahead (candidates come in increasing order)
            dsi[i, better], dsi_k[i, better] = row[better], k
        if report:
            report(done, total)
    return dsi, dsi_k


def _si_over(si_all: np.ndarray, ks: np.ndarray, allowed: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """SI's mean latency [C, A] and lookahead at its best among ``allowed[i]`` (row i's lookaheads, increasing, each
    in ``ks``); si_all: [K, C, A] SI's mean latencies at the lookaheads ``ks``."""
    index = {int(k): x for x, k in enumerate(ks)}
    C, A = si_all.shape[1:]
    out, best = np.empty((C, A)), np.zeros((C, A), dtype=np.int64)
    for i, row in enumerate(allowed):
        lat = si_all[[index[k] for k in row], i]  # [len(row), A]
        pick = np.argmin(lat, axis=0)  # ties: the smaller lookahead (rows are increasing)
        out[i], best[i] = lat[pick, np.arange(A)], np.asarray(row)[pick]
    return out, best


def valid_lookaheads(c: float, sp_degree: int, lookaheads: tuple[int, int], n: int) -> list[int]:
    """Every lookahead in the range that satisfies Eq. 1 on sp_degree servers at drafter latency c (increasing):
    k0 = min_lookahead(1, c, sp_degree) and up, k0 itself even beyond the range (it is the only choice). Lookaheads
    past n - 1 draft what n - 1 drafts (a chunk never reaches the last token), so the list stops there."""
    first = max(min_lookahead(1.0, c, sp_degree), lookaheads[0])
    return list(range(first, max(first, min(lookaheads[1], n - 1)) + 1))


def event_cell(
    c: float, a: float, *, n: int, repeats: int, si_lookahead: int, dsi_lookahead: int, sp_degree: int, seed: int = 0
) -> dict[str, float]:
    """One cell by the event-driven simulator (specpar.generate on the virtual clock): mean latencies in target
    passes over ``repeats`` simulated model pairs (seeds ``seed`` .. ``seed + repeats - 1``)."""
    from specpar.backends import LatencyProfile, SimulatedModel
    from specpar.experiments.runs import run_once

    arms = {"nonsi": {}, "si": {"lookahead": si_lookahead}, "dsi": {"lookahead": dsi_lookahead, "sp_degree": sp_degree}}
    times = {arm: [] for arm in arms}
    for r in range(seed, seed + repeats):
        target = SimulatedModel(16, seed=r, latency=LatencyProfile.uniform(1.0))
        drafter = target.drafter(a, LatencyProfile.uniform(c), seed=r + 104729)
        for arm, kw in arms.items():
            run = run_once([r % 16, 3], target, None if arm == "nonsi" else drafter, algorithm=arm, max_tokens=n, **kw)
            times[arm].append(run.time_ms)
    return {k: statistics.fmean(v) for k, v in times.items()}


def theorem2_servers(c: float, lookahead: int) -> int:
    """Target servers for Theorem 2's comparison at drafter latency c: Eq. 1's count at this lookahead
    (:func:`~specpar.planning.sp_degree_needed`, the paper's "at least t2 / (k t1) servers"), and at least 2: where a
    chunk drafts slower than a target pass (k c > 1, Eq. 1 says 1), DSI's pass on the cursor ends first and the
    next one it starts would make a single server's verification queue (see specpar.planning.lookahead)."""
    return max(2, sp_degree_needed(1.0, c, lookahead))


def theorem2_grid(h: Heatmap) -> np.ndarray:
    """[C, A] :func:`theorem2_servers` at SI's lookahead in each cell of ``h``."""
    return np.array([[theorem2_servers(float(c), int(k)) for k in row] for c, row in zip(h.c, h.si_lookahead)])


def dsi_at_si_lookahead(h: Heatmap, servers: np.ndarray) -> np.ndarray:
    """DSI's mean latency [C, A] at SI's own lookahead in each cell of ``h``, on ``h``'s draws, on ``servers`` [C, A]
    target servers (Theorem 2's setting: :func:`theorem2_grid`)."""
    nz = next_rejection(acceptance_uniforms(h.repeats, h.n, h.seed), h.a)  # the draws h was computed on
    C, A, reps = len(h.c), len(h.a), h.repeats
    cells_c = np.repeat(np.arange(C), A)
    cells_a = np.tile(np.arange(A), C)
    k = h.si_lookahead.reshape(-1)
    sp = servers.reshape(-1)
    out = np.empty(C * A)
    for count in np.unique(sp):
        cells = np.nonzero(sp == count)[0]
        runs = nz[cells_a[cells]].reshape(len(cells) * reps, h.n + 1)
        lat = dsi_latency(runs, np.repeat(k[cells], reps), np.repeat(h.c[cells_c[cells]], reps), h.n, int(count))
        out[cells] = lat.reshape(len(cells), reps).mean(axis=1)
    return out.reshape(C, A)
