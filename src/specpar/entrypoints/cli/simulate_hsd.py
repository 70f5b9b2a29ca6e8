"""``specpar simulate hsd``: the optimizer's HSD stack vs the best single drafter vs the target alone.

A simulated stack (specpar.backends.stack) with the given costs (ms per forward pass)
and pairwise acceptance rates runs the three plans on the virtual clock or on
threads; the table sets each measured latency beside the latency model's prediction.
"""

from __future__ import annotations

import random
import statistics

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.core.results import fmt
from specpar.entrypoints.cli import arguments
from specpar.entrypoints.cli.comparison import CELLS, speedups_of
from specpar.entrypoints.cli.progress import TokenProgress
from specpar.experiments.loop import run_arms

DEFAULT_COSTS = [0.2, 1.5, 6.0, 30.0]
DEFAULT_CHAIN = [0.7, 0.85, 0.9]
NAMES = {"nonsi": "target alone", "si": "best single drafter", "hsd": "HSD", "hsd-sp": "HSD-SP (SP {sp})"}


def register(modes) -> None:
    from specpar.entrypoints.cli.hsd_plan import add_plan_arguments

    p = arguments.command_parser(modes, "hsd", "the optimizer's HSD stack vs the best single drafter vs the target "
                                 "alone", __doc__.split("\n\n", 1)[1])  # fmt: skip
    g = p.add_argument_group("the stack")
    add_plan_arguments(g, required=False)
    chain, costs = ",".join(map(str, DEFAULT_CHAIN)), ",".join(map(str, DEFAULT_COSTS))
    what = (
        f"acceptance rates of adjacent models alpha[i][i+1] (instead of --alpha; default {chain} with costs {costs} ms)"
    )
    g.add_argument("--chain", type=arguments.numbers, default=None, metavar="A01,A12,...", help=what)
    what = "run this hierarchy (model indices, the target last) instead of the optimizer's"
    levels = g.add_argument("--levels", type=arguments.integers, default=None, metavar="I,J,...", help=what)
    arguments.advanced_flag(levels)
    defaults = {"buffers": arguments.Default(None, "the optimizer's"), "sp_degree": arguments.PAPER_SP_DEGREE}
    helps = {"buffers": "{help}: the sizes for --levels, one per level below the target",
             "sp_degree": "HSD-SP: target servers that verify at once"}  # fmt: skip
    spec = arguments.ConfigOptions(SpeculativeConfig, "spec", fields=tuple(defaults), advanced=("buffers",),
                                   defaults=defaults, helps=helps)  # fmt: skip
    spec.add_to(g)
    arguments.add_pair_arguments(p, fields=("vocab_size", "seed", "prompt_length"), defaults={"vocab_size": 8})
    arguments.add_sampling_arguments(p, ("max_tokens", "temperature"), {"max_tokens": 100, "temperature": 0.0})
    arguments.add_runtime_arguments(p)
    arguments.add_repeats(p, 5, "runs per plan, interleaved")
    arguments.add_json(p)
    p.set_defaults(func=run)


def _stack_parameters(args):
    """The costs (ms per pass, M0 first) and a function of a seed that makes the simulated stack."""
    from specpar.backends.stack import SimulatedStack
    from specpar.core.latency import LatencyProfile
    from specpar.entrypoints.cli.hsd_plan import read_alpha

    if args.alpha is not None and args.chain is not None:
        raise ConfigError("give either --alpha or --chain, not both")
    costs = args.costs if args.costs is not None else DEFAULT_COSTS
    if args.alpha is None and args.chain is None and args.costs is not None:
        raise ConfigError("--costs needs the acceptance rates too: --alpha FILE or --chain A01,A12,...")
    if args.chain is not None and len(args.chain) != len(costs) - 1:
        raise ConfigError(
            f"--chain has {len(args.chain)} rates but there are {len(costs)} models: give one rate "
            f"alpha[i][i+1] per adjacent pair, {len(costs) - 1} in all"
        )
    if args.buffers is not None and args.levels is None:
        raise ConfigError("--buffers goes with --levels (the hierarchy they belong to)")
    lats = [LatencyProfile.uniform(c) for c in costs]

    def make_stack(seed: int):
        if args.alpha is not None:
            return SimulatedStack.from_matrix(read_alpha(args.alpha), lats, vocab_size=args.vocab_size, seed=seed)
        chain = args.chain if args.chain is not None else DEFAULT_CHAIN
        return SimulatedStack(chain, lats, vocab_size=args.vocab_size, seed=seed)

    return costs, make_stack


def _plans(args, costs, alpha) -> dict:
    """{name: HsdPlan}: the target alone, the best single drafter, HSD (--levels, else the optimizer's) and, for a
    hierarchy of more than one level, HSD-SP (the same hierarchy, its target verifying on --sp-degree servers)."""
    from specpar.planning.hsd_latency import hierarchy_latency
    from specpar.planning.hsd_optimizer import HsdPlan, best_single_drafter, optimize

    K = len(costs) - 1
    if args.levels is not None:
        buffers = args.buffers or []
        hsd = HsdPlan(tuple(args.levels), tuple(buffers), hierarchy_latency(costs, alpha, args.levels, buffers))
    else:
        hsd = optimize(costs, alpha, args.t_max)
    plans = {"nonsi": HsdPlan((K,), (), costs[K]), "si": best_single_drafter(costs, alpha, args.t_max), "hsd": hsd}
    if len(hsd.levels) > 1:
        plans["hsd-sp"] = hsd
    return plans


