"""A Gantt chart of a generation's timeline: one row per server, one bar per task, cancelled tasks hatched."""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.results import GenerationResult

COLOURS = {"draft": "#4C9F70", "verify": "#3B6EA8"}
BAR = {"height": 0.7, "edgecolor": "white", "linewidth": 0.4}
DONE, CANCELLED = {"alpha": 0.95, "hatch": None}, {"alpha": 0.35, "hatch": "//"}  # a cancelled task: faded, hatched


def plot_timelines(results: Sequence[GenerationResult], path: str, title: str | None = None) -> None:
    """Write one Gantt panel per result (e.g. non-SI, SI, DSI of the same prompt) to ``path`` (PNG), ms on a shared axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
