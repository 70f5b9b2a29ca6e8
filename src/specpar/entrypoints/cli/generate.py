"""``specpar generate``: real text from a real model pair, streamed as it is verified, with its statistics."""

from __future__ import annotations

import contextlib
import statistics
import sys

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.entrypoints.cli import arguments, real_models
from specpar.entrypoints.cli.comparison import NAMES, speedups_of
from specpar.entrypoints.cli.progress import TokenProgress
from specpar.experiments.loop import run_arms

DESCRIPTION = """\
Generate text with non-SI, SI, DSI or auto on real models: GGUF files on llama.cpp
(the default for the default pair on the CPU; bitwise exact, or --no-exact for its
fast mode) or transformers models (--backend transformers, any torch device), on
threads or Ray (--runtime). The output is exactly the target's: token for token when
greedy (the default), in distribution when sampling. Text is printed as it is
verified; then acceptance statistics and tokens/s. --algorithm auto runs the method
the pair's machine profile predicts fastest and says why. With --compare, the other
algorithms run on the same loaded servers and a table shows them side by side, with
each one's predicted time when the pair has a machine profile.
"""

GENERATE_SAMPLING = ("max_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "stop",
                     "stop_token_ids", "ignore_eos", "seed", "coupling")  # fmt: skip


def register(sub) -> None:
    p = arguments.command_parser(
        sub, "generate", "generate text with real models (non-SI, SI or DSI), streamed", DESCRIPTION
    )
    p.add_argument(
        "prompt", nargs="?", default=None, help="the prompt text; with --dataset, an index or id in it (default 0)"
    )
    arguments.add_prompt_args(p)
    p.add_argument("--chat", action="store_true", help="put the prompt text in the target's chat template")
    arguments.add_speculation_arguments(p, algorithms=("nonsi", "si", "dsi", "auto"))
    defaults = {"max_tokens": 64, "temperature": 0.0, "seed": 0, "coupling": arguments.SEEDED_COUPLING}
    title = "sampling and stopping (vLLM's SamplingParams)"
    arguments.add_sampling_arguments(p, GENERATE_SAMPLING, defaults, title=title, advanced=("coupling",))
    p.add_argument("--compare", action="store_true", help="also run the other algorithms and print all side by side")
    arguments.add_repeats(p, 1, "with --compare: runs of each algorithm, interleaved, for the spread of the ratios")
    arguments.add_json(p, "print one JSON object instead of text and tables")
    arguments.add_model_args(p)
    arguments.add_machine_profile(p)
    arguments.add_runtime_arguments(p, choices=("threads", "ray"), default="threads", fields=arguments.REAL_TIME_FIELDS)
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


class Streamer:
    """Prints the prompt's text, then the output's text as it is verified (never any of a stop string)."""

    def __init__(self, model, prompt_ids, stop=()):
        from specpar.core.stopping import TextStream

        sys.stdout.write(model.decode(prompt_ids))
        self.text = TextStream(model.tokenizer, prompt_ids, stop)

    def __call__(self, tokens) -> None:
        self._write(self.text.push(tokens))

    def finish(self) -> None:
        self._write(self.text.finish())

    def _write(self, piece: str) -> None:
        if piece:
            sys.stdout.write(piece)
            sys.stdout.flush()


def run(args) -> int:
    real_models.check_common(args)
    if args.repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {args.repeats}")
    if args.repeats > 1 and not args.compare:
        raise ConfigError("--repeats is for --compare (it repeats the comparison)")
    from specpar.algorithms.checks import check_tree_processors

    check_tree_processors(args.spec, args.sampling.processors)  # before the models load (the engine checks it again)
    chosen = chosen_prompt(args)
    main = args.algorithm
    algorithms = [main] + ([a for a in ("nonsi", "si", "dsi", "auto") if a != main] if args.compare else [])
    sp = args.sp_degree if {"dsi", "auto"} & set(algorithms) else 1
    target, drafter = real_models.load_models(args)
    what, ids = prompt_ids(args, target, chosen)  # before the servers: their caches are sized for this request
    _, _, servers = real_models.load(args, sp, real_models.cache_tokens(args, len(ids), sp), models=(target, drafter))
    servers.check_length(len(ids), args.max_tokens)
    predicted, why_not = predictions(servers, args, algorithms, len(ids))
    if main != "auto" and "auto" not in predicted:  # no profile to choose from: the comparison goes on without it
        algorithms = [a for a in algorithms if a != "auto"]
    if args.compare:
        real_models.warn_load()
    runs = _run_all(args, algorithms, servers, target, what, ids)
    results = {a: rs[0] for a, rs in runs.items()}
    speedups = {a: speedups_of(runs, a) for a in runs} if args.compare else None
    if args.json:
        print_json(
            {
                "prompt": what,
                "prompt_tokens": len(ids),
                "text": results[main].text,
                "finish_reason": results[main].finish_reason,
                "results": {a: dict(r.to_dict(), overhead=r.overhead) for a, r in results.items()},
                "repeats": args.repeats,
                "time_ms": {a: [r.time_ms for r in rs] for a, rs in runs.items()},
                "speedups": speedups,
                "predicted_ms": predicted,
            }
        )
        return 0
    _report(args, results, runs, speedups, predicted, why_not)
    return 0