def run(args) -> int:
    from specpar.planning.hsd_latency import check_costs

    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    costs, make_stack = _stack_parameters(args)
    check_costs(costs)
    alpha = make_stack(args.seed).alpha
    plans = _plans(args, costs, alpha)
    total = len(plans) * args.repeats
    with TokenProgress(total * args.max_tokens, f"simulating {total} runs", not args.json) as bar:
        runs = _run_plans(args, plans, make_stack, bar)
    rows = {name: _row(args, name, plan, runs) for name, plan in plans.items()}
    if args.json:
        settings = {key: getattr(args, key) for key in ("runtime", "temperature", "repeats", "sp_degree")}
        print_json(
            {"costs_ms": costs, "alpha": alpha.tolist(), "max_new_tokens": args.max_tokens, **settings, "results": rows}
        )
        return 0
    _print_table(args, costs, rows)
    return 0


def _row(args, name: str, plan, runs) -> dict:
    """A plan's row: its hierarchy, predicted and measured ms per token, speedups, whether it made non-SI's tokens."""
    times = [x.time_ms for x in runs[name]]
    same = all(a.tokens == b.tokens for a, b in zip(runs["nonsi"], runs[name])) if args.temperature == 0 else None
    details = runs[name][0].details
    return {
        "levels": list(plan.levels),
        "buffers": list(plan.buffers),
        "predicted_ms_per_token": None if name == "hsd-sp" else plan.latency,
        "measured_ms_per_token": statistics.fmean(times) / args.max_tokens,
        "mean_ms": statistics.fmean(times),
        "std_ms": statistics.stdev(times) if len(times) > 1 else 0.0,
        **speedups_of(runs, name),
        "same_tokens_as_nonsi": same,
        "acceptance_rate_per_level": details["acceptance_rate_per_level"] if details else None,
    }


def _run_plans(args, plans, make_stack, bar) -> dict:
    """Each plan ``args.repeats`` times, interleaved, repeat r on the stack and prompt of seed + r: {plan: results}."""
    from specpar.entrypoints.api import generate

    total = len(plans) * args.repeats

    def setup(r):
        rng = random.Random(args.seed + r)
        return r, make_stack(args.seed + r), [rng.randrange(args.vocab_size) for _ in range(args.prompt_length)]

    def run(name, repeat):
        r, stack, prompt = repeat
        plan = plans[name]
        drafters = [stack.models[m] for m in plan.levels[:-1]]  # none: the target alone
        kw = dict(buffers=list(plan.buffers), sp_degree=args.sp_degree) if drafters else {}
        algorithm = ("hsd-sp" if name == "hsd-sp" else "hsd") if drafters else "nonsi"
        return generate(prompt, stack.target, drafters or None, algorithm=algorithm, max_tokens=args.max_tokens,
                        temperature=args.temperature, seed=args.seed + r, stream=bar.callback,
                        **arguments.experiment_runtime(args), **kw)  # fmt: skip

    done = iter(range(1, total + 1))

    def on_result(*_) -> None:
        bar.describe(f"simulated {next(done)} of {total} runs")

    return run_arms(list(plans), args.repeats, run, setup=setup, on_result=on_result)


def _print_table(args, costs, rows) -> None:
    from specpar.entrypoints.cli.comparison import print_table, table_console
    from specpar.entrypoints.cli.hsd_plan import describe

    console = table_console(wide=150)
    mode = "greedy" if args.temperature == 0 else f"sampling at temperature {args.temperature:g}"
    console.print(
        f"costs {costs} ms per forward pass (M0 first, target last), N = {args.max_tokens}, "
        f"{args.repeats} repeats, {arguments.CLOCKS[args.runtime]}, {mode}"
    )
    columns = ("plan", "hierarchy", "T", "ms/token", "predicted", "vs non-SI", "vs SI", "accept rate per level",
               "same tokens")  # fmt: skip
    cells = []
    for name, r in rows.items():
        rates = r["acceptance_rate_per_level"]
        cells.append(
            [
                NAMES[name].format(sp=args.sp_degree),
                describe(r["levels"], len(costs)),
                str(r["buffers"] or "-"),
                f"{r['measured_ms_per_token']:.3f}",
                fmt(r["predicted_ms_per_token"], ".3f"),
                fmt(r["speedup_vs_nonsi"], ".2f", "x"),
                fmt(r["speedup_vs_si"], ".2f", "x"),
                ", ".join(fmt(x) for x in rates[1:]) if rates else "-",
                CELLS["same as non-SI"](r),
            ]
        )
    print_table(console, columns, cells, left=("plan", "hierarchy"))
    console.print(
        "predicted: the latency model's steady-state ms per token, L = sum_i c_i prod_{j>=i} R_j; "
        "HSD-SP: the same hierarchy with DSI at the top (no closed form)"
    )
