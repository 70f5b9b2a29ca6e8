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
from specpar.entrypoints.cli.arguments import (
    CLOCKS,
    PAPER_SP_DEGREE,
    ConfigOptions,
    Default,
    add_json,
    add_pair_arguments,
    add_repeats,
    add_runtime_arguments,
    add_sampling_arguments,
    advanced_flag,
    command_parser,
    experiment_runtime,
    integers,
)
from specpar.entrypoints.cli.progress import TokenProgress
from specpar.experiments.loop import run_arms, speedup

DEFAULT_COSTS = [0.2, 1.5, 6.0, 30.0]
DEFAULT_CHAIN = [0.7, 0.85, 0.9]


def register(modes) -> None:
    from specpar.entrypoints.cli.hsd_plan import add_plan_arguments, parse_costs

    p = command_parser(modes, "hsd", "the optimizer's HSD stack vs the best single drafter vs the target alone",
                       __doc__.split("\n\n", 1)[1])  # fmt: skip
    g = p.add_argument_group("the stack")
    add_plan_arguments(g, required=False)
    g.add_argument(
        "--chain",
        type=parse_costs,
        default=None,
        metavar="A01,A12,...",
        help="acceptance rates of adjacent models alpha[i][i+1] (instead of --alpha; "
        f"default {','.join(map(str, DEFAULT_CHAIN))} with costs {','.join(map(str, DEFAULT_COSTS))} ms)",
    )
    levels = g.add_argument(
        "--levels",
        type=integers,
        default=None,
        metavar="I,J,...",
        help="run this hierarchy (model indices, the target last) instead of the optimizer's",
    )
    advanced_flag(levels)
    spec = ConfigOptions(
        SpeculativeConfig,
        "spec",
        fields=("buffers", "sp_degree"),
        advanced=("buffers",),
        defaults={"buffers": Default(None, "the optimizer's"), "sp_degree": PAPER_SP_DEGREE},
        helps={
            "buffers": "{help}: the sizes for --levels, one per level below the target",
            "sp_degree": "HSD-SP: target servers that verify at once",
        },
    )
    spec.add_to(g)
    add_pair_arguments(p, fields=("vocab_size", "seed", "prompt_length"), defaults={"vocab_size": 8})
    add_sampling_arguments(p, ("max_tokens", "temperature"), {"max_tokens": 100, "temperature": 0.0})
    add_runtime_arguments(p)
    add_repeats(p, 5, "runs per plan, interleaved")
    add_json(p)
    p.set_defaults(func=run)


def _stack_parameters(args):
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
        kw = dict(vocab_size=args.vocab_size, seed=seed)
        if args.alpha is not None:
            return SimulatedStack.from_matrix(read_alpha(args.alpha), lats, **kw)
        return SimulatedStack(args.chain if args.chain is not None else DEFAULT_CHAIN, lats, **kw)

    return costs, make_stack


def run(args) -> int:
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    from specpar.planning.hsd_latency import check_costs, hierarchy_latency
    from specpar.planning.hsd_optimizer import HsdPlan, best_single_drafter, optimize

    costs, make_stack = _stack_parameters(args)
    check_costs(costs)
    stack0 = make_stack(args.seed)
    alpha = stack0.alpha
    K = len(costs) - 1
    if args.levels is not None:
        buffers = args.buffers or []
        hsd_plan = HsdPlan(tuple(args.levels), tuple(buffers), hierarchy_latency(costs, alpha, args.levels, buffers))
    else:
        hsd_plan = optimize(costs, alpha, args.t_max)
    plans = {"nonsi": HsdPlan((K,), (), costs[K]), "si": best_single_drafter(costs, alpha, args.t_max), "hsd": hsd_plan}
    if len(hsd_plan.levels) > 1:
        plans["hsd-sp"] = hsd_plan  # the same hierarchy, its target verifying on --sp-degree servers (no model)

    total = len(plans) * args.repeats
    with TokenProgress(total * args.max_tokens, f"simulating {total} runs", not args.json) as bar:
        runs = _run_plans(args, plans, make_stack, bar)

    n = args.max_tokens
    rows = {}
    for name, plan in plans.items():
        times = [x.time_ms for x in runs[name]]
        rows[name] = {
            "levels": list(plan.levels),
            "buffers": list(plan.buffers),
            "predicted_ms_per_token": None if name == "hsd-sp" else plan.latency,
            "measured_ms_per_token": statistics.fmean(times) / n,
            "mean_ms": statistics.fmean(times),
            "std_ms": statistics.stdev(times) if len(times) > 1 else 0.0,
            **_speedups(runs, name),
            "same_tokens_as_nonsi": all(a.tokens == b.tokens for a, b in zip(runs["nonsi"], runs[name]))
            if args.temperature == 0
            else None,
            "acceptance_rate_per_level": runs[name][0].details["acceptance_rate_per_level"]
            if runs[name][0].details
            else None,
        }
    if args.json:
        print_json(
            {
                "costs_ms": costs,
                "alpha": alpha.tolist(),
                "max_new_tokens": n,
                "runtime": args.runtime,
                "temperature": args.temperature,
                "repeats": args.repeats,
                "sp_degree": args.sp_degree,
                "results": rows,
            },
        )
        return 0
    _print_table(args, costs, rows)
    return 0


