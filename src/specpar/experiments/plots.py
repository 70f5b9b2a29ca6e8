"""PNG figures (matplotlib's Agg backend: no display needed): the offline heatmaps, on a pink-to-green scale centred
on 1 as the paper's (cells where an algorithm is slower stand out in pink); a generation's timeline as a Gantt chart;
the load curves."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from specpar.core.results import GenerationResult
from specpar.experiments.heatmap import PANELS, Heatmap

COLOURS = {"draft": "#4C9F70", "verify": "#3B6EA8"}
BAR = {"height": 0.7, "edgecolor": "white", "linewidth": 0.4}
DONE, CANCELLED = {"alpha": 0.95, "hatch": None}, {"alpha": 0.35, "hatch": "//"}  # a cancelled task: faded, hatched


def _pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def shared_log2_range(speedups) -> float:
    """Half-width ``v`` of the log2 colour range that every panel shares: the largest |log2 speedup| over all
    panels, at least 0.1, saturating at 2 (4x). Centred on 1 (white), a 2x slowdown is as pink as a 2x speedup
    is green."""
    v = 0.1
    for s in speedups:
        v = max(v, float(np.nanmax(np.abs(np.log2(s)))))
    return min(v, 2.0)


def plot_heatmap(h: Heatmap, path: str, title: str | None = None) -> None:
    """Write the four speedup panels of ``h`` (Fig. 2 / Fig. 7 layout) to ``path`` (PNG)."""
    plt = _pyplot()
    from matplotlib.colors import Normalize

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5.2 * len(PANELS), 4.6), constrained_layout=True)
    extent = (h.a[0], h.a[-1], h.c[0], h.c[-1])
    speedups = {name: h.speedup(name) for name in PANELS}
    v = shared_log2_range(speedups.values())
    norm = Normalize(-v, v)  # one scale for every panel: the same colour is the same speedup everywhere
    for ax, (name, (label, _, _)) in zip(axes, PANELS.items()):
        s = speedups[name]
        lo, hi = float(np.nanmin(s)), float(np.nanmax(s))
        im = ax.imshow(
            np.log2(s), origin="lower", aspect="auto", cmap="PiYG", norm=norm, extent=extent, interpolation="nearest"
        )
        slower = int((s < 1.0 - 1e-9).sum())
        ax.set_title(f"{label}\nmax {hi:.2f}x, min {lo:.2f}x, {slower} cells < 1", fontsize=10)
        ax.set_xlabel("acceptance rate a")
        ax.set_ylabel("drafter latency c (fraction of target)")
    bar = fig.colorbar(
        im, ax=list(axes), label="speedup (log scale, all panels)", extend="both" if v == 2.0 else "neither"
    )
    ticks = [t for t in (0.25, 0.5, 0.8, 1, 1.25, 1.6, 2, 4) if abs(np.log2(t)) <= v + 1e-9]
    bar.set_ticks(np.log2(ticks))
    bar.set_ticklabels([f"{t:g}x" for t in ticks])
    fig.suptitle(title or f"Offline simulation: {h.description}", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timelines(results: Sequence[GenerationResult], path: str, title: str | None = None) -> None:
    """Write one Gantt panel per result (e.g. non-SI, SI, DSI of the same prompt) to ``path`` (PNG), ms on a shared axis."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    heights = [max(1, len({r.server for r in res.timeline})) for res in results]
    size = (11, 1.0 + 0.42 * sum(heights) + 0.5 * len(results))
    fig, axes = plt.subplots(
        len(results), 1, figsize=size, sharex=True, squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    for ax, res in zip(axes[:, 0], results):
        servers = sorted({r.server for r in res.timeline}, key=lambda s: (not s.startswith("drafter"), s))
        row = {s: i for i, s in enumerate(servers)}
        for r in res.timeline:
            width = max(r.end_ms - r.start_ms, 1e-9)
            look = CANCELLED if r.cancelled else DONE
            ax.barh(row[r.server], width, left=r.start_ms, color=COLOURS.get(r.kind, "grey"), **BAR, **look)
        ax.set_yticks(range(len(servers)), servers, fontsize=8)
        ax.invert_yaxis()
        ax.axvline(res.time_ms, color="black", linewidth=1)
        label = {"nonsi": "non-SI", "si": "SI", "dsi": "DSI"}.get(res.algorithm, res.algorithm)
        accept = "" if res.drafted == 0 else f", acceptance {res.acceptance_rate:.2f}"
        ax.set_title(
            f"{label}: {len(res.tokens)} tokens in {res.time_ms:.1f} ms "
            f"(k = {res.lookahead or '-'}, SP = {res.sp_degree}{accept})",
            fontsize=9,
            loc="left",
        )
    axes[-1, 0].set_xlabel("time (ms)")
    handles = [Patch(color=COLOURS[kind], label=kind) for kind in ("draft", "verify")]
    handles.append(Patch(facecolor="grey", label="cancelled", **CANCELLED))
    fig.legend(handles=handles, loc="upper right", ncol=3, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_load(rows: list[dict], path: str, title: str) -> None:
    """Write ``rows`` (:meth:`specpar.experiments.load.LoadRun.to_dict` with ``rate`` or ``clients``) to ``path``:
    tokens/s, p50 and p99 latency per policy against the load (a PNG, matplotlib's Agg backend)."""
    plt = _pyplot()

    key = "rate" if any("rate" in r for r in rows) else "clients"
    label = "arrival rate (requests/s)" if key == "rate" else "closed-loop clients"
    lines = defaultdict(list)
    for r in rows:
        lines[r["policy"]].append(r)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), constrained_layout=True)
    for policy, rs in lines.items():
        rs = sorted(rs, key=lambda r: r[key])
        x = [r[key] for r in rs]
        axes[0].plot(x, [r["throughput_tokens_per_s"] for r in rs], marker="o", label=policy)
        axes[1].plot(x, [r["latency_p50_ms"] / 1000 for r in rs], marker="o", label=policy)
        axes[2].plot(x, [r["latency_p99_ms"] / 1000 for r in rs], marker="o", label=policy)
    for ax, name in zip(axes, ("throughput (output tokens/s)", "p50 latency (s)", "p99 latency (s)")):
        ax.set_xlabel(label)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend()
    fig.suptitle(title, fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
