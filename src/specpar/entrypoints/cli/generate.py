"""``specpar generate``: real text from a real model pair, streamed as it is verified, with its statistics."""

from __future__ import annotations

import contextlib
import sys

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.core.results import metrics_footnote
from specpar.entrypoints.cli import real_models
from specpar.entrypoints.cli.command_args import add_json, add_max_new_tokens, add_repeats, command_parser
from specpar.entrypoints.cli.options import integer, number, seed
from specpar.entrypoints.cli.progress import TokenProgress
from specpar.entrypoints.cli.runtime_args import REAL_TIME_FIELDS, add_runtime_arguments
from specpar.experiments.loop import run_arms

DESCRIPTION = """\
Generate text with non-SI, SI or DSI on real transformers models (thread runtime).
The output is exactly the target's: token for token when greedy (the default), in
distribution when sampling. Text is printed as it is verified; then acceptance
statistics and tokens/s. With --compare, the other two algorithms run on the same
loaded servers and a table shows all three side by side.
"""

NAMES = real_models.NAMES


def register(sub) -> None:
    p = command_parser(sub, "generate", "generate text with real models (non-SI, SI or DSI), streamed", DESCRIPTION)
    p.add_argument(
        "prompt", nargs="?", default=None, help="the prompt text; with --dataset, an index or id in it (default 0)"
    )
    real_models.add_prompt_args(p)
    p.add_argument("--chat", action="store_true", help="put the prompt text in the target's chat template")
    real_models.add_speculation_arguments(p)
    add_max_new_tokens(p, 64, "tokens to generate")
    p.add_argument("--temperature", type=number, default=0.0, metavar="T", help="0 (default) greedy; > 0 sampling")
    p.add_argument("--seed", type=seed, default=0, help="keys every random draw when sampling")
    add_sampling_args(p)
    p.add_argument("--compare", action="store_true", help="also run the other algorithms and print all side by side")
    add_repeats(p, 1, "with --compare: runs of each algorithm, interleaved, for the spread of the ratios")
    add_json(p, "print one JSON object instead of text and tables")
    real_models.add_model_args(p)
    add_runtime_arguments(p, choices=("threads", "ray"), default="threads", fields=REAL_TIME_FIELDS)
    p.set_defaults(func=run)


def chosen_prompt(args):
    """The --dataset prompt the arguments name (None for a prompt text), checked before any model loads."""
    from specpar.experiments import prompts

    if args.dataset:
        return prompts.pick(prompts.load(args.dataset), args.prompt or "0")
    if not args.prompt:
        raise ConfigError("give a prompt text, or --dataset SOURCE with an index")
    return None


def prompt_ids(args, target, chosen=None) -> tuple[str, list[int]]:
    """(what the prompt is, its token ids) from the positional prompt, or the ``chosen`` --dataset prompt."""
    if chosen is not None:
        return chosen.id, chosen.token_ids(target)
    ids = target.chat_prompt([args.prompt]) if args.chat else target.encode(args.prompt)
    if not ids:
        raise ConfigError("the prompt encodes to no tokens")
    return "prompt", ids


def add_sampling_args(p) -> None:
    g = p.add_argument_group("sampling and stopping (vLLM's SamplingParams)")
    g.add_argument(
        "--top-k", type=integer, default=0, metavar="K", help="keep the k most likely tokens (default 0: all)"
    )
    g.add_argument(
        "--top-p", type=number, default=1.0, metavar="P", help="keep the most likely tokens up to this probability"
    )
    g.add_argument(
        "--min-p", type=number, default=0.0, metavar="P", help="drop tokens below min-p x the top token's probability"
    )
    g.add_argument(
        "--repetition-penalty",
        type=number,
        default=1.0,
        metavar="R",
        help="> 1 makes tokens already seen less likely (default 1)",
    )
    g.add_argument("--stop", action="append", default=None, metavar="TEXT", help="stop at this text (repeatable)")
    g.add_argument(
        "--stop-token-id",
        action="append",
        type=integer,
        default=None,
        metavar="ID",
        help="stop at this token (repeatable)",
    )
    g.add_argument("--ignore-eos", action="store_true", help="go on past the model's end-of-text tokens")


def sampling_params(args):
    """The request's SamplingParams from the command's flags (a ConfigError names a bad one)."""
    from specpar.core.params import SamplingParams

    return SamplingParams(
        temperature=args.temperature,
        seed=args.seed,
        max_tokens=args.max_new_tokens,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        stop=args.stop,
        stop_token_ids=args.stop_token_id,
        ignore_eos=args.ignore_eos,
    )


class Streamer:
    """Prints the prompt's text, then the output's text as it is verified (never any of a stop string)."""

    def __init__(self, model, prompt_ids, stop=(), out=None):
        from specpar.core.stopping import TextStream

        self.out = out or sys.stdout
        self.out.write(model.decode(prompt_ids))
        self.text = TextStream(model.tokenizer, prompt_ids, stop)

    def __call__(self, tokens) -> None:
        self._write(self.text.push(tokens))

    def finish(self) -> None:
        self._write(self.text.finish())

    def _write(self, piece: str) -> None:
        if piece:
            self.out.write(piece)
            self.out.flush()


