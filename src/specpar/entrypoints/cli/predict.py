"""``specpar predict``: every method's predicted time on this machine, each at its best settings, fastest first."""

from __future__ import annotations

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.entrypoints.cli import arguments

DESCRIPTION = """\
Predict the time of every method (non-SI, SI, DSI, SI and DSI over token trees, SI
and DSI with the n-gram proposer, HSD) for a prompt of --prompt-length tokens and
-N output tokens, each at its best settings (lookahead, SP degree, dedicated
cursor, tree shape), fastest first. Each prediction runs the method's own code on
the virtual clock with the machine profile's measured costs: the prefill, a pass
over k tokens v(k) at the threads the engine gives a pass, the drafter's steps,
the slowdown while several servers run at once, the runtime's overheads and the
acceptance (and n-gram match) rates. `--algorithm auto` runs the first row.
"""


def register(sub) -> None:
    what = "every method's predicted time on this machine, fastest first"
    p = arguments.command_parser(sub, "predict", what, DESCRIPTION)
    arguments.add_machine_profile(p, advanced=False)
    integer = arguments.integer
    p.add_argument("--prompt-length", type=integer, default=128, metavar="N", help="prompt tokens (default 128)")
    arguments.add_sampling_arguments(p, ("max_tokens",), {"max_tokens": 64}, {"max_tokens": "output tokens"})
    p.add_argument("--sp-degree", type=integer, default=2, metavar="SP",
                   help="the engine's target servers: DSI's SP degree at most (default 2)")  # fmt: skip
    what = "the engine's processing units (default: SP + 1, as `specpar generate` makes)"
    units = p.add_argument("--units", type=integer, default=None, metavar="U", help=what)
    runtime = p.add_argument("--runtime", choices=("threads", "ray", "both"), default="threads",
                             help="the runtime the methods run on (both: each method on each)")  # fmt: skip
    arguments.advanced_flag(units)
    arguments.advanced_flag(runtime)
    arguments.add_json(p, "print one JSON object instead of a table")
    arguments.add_model_args(p, advanced=("--target", "--drafter", "--backend", "--devices"))
    p.set_defaults(func=run)


def run(args) -> int:
    from specpar.prediction.methods import EngineShape, predict_methods

    for name in ("prompt_length", "max_tokens", "sp_degree"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    profile = _profile(args)
    runtimes = ("threads", "ray") if args.runtime == "both" else (args.runtime,)
    profile = profile.for_runtime("ray") if "ray" in runtimes else profile  # Ray's round trip: measured or assumed
    units = args.units if args.units is not None else args.sp_degree + 1
    shape = EngineShape(units=units, targets=args.sp_degree, runtime=runtimes[0], cpu=not profile.key.get("gpu"))
    from specpar.entrypoints.cli.progress import status
    from specpar.prediction.auto import chosen

    with status("predicting every method", not args.json):
        result = predict_methods(profile, args.prompt_length, args.max_tokens, shape, runtimes=runtimes)
    if args.json:
        print_json(dict(_json(args, profile, result), auto=chosen(result).label))
        return 0
    _table(profile, result, chosen(result), shape.cpu)
    return 0


def _profile(args):
    """--profile's file, else the profile measured for the models (loaded to find it)."""
    from specpar.prediction.machine import load_or_build

    if args.profile is not None:
        return load_or_build(args.profile)
    from specpar.entrypoints.cli import real_models

    target, drafter = real_models.load_models(args, real_models.devices(args))
    return load_or_build(target=target, drafter=drafter)


def _json(args, profile, result) -> dict:
    plain = result.of("nonsi")
    return {
        "prompt_tokens": result.prompt_tokens,
        "max_tokens": result.max_tokens,
        "profile": {"key": dict(profile.key), "meta": dict(profile.meta)},
        "methods": [
            dict(p.to_dict(), speedup_vs_nonsi=plain.ms / p.ms if plain and p.ms > 0 else None) for p in result.best
        ],
    }


def _table(profile, result, auto, cpu: bool) -> None:
    from specpar.core.results import fmt
    from specpar.entrypoints.cli.comparison import print_table, table_console
    from specpar.prediction.auto import seconds

    console = table_console()
    plain = result.of("nonsi")
    rows = []
    for p in result.best:
        rate = result.max_tokens / (p.ms / 1000) if p.ms > 0 else None
        ratio = plain.ms / p.ms if plain and p.ms > 0 else None
        rows.append([p.label, seconds(p.ms), fmt(rate), fmt(ratio), str(p.threads) if cpu else "-"])
    title = (
        f"predicted for {result.prompt_tokens} prompt tokens and {result.max_tokens} new, fastest first "
        f"({profile.target.name} / {profile.drafter.name if profile.drafter else 'no drafter'})"
    )
    print_table(console, ("method and best settings", "time", "tokens /s", "vs non-SI", "threads"), rows, title,
                left=("method and best settings",))  # fmt: skip
    console.print(f"--algorithm auto runs: {auto.label}", style="bold")
