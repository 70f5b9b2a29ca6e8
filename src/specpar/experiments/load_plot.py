"""The load curves as a figure: throughput and latency percentiles against the offered load, one line per policy."""

from __future__ import annotations

from collections import defaultdict


def plot_load(rows: list[dict], path: str, title: str) -> None:
    """Write ``rows`` (:meth:`specpar.experiments.load.LoadRun.to_dict` with ``rate`` or ``clients``) to ``path``:
    tokens/s, p50 and p99 latency per policy against the load (a PNG, matplotlib's Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
