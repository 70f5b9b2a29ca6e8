"""``specpar generate``: real text from a real model pair, streamed as it is verified, with its statistics."""

from __future__ import annotations

import argparse
import json
import sys

from specpar.commands import real_models
from specpar.errors import ConfigError

DESCRIPTION = """\
Generate text with non-SI, SI or DSI on real transformers models (thread runtime).
The output is exactly the target's: token for token when greedy (the default), in
distribution when sampling. Text is printed as it is verified; then acceptance
statistics and tokens/s. With --compare, the other two algorithms run on the same
loaded servers and a table shows all three side by side.
"""

NAMES = {"nonsi": "non-SI", "si": "SI", "dsi": "DSI"}


def register(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="generate text with real models (non-SI, SI or DSI), streamed",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "prompt", nargs="?", default=None, help="the prompt text; with --dataset, an index or id in it (default 0)"
    )
    real_models.add_prompt_args(p)
    p.add_argument("--chat", action="store_true", help="put the prompt text in the target's chat template")
    p.add_argument("--algo", choices=("nonsi", "si", "dsi"), default="dsi", help="algorithm (default dsi)")
    p.add_argument("-k", "--lookahead", type=int, default=5, help="draft tokens per verification (default 5)")
    p.add_argument(
        "--tree",
        metavar="K1,...,KM",
        default=None,
        help="SI and DSI draft SpecInfer token trees <k1,...,km> (k_i candidates at depth i) instead of k-token "
        "chains, verified in one target pass with a tree attention mask: e.g. --tree 2,2,1",
    )
    p.add_argument(
        "--sp-degree",
        type=int,
        default=2,
        help="target servers DSI may use at once; they share one copy of the weights per device (default 2)",
    )
    p.add_argument("-N", "--max-new-tokens", type=int, default=64, help="tokens to generate (default 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default) greedy; > 0 sampling")
    p.add_argument("--seed", type=int, default=0, help="keys every random draw when sampling")
    p.add_argument("--compare", action="store_true", help="also run the other algorithms and print all side by side")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text and tables")
    real_models.add_model_args(p)
    p.set_defaults(func=run)


def prompt_ids(args, target) -> tuple[str, list[int]]:
    """(what the prompt is, its token ids) from the positional prompt and --dataset / --chat."""
    from specpar import prompts

    if args.dataset:
        chosen = prompts.pick(prompts.load(args.dataset), args.prompt or "0")
        return chosen.id, chosen.token_ids(target)
    if not args.prompt:
        raise ConfigError("give a prompt text, or --dataset SOURCE with an index")
    ids = target.chat_prompt([args.prompt]) if args.chat else target.encode(args.prompt)
    if not ids:
        raise ConfigError("the prompt encodes to no tokens")
    return "prompt", ids


class Streamer:
    """Prints the decoded text of tokens as they arrive (decoding the whole output keeps multi-byte characters whole).

    Stops showing at the model's end-of-text token: generation itself runs on to max_new_tokens,
    as every algorithm is measured on the same number of tokens.
    """

    def __init__(self, model, prompt_ids, out=None):
        # the prompt is decoded with the output so that the text at the joint (a space, say) is not lost
        self.model, self.out, self.tokens = model, out or sys.stdout, list(prompt_ids)
        self.shown = model.decode(self.tokens)
        self.out.write(self.shown)
        self.eos = end_of_text_ids(model)
        self.ended_at: int | None = None  # output tokens before the end-of-text token
        self.seen = 0

    def __call__(self, tokens) -> None:
        if self.ended_at is not None:
            return
        for i, t in enumerate(tokens):
            if t in self.eos:
                self.ended_at = self.seen + i
                tokens = tokens[:i]
                break
        self.seen += len(tokens)
        self.tokens.extend(tokens)
        text = self.model.decode(self.tokens)
        if text.startswith(self.shown) and not text.endswith("\ufffd"):
            self.out.write(text[len(self.shown) :])
            self.out.flush()
            self.shown = text