def _run_all(args, algorithms, servers, target, what: str, ids: list[int]) -> dict:
    """Each algorithm ``args.repeats`` times on the loaded servers (:func:`~specpar.experiments.loop.run_arms`), each
    from a cold cache: the main algorithm's first run streams its text (unless --json), the later ones move a
    progress bar. ``what``: the prompt ("prompt", or a --dataset id); ``ids``: its tokens."""
    bar = None

    def run(algo: str, r: int):
        stream = None
        if r == 0 and algo == args.algorithm and not args.json:
            mode = "greedy" if args.temperature == 0 else f"temperature {args.temperature:g}"
            print(
                f"[{NAMES[algo]} on {what}: {len(ids)} prompt tokens, {args.max_tokens} new, {mode}]", file=sys.stderr
            )
            stream = Streamer(target, ids, args.sampling.stop)
        servers.reset()  # every algorithm starts from a cold cache (its TTFT includes the prefill)
        spec = real_models.arm(args.spec, servers, algo)
        res = servers.generate(
            ids, args.sampling, speculative_config=spec, stream=stream or (bar.callback if bar else None)
        )
        if stream is not None:
            stream.finish()
            print()
            if res.finish_reason == "stop":
                print(f"[stopped after {len(res.tokens)} tokens: end of text or a stop]", file=sys.stderr)
        return res

    def on_result(algo: str, r: int, res) -> None:
        nonlocal bar
        left = len(algorithms) * args.repeats - 1  # the runs after the first
        if bar is None and left:
            bar = bars.enter_context(TokenProgress(left * args.max_tokens, "comparing", not args.json))
        if bar is not None:
            bar.describe(f"ran {NAMES[algo]}, repeat {r + 1} of {args.repeats}")

    with contextlib.ExitStack() as bars:
        return run_arms(algorithms, args.repeats, run, on_result=on_result)


NOT_YET = (
    "no machine profile of these models on this machine yet: `specpar profile` measures one (or `--algorithm "
    "auto` on first need), --profile FILE gives one"
)


def predictions(engine, args, algorithms, prompt_tokens: int) -> tuple[dict, str | None]:
    """{algorithm: its predicted ms} for the runs of ``algorithms`` on ``engine`` (auto's: its choice's), and why
    there are none (no machine profile of the models given or cached, or a ConfigError's words), else None."""
    from specpar.prediction.auto import predict_request
    from specpar.prediction.machine import cached

    if args.algorithm != "auto" and args.profile is None:  # a comparison does not measure the machine: auto does
        profile = cached(engine.target_model, engine.drafter_model)
        if profile is None:
            return {}, NOT_YET
        engine.auto(profile)  # auto predicts from the profile found (the cache is read, the models' files hashed, once)
    out = {}
    try:
        for algo in algorithms:
            spec = real_models.arm(args.spec, engine, algo)
            out[algo] = predict_request(engine, spec, prompt_tokens, args.max_tokens)
    except ConfigError as exc:
        if args.algorithm == "auto":
            raise
        return out, str(exc)
    return out, None


def _report(args, results, runs, speedups, predicted, why_not) -> None:
    """The main algorithm's statistics (its first run); with --compare a table of all, times the mean over
    the repeats and ratios with their spread."""
    from specpar.core.results import fmt
    from specpar.entrypoints.cli.comparison import table_console

    console = table_console(stderr=True, wide=120)
    main = results[args.algorithm]
    if main.auto is not None:
        console.print(
            f"auto ran {main.auto['label']}: predicted {main.auto['predicted_ms'] / 1000:.2f} s, measured "
            f"{main.time_ms / 1000:.2f} s ({main.auto['reason']})"
        )
    drafts = (
        f"acceptance rate {fmt(main.acceptance_rate)}, run length {fmt(main.mean_run_length)} (tokens per "
        f"target-made token), {fmt(main.mean_acceptance_length)} tokens per target pass, lookahead {main.lookahead}, "
    )
    where = f"on {args.runtime}"
    if main.overhead:
        where = f"time outside forward passes {100 * main.overhead['outside_forward_fraction']:.2f}%"
    console.print(
        f"{NAMES[args.algorithm]}: {len(main.tokens)} tokens in {main.time_ms / 1000:.2f} s = "
        f"{fmt(main.tokens_per_second)} tokens/s (first token {main.ttft_ms / 1000:.2f} s); "
        f"{'' if main.algorithm == 'nonsi' else drafts}{where}"
    )
    if len(results) > 1:
        _comparison(console, args, results, runs, speedups, predicted)
        if why_not:
            console.print(f"no predictions: {why_not}", style="dim")
        if args.repeats == 1:
            console.print("one run each: no spread to judge the ratios by; --repeats 3 or more gives one", style="dim")


def _comparison(console, args, results, runs, speedups, predicted) -> None:
    """--compare's table: each algorithm's mean time over the repeats, predicted time and ratios with their spread."""
    from specpar.entrypoints.cli.comparison import print_comparison

    n = len(runs["nonsi"])
    title = f"same prompt, same loaded servers, {n} interleaved run{'s' if n > 1 else ''} each"
    rows = {}
    for algo in [a for a in ("nonsi", "si", "dsi", "auto") if a in results]:
        r = results[algo]
        mean_s = statistics.fmean(x.time_ms for x in runs[algo]) / 1000
        same = all(x.tokens == b.tokens for x, b in zip(runs[algo], runs["nonsi"]))
        rows[algo] = {
            **r.to_dict(),
            **speedups[algo],
            "name": f"auto: {r.auto['label']}" if r.auto else None,
            "time_s": mean_s,
            "predicted_s": predicted[algo] / 1000 if algo in predicted else None,
            "tokens_per_second": len(r.tokens) / mean_s if mean_s > 0 else None,
            "same_tokens_as_nonsi": None if algo == "nonsi" or args.temperature else same,
            **({"acceptance_rate": None, "mean_run_length": None} if algo == "nonsi" else {}),  # nothing drafted
        }
    columns = ("time s", *(("predicted s",) if predicted else ()), "tokens /s", "vs non-SI", "vs SI", "accept rate",
               "run len", "tokens/pass", "same as non-SI")  # fmt: skip
    print_comparison(console, rows, columns, title, real_models.why_line(runs))
