"""Token trees against chains at the same node budget, on simulated models (virtual clock, greedy).

Table: for a node budget B (target tokens scored per verification pass), the chain of B drafts against every
tree configuration <k1, ..., km> of exactly B nodes, over acceptance rate a x drafter latency c; per cell the
tree with the most tokens per target pass, its latency, and DSI (SP = 4) over the chain and over that tree.
Plot: where trees pay, by the target's per-node cost (per_token_ms / TPOT): the best tree's SI latency against
the best chain's (any k <= B), each over every configuration of at most B nodes.

Best-first table (--best-first): the chain of B drafts against the tree of B nodes grown best-first ("best:B").

The simulated drafter's candidates each hit the target's token with probability a, independently
(SimulatedDrafter.ranked), so a level of width k holds it with probability 1 - (1 - a)^k. Its confidence in
candidate r is the same at every position, a (1 - a)^r (SimulatedDrafter.candidates): it has no per-position
signal, so here a best-first tree is the static tree that is best for iid acceptance a (a real drafter's
probabilities vary from token to token, which is what best-first growth uses).

Each arm is a cell: (B, a, c) for the tables, (a, per-node cost) for the plot.

    python -m benchmarks trees                                   # the table
    python -m benchmarks trees --best-first -o benchmarks/results/trees_best_first.json
    python -m benchmarks trees --plot trees-per-node-cost.png
"""

from __future__ import annotations

import statistics

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate

A = [0.3, 0.5, 0.7, 0.9]
C = [0.05, 0.2, 0.5]
N, SEEDS = 200, 3
BUDGETS = (4, 8)
PER_NODE = [0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5]  # the plot's per-node costs (per_token_ms / TPOT)
PLOT_BUDGET, PLOT_C = 8, 0.05


def configs(budget: int, exact: bool = True) -> list[tuple[int, ...]]:
    """Every tree configuration of ``budget`` nodes (or at most, when not ``exact``) that is not a chain."""
    out = []

    def grow(widths: tuple[int, ...], size: int, level: int) -> None:
        if widths and (size == budget or not exact) and any(k > 1 for k in widths):
            out.append(widths)
        for k in range(1, budget + 1):
            if size + level * k > budget:
                break
            grow((*widths, k), size + level * k, level * k)

    grow((), 0, 1)
    return out


def run(algorithm: str, a: float, c: float, per_node: float = 0.0, k: int | None = None, tree=None, sp: int = 1):
    """(mean latency ms, mean tokens per target pass) over SEEDS runs of N tokens; target TPOT 1 ms."""
    times, per_pass = [], []
    for seed in range(SEEDS):
        target = SimulatedModel(8, seed=seed, latency=LatencyProfile(1.0, 1.0, per_node))
        drafter = target.drafter(a, target.latency.scaled(c), seed=seed + 11)
        r = generate(
            [seed, 1], target, drafter, algorithm=algorithm, max_tokens=N, lookahead=k, tree=tree, sp_degree=sp
        )
        times.append(r.time_ms)
        per_pass.append(r.mean_acceptance_length)
    return statistics.fmean(times), statistics.fmean(per_pass)


def options(p) -> None:
    p.add_argument("--best-first", action="store_true", help="the chain vs best:B table instead")
    p.add_argument("--plot", metavar="PNG", default=None, help="the per-node-cost figure instead of the table")


def arms(args) -> list[Arm]:
    if args.plot:
        return [Arm(f"a={a} per-node={r}", {"a": a, "per_node": r}) for a in A for r in PER_NODE]
    return [Arm(f"B={b} a={a} c={c}", {"budget": b, "a": a, "c": c}) for b in BUDGETS for a in A for c in C]


def measure(arm: Arm, args, r: int) -> dict:
    s = arm.settings
    if args.plot:
        chain = min(run("si", s["a"], PLOT_C, per_node=s["per_node"], k=k)[0] for k in range(1, PLOT_BUDGET + 1))
        tree = min(run("si", s["a"], PLOT_C, per_node=s["per_node"], tree=t)[0] for t in configs(PLOT_BUDGET, False))
        return {"best_chain_ms": chain, "best_tree_ms": tree, "chain_over_tree": chain / tree}
    b, a, c = s["budget"], s["a"], s["c"]
    chain_ms, chain_pp = run("si", a, c, k=b)
    if args.best_first:
        best = f"best:{b}"
        tree_ms, tree_pp = run("si", a, c, tree=best)
    else:
        (tree_ms, tree_pp), best = max(((run("si", a, c, tree=t), t) for t in configs(b)),
                                       key=lambda x: (x[0][1], -x[0][0]))  # fmt: skip
    return {
        "chain_tok_per_pass": chain_pp,
        "chain_ms": chain_ms,
        "tree": best if isinstance(best, str) else ",".join(map(str, best)),
        "tree_tok_per_pass": tree_pp,
        "tree_ms": tree_ms,
        "chain_over_tree": chain_ms / tree_ms,
        "dsi_chain_ms": run("dsi", a, c, k=b, sp=4)[0],
        "dsi_tree_ms": run("dsi", a, c, tree=best, sp=4)[0],
    }


def summarize(results, args) -> dict:
    if args.plot:
        plot(results, args.plot)
        return {"plot": args.plot}
    return {}


def plot(results, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), constrained_layout=True)
    for a in A:
        ratios = [x.figures["chain_over_tree"] for x in results if x.arm.settings["a"] == a]
        ax.plot(PER_NODE, ratios, marker="o", label=f"a = {a}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("target cost per scored node (per_token_ms / TPOT)")
    ax.set_ylabel("best chain latency / best tree latency (SI)")
    ax.set_title(f"Where token trees pay: <= {PLOT_BUDGET} nodes per pass, c = {PLOT_C}, N = {N}, {SEEDS} seeds",
                 fontsize=10)  # fmt: skip
    ax.legend()
    fig.savefig(path, dpi=110)


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "chain_tok_per_pass": "the chain of B drafts: tokens per target pass (tokens / verifications)",
        "chain_ms": "its latency, ms (virtual clock, target TPOT = TTFT = 1 ms)",
        "tree": "the tree with the most tokens per pass (best:B with --best-first)",
        "tree_tok_per_pass": "its tokens per target pass",
        "tree_ms": "its latency, ms",
        "chain_over_tree": "chain latency / tree latency (the plot: the best of each, any k or tree <= B nodes)",
        "dsi_chain_ms": "DSI (SP 4) over the chain, ms",
        "dsi_tree_ms": "DSI (SP 4) over the tree, ms",
        "best_chain_ms": "the plot: the best chain's latency, ms",
        "best_tree_ms": "the plot: the best tree's latency, ms",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
)
