"""``specpar bench``: non-SI, SI and DSI over N prompts of a dataset, on the same loaded servers, interleaved."""

from __future__ import annotations

import dataclasses

from specpar.core.errors import ConfigError
from specpar.core.json_output import JsonLines, print_json
from specpar.core.results import fmt
from specpar.core.trees import parse_tree
from specpar.entrypoints.cli import arguments, real_models
from specpar.entrypoints.cli.comparison import NAMES, speedups_of
from specpar.entrypoints.cli.progress import TokenProgress
from specpar.experiments.loop import run_arms

DESCRIPTION = """\
Benchmark non-SI, SI and DSI on real models: for each prompt, each algorithm runs
in turn on the same loaded servers (interleaved, so a slow drift of a shared
machine does not bias the ratios), from a cold cache. Prints per algorithm the
wall time, tokens/s, acceptance rate, mean acceptance length, speedups, and
whether every greedy output equals non-SI's; writes one JSON line per prompt and
algorithm with -o.

Metrics: acceptance rate = accepted / drafted; mean acceptance length = 1 +
accepted / verification rounds; speedup = mean non-SI (or SI) time / mean time over the same prompts,
with the spread of the per-prompt ratios; a note says when they straddle 1.
"""


def register(sub) -> None:
    p = arguments.command_parser(sub, "bench", "non-SI vs SI vs DSI on real models over N prompts", DESCRIPTION)
    arguments.add_prompt_args(p, default="humaneval")
    arguments.add_prompt_count(p, 10, "prompts to run, the dataset's first n")
    defaults = {"max_tokens": 64, "temperature": 0.0, "seed": 0, "coupling": arguments.SEEDED_COUPLING}
    helps = {"max_tokens": "tokens per prompt", "seed": "{help}; prompt i: seed + i"}
    arguments.add_sampling_arguments(p, tuple(defaults), defaults, helps, advanced=("coupling",))
    spec = ("lookahead", "sp_degree", "tree", "proposer", "prefill_replicas", "dedicated_cursor")
    arguments.add_speculation_arguments(p, fields=spec)
    algorithms = p.add_argument("--algorithms", default="nonsi,si,dsi", metavar="LIST",
                                help="comma-separated algorithms (default nonsi,si,dsi; auto: the fastest by the machine "
                                     "profile's prediction, per prompt)")  # fmt: skip
    arguments.add_deprecated(p, algorithms, "--algos")
    p.add_argument("--arm", action="append", metavar='"ALGO [k=K] [tree=SHAPE]"',
                   help="instead of --algorithms: one arm, repeatable, e.g. --arm nonsi --arm 'si k=8' --arm 'si "
                        "tree=best:8' --arm 'si tree=2,2,1' (chains and trees side by side, interleaved per prompt; k "
                        "and tree default to -k and --tree)")  # fmt: skip
    arguments.add_output(p, "write one JSON line per prompt and algorithm", metavar="FILE.jsonl", old=("--out",))
    arguments.add_json(p, "print the summary as one JSON object")
    timeline = p.add_argument("--timeline", action="store_true",
                              help="with -o: each line carries its run's timeline, every server call (server, kind, "
                                   "start and end ms, tokens, drafts, tokens cached at its start, "
                                   "cancelled)")  # fmt: skip
    arguments.advanced_flag(timeline)
    arguments.add_model_args(p)
    arguments.add_machine_profile(p)
    arguments.add_runtime_arguments(p, choices=("threads", "ray"), default="threads", fields=arguments.REAL_TIME_FIELDS)
    p.set_defaults(func=run)


