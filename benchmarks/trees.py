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

    .venv/bin/python benchmarks/trees.py                       # table -> stdout and benchmarks/results/trees.txt
    .venv/bin/python benchmarks/trees.py --best-first          # -> benchmarks/results/trees_best_first.txt
    .venv/bin/python benchmarks/trees.py --plot trees-per-node-cost.png
"""

from __future__ import annotations

import argparse
import statistics
import sys

from specpar import LatencyProfile, SimulatedModel, generate

A = [0.3, 0.5, 0.7, 0.9]
C = [0.05, 0.2, 0.5]
N, SEEDS = 200, 3


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


def table(budgets=(4, 8)) -> str:
    lines = [
        f"virtual clock, greedy, N = {N}, {SEEDS} seeds, target TPOT = TTFT = 1 ms, no per-node cost; "
        "tokens per target pass = tokens / verifications",
        f"{'B':>2} {'a':>4} {'c':>5} | {'chain tok/pass':>14} {'ms':>7} | {'best tree':>12} {'tok/pass':>8} "
        f"{'ms':>7} {'x chain':>7} | {'DSI chain ms':>12} {'DSI tree ms':>11}",
    ]
    for budget in budgets:
        trees = configs(budget)
        for a in A:
            for c in C:
                chain_ms, chain_pp = run("si", a, c, k=budget)
                scored = [(run("si", a, c, tree=t), t) for t in trees]
                (tree_ms, tree_pp), best = max(scored, key=lambda s: (s[0][1], -s[0][0]))
                dsi_chain = run("dsi", a, c, k=budget, sp=4)[0]
                dsi_tree = run("dsi", a, c, tree=best, sp=4)[0]
                lines.append(
                    f"{budget:>2} {a:>4} {c:>5} | {chain_pp:>14.2f} {chain_ms:>7.1f} | "
                    f"{','.join(map(str, best)):>12} {tree_pp:>8.2f} {tree_ms:>7.1f} {chain_ms / tree_ms:>6.2f}x | "
                    f"{dsi_chain:>12.1f} {dsi_tree:>11.1f}"
                )
                print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def best_first_table(budgets=(4, 8)) -> str:
    """Chain of B drafts vs best:B, SI and DSI (SP = 4), over a x c."""
    lines = [
        f"virtual clock, greedy, N = {N}, {SEEDS} seeds, target TPOT = TTFT = 1 ms, no per-node cost; "
        "tokens per target pass = tokens / verifications",
        f"{'B':>2} {'a':>4} {'c':>5} | {'chain tok/pass':>14} {'ms':>7} | {'best:B tok/pass':>15} {'ms':>7} "
        f"{'x chain':>7} | {'DSI chain ms':>12} {'DSI best:B ms':>13}",
    ]
    for budget in budgets:
        for a in A:
            for c in C:
                chain_ms, chain_pp = run("si", a, c, k=budget)
                tree_ms, tree_pp = run("si", a, c, tree=f"best:{budget}")
                dsi_chain = run("dsi", a, c, k=budget, sp=4)[0]
                dsi_tree = run("dsi", a, c, tree=f"best:{budget}", sp=4)[0]
                lines.append(
                    f"{budget:>2} {a:>4} {c:>5} | {chain_pp:>14.2f} {chain_ms:>7.1f} | {tree_pp:>15.2f} {tree_ms:>7.1f} "
                    f"{chain_ms / tree_ms:>6.2f}x | {dsi_chain:>12.1f} {dsi_tree:>13.1f}"
                )
                print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def plot(path: str, budget: int = 8, c: float = 0.05) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    costs = [0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5]
    trees = configs(budget, exact=False)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), constrained_layout=True)
    for a in A:
        ratios = []
        for r in costs:
            chain = min(run("si", a, c, per_node=r, k=k)[0] for k in range(1, budget + 1))
            tree = min(run("si", a, c, per_node=r, tree=t)[0] for t in trees)
            ratios.append(chain / tree)
            print(f"a={a} per-node={r}: best chain {chain:.1f} ms, best tree {tree:.1f} ms", file=sys.stderr)
        ax.plot(costs, ratios, marker="o", label=f"a = {a}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("target cost per scored node (per_token_ms / TPOT)")
    ax.set_ylabel("best chain latency / best tree latency (SI)")
    ax.set_title(f"Where token trees pay: <= {budget} nodes per pass, c = {c}, N = {N}, {SEEDS} seeds", fontsize=10)
    ax.legend()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plot", metavar="PNG", default=None, help="draw the per-node-cost figure instead of the table")
    p.add_argument("--best-first", action="store_true", help="the chain vs best:B table instead")
    p.add_argument("--out", default=None, help="where the table is written too (default benchmarks/results/...)")
    args = p.parse_args()
    if args.plot:
        plot(args.plot)
        return
    name = "trees_best_first.txt" if args.best_first else "trees.txt"
    args.out = args.out or f"benchmarks/results/{name}"
    text = best_first_table() if args.best_first else table()
    print(text)
    with open(args.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
