"""``specpar plan``: DSI's lookahead and server count for a latency profile, predicted by simulation."""

from __future__ import annotations

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.entrypoints.cli import arguments

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
    what = "DSI's fastest valid lookahead for a latency profile (what -k auto picks)"
    p = arguments.command_parser(sub, "plan", what, DESCRIPTION)
    arguments.add_pair_arguments(p, fields=(*arguments.LATENCY_FIELDS, "acceptance_rate", "seed"))
    arguments.add_profile_arguments(p)
    arguments.add_sp_degree(p)
    arguments.add_sampling_arguments(p, ("max_tokens",), {"max_tokens": 100}, {"max_tokens": "tokens to plan for"})
    arguments.add_json(p)
    p.set_defaults(func=run)


def choose_lookaheads(args, target, drafter, a: float, otherwise: str):
    """DSI's and SI's fastest lookaheads (:func:`~specpar.prediction.lookahead_choice.choose_lookahead`) on
    --sp-degree servers and one, for -N tokens; a drafter of zero latency is refused (``otherwise``: what to do)."""
    from specpar.prediction.lookahead_choice import choose_lookahead

    if drafter.tpot_ms <= 0:
        raise ConfigError(f"a drafter with zero latency drafts infinitely fast: {otherwise}")
    dsi = choose_lookahead(target, drafter, a, args.sp_degree, args.max_tokens, seed=args.seed)
    return dsi, choose_lookahead(target, drafter, a, 1, args.max_tokens, seed=args.seed, algorithm="si")


def run(args) -> int:
    pair = arguments.pair_from_args(args)
    (target, drafter), a = pair.latencies(), pair.acceptance_rate
    dsi, si = choose_lookaheads(args, target, drafter, a, "there is no lookahead to plan")
    if args.json:
        print_json({"dsi": dsi.to_dict(), "si": si.to_dict()})
        return 0
    from specpar.entrypoints.cli.comparison import print_table, table_console

    console = table_console(wide=120, highlight=False)
    console.print(
        f"target {target.tpot_ms:g} ms/pass (TTFT {target.ttft_ms:g}, +{target.per_token_ms:g} per extra token), "
        f"drafter {drafter.tpot_ms:g} ms/token, a = {a:g}, SP = {args.sp_degree}, N = {args.max_tokens}"
    )
    best = dsi.predicted_ms[dsi.lookahead]
    shown = sorted(dsi.predicted_ms, key=dsi.predicted_ms.get)[:SHOWN]
    if dsi.smallest_valid is not None:
        shown.append(dsi.smallest_valid)
    rows = []
    for k in sorted(set(shown)):
        ms = dsi.predicted_ms[k]
        mark = "[bold green]chosen[/bold green]" if k == dsi.lookahead else f"{ms / best:.3f}x"
        rows.append([str(k), "yes" if k in dsi.valid else "no", f"{ms:.4g}", mark])
    columns = ("lookahead", "Eq. 1", "predicted ms", "vs chosen")
    print_table(console, columns, rows, f"DSI's candidates ({dsi.method})", left=())
    if len(dsi.predicted_ms) > len(set(shown)):
        console.print(f"({len(dsi.predicted_ms) - len(set(shown))} slower candidates not shown; --json lists all)")
    console.print(f"DSI: lookahead {dsi.lookahead}: {dsi.why}")
    si_ms = si.predicted_ms[si.lookahead]
    console.print(
        f"SI: lookahead {si.lookahead}, {si_ms:.4g} ms predicted; DSI / SI {si_ms / best:.3f}x "
        f"(both predicted on the same draws)"
    )
    return 0