def run(args) -> int:
    from specpar.core.paths import check_output_file
    from specpar.experiments import prompts

    real_models.check_common(args)
    if args.output:
        args.output = check_output_file(args.output, "-o")
    arms = _arms(args)
    algorithms = list(arms)
    uses_dsi = any(algo in ("dsi", "auto") for algo, _ in arms.values())
    chosen = prompts.load(args.dataset, args.prompts)
    target, drafter, servers = real_models.load(args, args.sp_degree if uses_dsi else 1, max_model_len=4096)
    encoded = [(p.id, p.token_ids(target)) for p in chosen]
    for _, ids in encoded:
        servers.check_length(len(ids), args.max_tokens)
    real_models.warn_load()
    seen = {}  # (algorithm, prompt index): result, for the lines of -o

    def run(arm, prompt):
        i, _, ids = prompt
        algo, changes = arms[arm]
        servers.reset()
        # every arm generates N tokens, past the end of text (vLLM's benchmarks do the same)
        params = dataclasses.replace(args.sampling, seed=args.seed + i, ignore_eos=True)
        spec = real_models.arm(args.spec, servers, algo, **changes)
        return servers.generate(ids, params, speculative_config=spec, stream=bar.callback)

    def on_result(arm, i, res):
        seen[arm, i] = res
        pid, ids = encoded[i]
        out.write({"arm": arm, **_row(pid, ids, res, seen.get(("nonsi", i)), args, target)})
        bar.describe(f"{pid} {NAMES.get(arm, arm)}")

    total = len(encoded) * len(algorithms) * args.max_tokens
    with JsonLines(args.output) as out, TokenProgress(total, "benchmarking", not args.json) as bar:
        by_algo = run_arms(algorithms, len(encoded), run, setup=lambda i: (i, *encoded[i]), on_result=on_result)
    summary = summarize(by_algo, args.temperature == 0)
    why = real_models.why_line(by_algo)
    if args.json:
        print_json({"config": _config(args, target, drafter, servers), "summary": summary, "why": why})
        return 0
    _print(args, summary, why, target, drafter, servers)
    return 0


def _arms(args) -> dict:
    """{label: (algorithm, its changes to the speculation)}: one per --algorithms entry, or per --arm."""
    if not args.arm:
        algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
        bad = [a for a in algorithms if a not in NAMES]
        if bad or not algorithms:
            raise ConfigError(f"--algorithms must list some of nonsi, si, dsi, auto, got {args.algorithms!r}")
        return {a: (a, {}) for a in algorithms}
    arms = {}
    for text in args.arm:
        words = text.split()
        if not words or words[0] not in NAMES:
            raise ConfigError(f"--arm is 'ALGO [k=K] [tree=SHAPE]' with ALGO one of nonsi, si, dsi, auto, got {text!r}")
        algo, changes = words[0], {}
        if algo == "auto" and words[1:]:
            raise ConfigError(f"--arm {text!r}: auto chooses its own settings (give it alone)")
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key == "k" and value.isdigit() and int(value) > 0:
                changes["lookahead"] = int(value)
            elif key == "tree" and algo != "nonsi":
                changes["tree"] = parse_tree(value)
            else:
                raise ConfigError(f"--arm {text!r}: {word!r} is not k=K (a positive integer) or tree=SHAPE (si, dsi)")
        label = " ".join(words)
        if label in arms:
            raise ConfigError(f"--arm {text!r} is given twice")
        arms[label] = (algo, changes)
    return arms


# a result's fields in each -o line
ROW_FIELDS = ("algorithm", "lookahead", "sp_degree", "time_ms", "ttft_ms", "tokens_per_second", "acceptance_rate",
              "mean_acceptance_length", "target_forwards", "drafter_forwards")  # fmt: skip


def _row(pid, ids, res, base, args, target) -> dict:
    """One -o line; base: non-SI's result on the same prompt when it ran already."""
    same = None
    if args.temperature == 0 and base is not None and res.algorithm != "nonsi":
        same = res.tokens == base.tokens
    d = res.to_dict(timeline=args.timeline)
    return {
        "prompt_id": pid,
        "prompt_tokens": len(ids),
        **{key: d[key] for key in ROW_FIELDS},
        "same_tokens_as_nonsi": same,
        "auto": res.auto,
        "outside_forward_fraction": res.overhead["outside_forward_fraction"] if res.overhead else None,
        "tokens": res.tokens,
        "text": target.decode(res.tokens),
        **({"timeline": d["timeline"]} if args.timeline else {}),
    }


TOTALS = ("time_ms", "drafted", "accepted", "rounds", "verifications", "target_forwards", "drafter_forwards")


