"""PNG figures of the offline heatmaps (matplotlib, Agg backend: no display needed).

Speedups use a pink-to-green scale centred on 1, so cells where an algorithm
is slower than the one it is compared with stand out in pink, as in the paper.
"""

from __future__ import annotations

import numpy as np

from specpar.experiments.heatmap import PANELS, Heatmap


def plot_heatmap(h: Heatmap, path: str, title: str | None = None) -> None:
    """Write the four speedup panels of ``h`` (Fig. 2 / Fig. 7 layout) to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5.2 * len(PANELS), 4.6), constrained_layout=True)
    extent = (h.a[0], h.a[-1], h.c[0], h.c[-1])
    for ax, (name, (label, _, _)) in zip(axes, PANELS.items()):
        s = h.speedup(name)
        lo, hi = float(np.nanmin(s)), float(np.nanmax(s))
        # log scale centred on 1 (white): a 2x slowdown is as pink as a 2x speedup is green; saturates at 4x
        v = min(max(abs(np.log2(lo)), abs(np.log2(hi)), 0.1), 2.0)
        im = ax.imshow(
            np.log2(s),
            origin="lower",
            aspect="auto",
            cmap="PiYG",
            norm=Normalize(-v, v),
            extent=extent,
            interpolation="nearest",
        )
        slower = int((s < 1.0 - 1e-9).sum())
        ax.set_title(f"{label}\nmax {hi:.2f}x, min {lo:.2f}x, {slower} cells < 1", fontsize=10)
        ax.set_xlabel("acceptance rate a")
        ax.set_ylabel("drafter latency c (fraction of target)")
        bar = fig.colorbar(im, ax=ax, label="speedup (log scale)", extend="both" if v == 2.0 else "neither")
        ticks = [t for t in (0.25, 0.5, 0.8, 1, 1.25, 1.6, 2, 4) if abs(np.log2(t)) <= v + 1e-9]
        bar.set_ticks(np.log2(ticks))
        bar.set_ticklabels([f"{t:g}x" for t in ticks])
    fig.suptitle(title or f"Offline simulation: {h.description}", fontsize=11)
    fig.savefig(path, dpi=110)
    plt.close(fig)