def end_of_text_ids(model) -> set[int]:
    """The token ids that end a model's text (tokenizer and generation config), if it says."""
    ids = set()
    tok = getattr(model, "tokenizer", None)
    if tok is not None and getattr(tok, "eos_token_id", None) is not None:
        ids.add(tok.eos_token_id)
    gen = getattr(model.module_on(model.device), "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    ids.update(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    return ids


def run(args) -> int:
    real_models.check_common(args)
    if args.tree is not None:
        from specpar.trees import parse_tree

        args.tree = parse_tree(args.tree)
    algorithms = [args.algo] + ([a for a in ("nonsi", "si", "dsi") if a != args.algo] if args.compare else [])
    sp = args.sp_degree if "dsi" in algorithms else 1
    target, drafter, servers = real_models.load(args, sp, max_tokens=4096)
    what, ids = prompt_ids(args, target)
    servers.check_length(len(ids), args.max_new_tokens)
    results = {}
    for i, algo in enumerate(algorithms):
        stream = None
        if i == 0 and not args.json:
            print(
                f"[{NAMES[algo]} on {what}: {len(ids)} prompt tokens, {args.max_new_tokens} new, "
                f"{'greedy' if args.temperature == 0 else f'temperature {args.temperature:g}'}]",
                file=sys.stderr,
            )
            stream = Streamer(target, ids)
        for s in servers.all:
            s.reset()  # every algorithm starts from a cold cache (its TTFT includes the prefill)
        results[algo] = servers.generate(
            ids,
            algo,
            args.max_new_tokens,
            args.lookahead,
            args.temperature,
            args.seed,
            stream,
            tree=args.tree if algo != "nonsi" else None,
        )
        if stream is not None:
            print()
            if stream.ended_at is not None:
                print(
                    f"[end of text after {stream.ended_at} tokens; generation ran on to {args.max_new_tokens} tokens, "
                    "not shown]",
                    file=sys.stderr,
                )
    if args.json:
        print(
            json.dumps(
                {
                    "prompt": what,
                    "prompt_tokens": len(ids),
                    "text": target.decode(results[args.algo].tokens),
                    "results": {a: dict(r.to_dict(), overhead=r.overhead) for a, r in results.items()},
                },
                indent=2,
            )
        )
        return 0
    _report(args, results, target)
    return 0


def _report(args, results, target) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    main = results[args.algo]
    console.print(
        f"{NAMES[args.algo]}: {len(main.tokens)} tokens in {main.time_ms / 1000:.2f} s = {main.tokens_per_second:.2f} tokens/s"
        f" (first token {main.ttft_ms / 1000:.2f} s); "
        + (
            ""
            if args.algo == "nonsi"
            else f"acceptance rate {main.acceptance_rate:.2f}, mean acceptance length "
            f"{main.mean_acceptance_length:.2f}, lookahead {main.lookahead}, "
        )
        + f"time outside forward passes {100 * main.overhead['outside_forward_fraction']:.2f}%"
    )
    if len(results) == 1:
        return
    table = Table(title="same prompt, same loaded servers")
    for col in (
        "algorithm",
        "time s",
        "tokens/s",
        "vs non-SI",
        "vs SI",
        "accept rate",
        "mean accept len",
        "same tokens as non-SI",
    ):
        table.add_column(col, justify="left" if col == "algorithm" else "right")
    base, si = results.get("nonsi"), results.get("si")
    for algo in ("nonsi", "si", "dsi"):
        r = results[algo]
        vs = base.time_ms / r.time_ms
        table.add_row(
            NAMES[algo],
            f"{r.time_ms / 1000:.2f}",
            f"{r.tokens_per_second:.2f}",
            f"[red]{vs:.2f}x[/red]" if vs < 1 else f"{vs:.2f}x",
            f"{si.time_ms / r.time_ms:.2f}x",
            "-" if algo == "nonsi" else f"{r.acceptance_rate:.2f}",
            "-" if algo == "nonsi" else f"{r.mean_acceptance_length:.2f}",
            "-" if algo == "nonsi" or args.temperature else ("yes" if r.tokens == base.tokens else "[red]NO[/red]"),
        )
    console.print(table)
    why = real_models.why_line({a: [r] for a, r in results.items()}, args.lookahead)
    if why:
        console.print(why)
