"""``specpar hsd-plan``: the best HSD hierarchy for given model costs and pairwise acceptance rates."""

from __future__ import annotations

import json
import math
from pathlib import Path

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.core.paths import read_text
from specpar.entrypoints.cli import arguments

DESCRIPTION = """\
Choose the hierarchical speculative decoding (HSD) stack with the least expected
latency per token: which of the models M0 < M1 < ... < MK (MK the target) to use
and their buffer sizes T (M0 drafts T_0 tokens per call; Mi hands T_i verified
tokens up per call). Exact dynamic program over (model, buffer) pairs on the
latency model L = sum_i c_i prod_{j>=i} R_j (see docs/hsd.md).

--alpha FILE: the (K+1) x (K+1) matrix of pairwise acceptance rates
alpha[i][j] = 1 - TV(q_i, q_j) (entries above the diagonal are used), as JSON
(a list of rows) or as text (one row per line, numbers separated by spaces or commas).
"""


def register(sub) -> None:
    what = "best HSD hierarchy and buffer sizes for given costs and acceptance rates"
    p = arguments.command_parser(sub, "hsd-plan", what, DESCRIPTION)
    add_plan_arguments(p, required=True)
    arguments.add_json(p)
    p.set_defaults(func=run)


def add_plan_arguments(p, required: bool) -> None:
    what = "time of one forward pass of each model, M0 first, the target last (any unit, e.g. ms)"
    p.add_argument("--costs", type=arguments.numbers, required=required, metavar="C0,C1,...,CK", help=what)
    p.add_argument("--alpha", type=Path, required=required, metavar="FILE",
                   help="pairwise acceptance-rate matrix, JSON or text (see above)")  # fmt: skip
    t_max = p.add_argument("--t-max", type=arguments.integer, default=15, metavar="T",
                           help="largest buffer size considered for every level (default 15)")  # fmt: skip
    if not required:  # simulate hsd: a finer control
        arguments.advanced_flag(t_max)


def read_alpha(path: Path) -> list[list[float]]:
    """A matrix from a JSON file (list of rows) or a text file (one row per line)."""
    text = read_text(path, "alpha file")
    try:
        data = json.loads(text)
        if isinstance(data, dict) and "alpha" in data:
            data = data["alpha"]
        return data
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise ConfigError(f"the alpha file {str(path)!r} is nested too deeply to read") from None
    try:
        return [
            [float(x) for x in line.replace(",", " ").split()]
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
    except ValueError:
        raise ConfigError(f"the alpha file {str(path)!r} is neither JSON nor rows of numbers") from None


def plan_report(costs, alpha, t_max: int) -> dict:
    """The optimizer's plan, the best single drafter, the target alone, and the speedups between them."""
    from specpar.planning.hsd_latency import forwards_per_token
    from specpar.planning.hsd_optimizer import best_single_drafter, optimize

    best = optimize(costs, alpha, t_max)
    single = best_single_drafter(costs, alpha, t_max)
    target_alone = costs[-1]
    return {
        "best": best.to_dict() | {"forwards_per_token": forwards_per_token(alpha, best.levels, best.buffers)},
        "best_single_drafter": single.to_dict(),
        "target_alone_latency": target_alone,
        "speedup_vs_target": target_alone / best.latency,
        "speedup_vs_best_single_drafter": single.latency / best.latency,
        "t_max": t_max,
    }


def describe(levels, n_models: int) -> str:
    return " < ".join("target" if m == n_models - 1 else f"M{m}" for m in levels)


def _plan_row(name: str, plan: dict, n_models: int, target_alone: float, forwards: str = "") -> list[str]:
    """A plan's row of the table: its hierarchy, buffers, latency per token and speedup over the target alone."""
    latency = plan["latency"]
    return [name, describe(plan["levels"], n_models), str(list(plan["buffers"])), f"{latency:.4g}",
            f"{target_alone / latency:.3f}x", forwards]  # fmt: skip


def run(args) -> int:
    alpha = read_alpha(args.alpha)
    report = plan_report(args.costs, alpha, args.t_max)
    if args.json:
        print_json({"costs": args.costs, "alpha": alpha, **report})
        return 0
    from specpar.entrypoints.cli.comparison import print_table, table_console

    n = len(args.costs)
    best, alone = report["best"], report["target_alone_latency"]
    fwd = ", ".join(f"{f:.3g}" for f in best["forwards_per_token"])
    rows = [
        _plan_row("best (HSD)", best, n, alone, fwd),
        _plan_row("best single drafter (SI)", report["best_single_drafter"], n, alone),
        ["target alone", "target", "-", f"{alone:.4g}", "1.000x", "1"],
    ]
    columns = ("plan", "hierarchy", "T", "latency / token", "speedup vs target", "forwards / token")
    print_table(table_console(), columns, rows, f"HSD plan for {n} models (T <= {args.t_max})", ("plan", "hierarchy"))
    s = report["speedup_vs_best_single_drafter"]
    print(
        f"HSD is {s:.3f}x faster than the best single drafter (predicted; latency in the costs' unit per output token)"
        if math.isfinite(s)
        else ""
    )
    return 0
