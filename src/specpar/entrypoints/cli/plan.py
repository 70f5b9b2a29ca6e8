"""``specpar plan``: DSI's lookahead and server count for a latency profile, predicted by simulation."""

from __future__ import annotations

import argparse
import sys

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.entrypoints.cli.options import integer, seed, server_count
from specpar.entrypoints.cli.simulate import add_pair_arguments, pair_from_args

SHOWN = 10  # the fastest candidates shown in the table

DESCRIPTION = """\
Choose DSI's lookahead for a target/drafter pair: every lookahead that satisfies
the paper's Eq. 1 on --sp-degree target servers (where a pass costs more per token
fed: with catch-up counted and one server kept for the cursor, as DSI then keeps
one) is simulated, and the fastest is chosen; SI's fastest lookahead is shown
beside it.
Uniform latencies use the vectorized fast path; other profiles (TTFT != TPOT, a
per-token cost) the event-driven simulator. This is what `simulate -k auto` uses.
"""


def register(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="DSI's fastest valid lookahead for a latency profile (what -k auto picks)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pair_arguments(p)
    p.add_argument(
        "--sp-degree", type=server_count, default=7, metavar="SP", help="target servers DSI may use (default 7)"
    )
    p.add_argument(
        "-N", "--max-new-tokens", type=integer, default=100, metavar="N", help="tokens to plan for (default 100)"
    )
    p.add_argument("--seed", type=seed, default=0, help="seed of the simulated runs")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    from specpar.experiments.lookahead_choice import choose_lookahead

    for name in ("sp_degree", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    target, drafter, a = pair_from_args(args)
    if drafter.tpot_ms <= 0:
        raise ConfigError("a drafter with zero latency drafts infinitely fast: there is no lookahead to plan")
    dsi = choose_lookahead(target, drafter, a, args.sp_degree, args.max_new_tokens, seed=args.seed)
    si = choose_lookahead(target, drafter, a, 1, args.max_new_tokens, seed=args.seed, algorithm="si")
    if args.json:
        print_json({"dsi": dsi.to_dict(), "si": si.to_dict()})
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120, highlight=False)
    console.print(
        f"target {target.tpot_ms:g} ms/pass (TTFT {target.ttft_ms:g}, +{target.per_token_ms:g} per extra token), "
        f"drafter {drafter.tpot_ms:g} ms/token, a = {a:g}, SP = {args.sp_degree}, N = {args.max_new_tokens}"
    )
    table = Table(title=f"DSI's candidates ({dsi.method})")
    for col in ("lookahead", "Eq. 1", "predicted ms", "vs chosen"):
        table.add_column(col, justify="right")
    best = dsi.predicted_ms[dsi.lookahead]
    shown = sorted(dsi.predicted_ms, key=dsi.predicted_ms.get)[:SHOWN]
    if dsi.smallest_valid is not None:
        shown.append(dsi.smallest_valid)
    for k in sorted(set(shown)):
        ms = dsi.predicted_ms[k]
        mark = "[bold green]chosen[/bold green]" if k == dsi.lookahead else f"{ms / best:.3f}x"
        table.add_row(str(k), "yes" if k in dsi.valid else "no", f"{ms:.4g}", mark)
    console.print(table)
    if len(dsi.predicted_ms) > len(set(shown)):
        console.print(f"({len(dsi.predicted_ms) - len(set(shown))} slower candidates not shown; --json lists all)")
    console.print(f"DSI: lookahead {dsi.lookahead}: {dsi.why}")
    si_ms = si.predicted_ms[si.lookahead]
    console.print(
        f"SI: lookahead {si.lookahead}, {si_ms:.4g} ms predicted; DSI / SI {si_ms / best:.3f}x "
        f"(both predicted on the same draws)"
    )
    return 0