def _speedups(runs, name) -> dict:
    """The plan's speedups over non-SI and SI (:func:`~specpar.experiments.loop.speedup`), with their spread."""
    out = {}
    for base in ("nonsi", "si"):
        s = speedup([x.time_ms for x in runs[base]], [x.time_ms for x in runs[name]])
        out[f"speedup_vs_{base}"] = s.value
        out[f"speedup_vs_{base}_spread"] = s.to_dict()
    return out


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
        kw = dict(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            seed=args.seed + r,
            stream=bar.callback,
            **experiment_runtime(args),
        )
        if len(plan.levels) == 1:
            return generate(prompt, stack.target, algorithm="nonsi", **kw)
        drafters = [stack.models[m] for m in plan.levels[:-1]]
        return generate(
            prompt,
            stack.target,
            drafters,
            algorithm="hsd-sp" if name == "hsd-sp" else "hsd",
            buffers=list(plan.buffers),
            sp_degree=args.sp_degree,
            **kw,
        )

    done = iter(range(1, total + 1))
    return run_arms(
        list(plans),
        args.repeats,
        run,
        setup=setup,
        on_result=lambda *_: bar.describe(f"simulated {next(done)} of {total} runs"),
    )


def _print_table(args, costs, rows) -> None:
    from rich.table import Table

    from specpar.core.results import fmt
    from specpar.entrypoints.cli.console import table_console
    from specpar.entrypoints.cli.hsd_plan import describe

    console = table_console(wide=150)
    clock = CLOCKS[args.runtime]
    mode = "greedy" if args.temperature == 0 else f"sampling at temperature {args.temperature:g}"
    console.print(
        f"costs {costs} ms per forward pass (M0 first, target last), N = {args.max_tokens}, "
        f"{args.repeats} repeats, {clock}, {mode}"
    )
    table = Table()
    for col in (
        "plan",
        "hierarchy",
        "T",
        "ms/token",
        "predicted",
        "vs non-SI",
        "vs SI",
        "accept rate per level",
        "same tokens",
    ):
        table.add_column(col, justify="left" if col in ("plan", "hierarchy") else "right")
    names = {
        "nonsi": "target alone",
        "si": "best single drafter",
        "hsd": "HSD",
        "hsd-sp": f"HSD-SP (SP {args.sp_degree})",
    }
    for name, r in rows.items():
        rates = r["acceptance_rate_per_level"]
        table.add_row(
            names[name],
            describe(r["levels"], len(costs)),
            str(r["buffers"] or "-"),
            f"{r['measured_ms_per_token']:.3f}",
            "-" if name == "hsd-sp" else f"{r['predicted_ms_per_token']:.3f}",
            f"{r['speedup_vs_nonsi']:.2f}x",
            f"{r['speedup_vs_si']:.2f}x",
            ", ".join(fmt(x) for x in rates[1:]) if rates else "-",
            "-" if r["same_tokens_as_nonsi"] is None else ("yes" if r["same_tokens_as_nonsi"] else "[red]NO[/red]"),
        )
    console.print(table)
    console.print(
        "predicted: the latency model's steady-state ms per token, L = sum_i c_i prod_{j>=i} R_j; "
        "HSD-SP: the same hierarchy with DSI at the top (no closed form)"
    )