def summarize(by_algo: dict, greedy: bool) -> dict:
    """Per algorithm: totals over all prompts, and :func:`~specpar.experiments.loop.speedup` over the prompts
    (baseline total / this total, with the per-prompt spread)."""
    out = {}
    base = by_algo.get("nonsi")
    for algo, results in by_algo.items():
        total = {name: sum(getattr(r, name) for r in results) for name in TOTALS}
        time_ms, drafted, accepted = total["time_ms"], total["drafted"], total["accepted"]
        tokens = sum(len(r.tokens) for r in results)
        same = all(a.tokens == b.tokens for a, b in zip(base, results)) if greedy and base and algo != "nonsi" else None
        overheads = [r.overhead for r in results]  # none on Ray: the forward passes run in the actors
        outside = None
        if all(overheads):
            outside = sum(o["outside_forward_ms"] for o in overheads) / sum(o["wall_ms"] for o in overheads)
        s = {
            "prompts": len(results),
            "tokens": tokens,
            "wall_time_s": time_ms / 1000,
            "tokens_per_second": tokens / (time_ms / 1000) if time_ms else None,
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_acceptance_length": tokens / total["verifications"] if drafted and total["verifications"] else None,
            "mean_run_length": 1 + accepted / total["rounds"] if drafted and total["rounds"] else None,
            "target_forwards": total["target_forwards"],
            "drafter_forwards": total["drafter_forwards"],
            "tokens_per_target_pass": tokens / max(1, total["target_forwards"]),
            **speedups_of(by_algo, algo),
            "same_tokens_as_nonsi": same,
            "outside_forward_fraction": outside,
        }
        chosen = [r.auto for r in results if r.auto is not None]
        if chosen:
            s["auto"] = auto_summary(chosen, results)
        out[algo] = s
    return out


def auto_summary(chosen: list[dict], results) -> dict:
    """What ``auto`` ran over the prompts (label -> prompts), why it chose the one it ran most (its reason line, of
    the first prompt it ran that on), its predicted and measured times in all (s) and the median and worst
    |predicted - measured| / measured over the prompts."""
    import statistics
    from collections import Counter

    errors = [abs(c["predicted_ms"] - r.time_ms) / r.time_ms for c, r in zip(chosen, results) if r.time_ms > 0]
    ran = dict(Counter(c["label"] for c in chosen).most_common())
    return {
        "ran": ran,
        "why": next(c["reason"] for c in chosen if c["label"] == next(iter(ran))),
        "predicted_s": sum(c["predicted_ms"] for c in chosen) / 1000,
        "measured_s": sum(r.time_ms for r in results) / 1000,
        "median_error": statistics.median(errors) if errors else None,
        "worst_error": max(errors) if errors else None,
    }


def _config(args, target, drafter, servers) -> dict:
    from specpar.core.trees import BestFirst

    return {
        "dataset": args.dataset,
        "prompts": args.prompts,
        "max_new_tokens": args.max_tokens,
        "lookahead": args.lookahead,
        "sp_degree": args.sp_degree,
        "tree": str(args.tree) if isinstance(args.tree, BestFirst) else args.tree,
        "arms": args.arm,
        "temperature": args.temperature,
        "target": target.name,
        "drafter": drafter.name,
        "devices": sorted({s.device for s in servers.all}),
        "torch_threads": {a: servers.threads_for(a) for a in NAMES if a != "auto"},
    }


def _print(args, summary, why, target, drafter, servers) -> None:

    from specpar.entrypoints.cli.comparison import print_comparison, table_console

    console = table_console()
    mode = "greedy" if args.temperature == 0 else f"sampling at temperature {args.temperature:g}"
    console.print(
        f"{target.name} (target) + {drafter.name} (drafter) on {', '.join(sorted({s.device for s in servers.all}))}; "
        f"{args.prompts} {args.dataset} prompts x {args.max_tokens} tokens; "
        f"{'arms as named' if args.arm else f'lookahead {args.lookahead}'}, "
        f"SP {args.sp_degree}; {mode}; each algorithm from a cold cache"
    )
    rows = {arm: {**s, "name": NAMES.get(arm, arm), "time_s": s["wall_time_s"]} for arm, s in summary.items()}
    columns = ("time s", "tokens /s", "vs non-SI", "vs SI", "accept rate", "run len", "tokens/pass", "same as non-SI",
               "outside fwd")  # fmt: skip
    print_comparison(console, rows, columns, why=why)
    for algo, s in summary.items():
        if "auto" in s:
            a = s["auto"]
            ran = ", ".join(f"{label} on {n} prompt{'s' if n > 1 else ''}" for label, n in a["ran"].items())
            console.print(
                f"{NAMES.get(algo, algo)} ran {ran}: predicted {a['predicted_s']:.1f} s in all, measured "
                f"{a['measured_s']:.1f} s (|predicted - measured| / measured per prompt: median "
                f"{fmt(100 * a['median_error'], '.0f', '%')}, worst {fmt(100 * a['worst_error'], '.0f', '%')})"
            )
            console.print(f"why (its most frequent choice): {a['why']}")
    if args.output:
        console.print(f"per prompt: {args.output}")