def run(args) -> int:
    real_models.check_common(args)
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    if args.repeats > 1 and not args.compare:
        raise ConfigError("--repeats is for --compare (it repeats the comparison)")
    params = sampling_params(args)
    from specpar.algorithms.checks import check_tree_processors

    check_tree_processors(args.spec, params.processors)  # before the models load (the engine checks it again)
    chosen = chosen_prompt(args)
    main = args.algorithm
    algorithms = [main] + ([a for a in ("nonsi", "si", "dsi") if a != main] if args.compare else [])
    sp = args.sp_degree if "dsi" in algorithms else 1
    target, drafter, servers = real_models.load(args, sp, max_tokens=4096)
    what, ids = prompt_ids(args, target, chosen)
    servers.check_length(len(ids), args.max_new_tokens)
    if args.compare:
        real_models.warn_load()
    repeats = args.repeats
    left = len(algorithms) * repeats - 1  # runs after the first, shown by a progress bar (the first by its text)
    bar = None

    def run(algo, r):
        stream = None
        if r == 0 and algo == main and not args.json:
            print(
                f"[{NAMES[algo]} on {what}: {len(ids)} prompt tokens, {args.max_new_tokens} new, "
                f"{'greedy' if args.temperature == 0 else f'temperature {args.temperature:g}'}]",
                file=sys.stderr,
            )
            stream = Streamer(target, ids, params.stop)
        servers.reset()  # every algorithm starts from a cold cache (its TTFT includes the prefill)
        res = servers.generate(
            ids,
            params,
            speculative_config=real_models.arm(args.spec, servers, algo),
            stream=stream or (bar.callback if bar else None),
        )
        if stream is not None:
            stream.finish()
            print()
            if res.finish_reason == "stop":
                print(f"[stopped after {len(res.tokens)} tokens: end of text or a stop]", file=sys.stderr)
        return res

    def on_result(algo, r, res):
        nonlocal bar
        if bar is None and left:
            bar = bars.enter_context(TokenProgress(left * args.max_new_tokens, "comparing", not args.json))
        if bar is not None:
            bar.describe(f"ran {NAMES[algo]}, repeat {r + 1} of {repeats}")

    with contextlib.ExitStack() as bars:
        runs = run_arms(algorithms, repeats, run, on_result=on_result)
    results = {a: rs[0] for a, rs in runs.items()}
    speedups = {a: real_models.speedups(runs, a) for a in runs} if args.compare else None
    if args.json:
        print_json(
            {
                "prompt": what,
                "prompt_tokens": len(ids),
                "text": results[main].text,
                "finish_reason": results[main].finish_reason,
                "results": {a: dict(r.to_dict(), overhead=r.overhead) for a, r in results.items()},
                "repeats": repeats,
                "time_ms": {a: [r.time_ms for r in rs] for a, rs in runs.items()},
                "speedups": speedups,
            }
        )
        return 0
    _report(args, results, runs, speedups)
    return 0


def _report(args, results, runs, speedups) -> None:
    """The main algorithm's statistics (its first run); with --compare a table of all, times the mean over
    the repeats and ratios with their spread."""

    from specpar.core.results import fmt
    from specpar.entrypoints.cli.console import print_table, table_console

    console = table_console(stderr=True, wide=120)
    main = results[args.algorithm]
    console.print(
        f"{NAMES[args.algorithm]}: {len(main.tokens)} tokens in {main.time_ms / 1000:.2f} s = "
        f"{fmt(main.tokens_per_second)} tokens/s"
        f" (first token {main.ttft_ms / 1000:.2f} s); "
        + (
            ""
            if args.algorithm == "nonsi"
            else f"acceptance rate {fmt(main.acceptance_rate)}, run length {fmt(main.mean_run_length)} "
            f"(tokens per target-made token), {fmt(main.mean_acceptance_length)} tokens per target pass, "
            f"lookahead {main.lookahead}, "
        )
        + (
            f"time outside forward passes {100 * main.overhead['outside_forward_fraction']:.2f}%"
            if main.overhead
            else f"on {args.runtime}"
        )
    )
    if len(results) == 1:
        return
    n = len(runs["nonsi"])
    title = f"same prompt, same loaded servers, {n} interleaved run{'s' if n > 1 else ''} each"
    columns = (
        "algorithm",
        "time s",
        "tokens /s",
        "vs non-SI",
        "vs SI",
        "accept rate",
        "run len",
        "tokens/pass",
        "same as non-SI",
    )
    rows = []
    base = runs.get("nonsi")
    for algo in ("nonsi", "si", "dsi"):
        r = results[algo]
        mean_ms = sum(x.time_ms for x in runs[algo]) / len(runs[algo])
        same = all(x.tokens == b.tokens for x, b in zip(runs[algo], base))
        rows.append(
            [
                NAMES[algo],
                f"{mean_ms / 1000:.2f}",
                fmt(len(r.tokens) / (mean_ms / 1000) if mean_ms > 0 else None),
                real_models.speedup_cell(speedups[algo], "nonsi"),
                real_models.speedup_cell(speedups[algo], "si"),
                "-" if algo == "nonsi" else fmt(r.acceptance_rate),
                "-" if algo == "nonsi" else fmt(r.mean_run_length),
                fmt(r.mean_acceptance_length),
                "-" if algo == "nonsi" or args.temperature else ("yes" if same else "[red]NO[/red]"),
            ]
        )
    print_table(console, columns, rows, title)
    console.print(metrics_footnote(columns), style="dim")
    why = real_models.why_line(runs)
    if why:
        console.print(why)
    for line in real_models.inconclusive_lines(speedups):
        console.print(f"[yellow]note:[/yellow] {line}")
    if args.repeats == 1:
        console.print("one run each: no spread to judge the ratios by; --repeats 3 or more gives one", style="dim")
