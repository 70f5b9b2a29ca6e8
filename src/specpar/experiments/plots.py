"""PNG figures of the offline heatmaps (matplotlib's Agg backend), on a pink-to-green scale centred on 1 as the
paper's: cells where an algorithm is slower stand out in pink."""

from __future__ import annotations

import numpy as np

from specpar.experiments.heatmap import PANELS, Heatmap


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
