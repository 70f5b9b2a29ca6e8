"""``specpar simulate``: non-SI vs SI vs DSI with simulated models, on the virtual clock or on threads."""

from __future__ import annotations

import argparse
import random
import sys
import warnings

from specpar.backends import LatencyProfile, SimulatedModel
from specpar.core.decoding import check_temperature
from specpar.core.errors import ConfigError, SpecparWarning
from specpar.core.latency import MAX_LATENCY_MS
from specpar.core.results import METRICS_FOOTNOTE, fmt
from specpar.core.trees import BestFirst, shape_text
from specpar.entrypoints.cli.options import integer, number, seed, server_count
from specpar.entrypoints.cli.runtime_args import CLOCKS, add_runtime_arguments, runtime_options
from specpar.planning.lookahead import sp_degree_needed, verification_servers

MAX_SIMULATED = 1_000_000  # the largest simulated vocabulary and prompt: larger ones take hours before a token

DESCRIPTION = """\
Simulate lossless speculative inference with a simulated target and drafter.
Each forward pass takes the time its latency profile says: TTFT for the first
pass over the prompt (prefill), TPOT for each later pass. On the virtual clock
nothing sleeps (the paper's offline simulation); on threads the servers sleep
for their latency in real time (the paper's online simulation).
Acceptance is iid with rate a, as in the paper's analysis, or drifts between
regimes (--acceptance-regimes).
"""


def register(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="non-SI vs SI vs DSI with simulated models",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pair_arguments(p)
    p.add_argument(
        "-k",
        "--lookahead",
        default="auto",
        metavar="K",
        help="draft tokens per verification task (vLLM num_speculative_tokens, HF num_assistant_tokens). "
        "'auto' (default): each algorithm's fastest, predicted by simulation; DSI's among the lookaheads "
        "satisfying the paper's Eq. 1 for --sp-degree (`specpar plan` shows the candidates)",
    )
    p.add_argument(
        "--sp-degree",
        type=server_count,
        default=7,
        metavar="SP",
        help="speculation parallelism degree: target servers DSI may use at once (default 7: "
        "an 8-GPU node with the drafter on the eighth, as in the paper)",
    )
    p.add_argument(
        "-N", "--max-new-tokens", type=integer, default=100, metavar="N", help="tokens to generate (default 100)"
    )
    add_runtime_arguments(p, link=True)
    p.add_argument(
        "--temperature",
        type=number,
        default=0.0,
        help="0 for greedy (exact-match verification), > 0 for sampling (rejection sampling)",
    )
    p.add_argument(
        "--coupling",
        choices=("rejection", "gumbel"),
        default="rejection",
        help="sampling: rejection (the papers' rejection sampling) or gumbel (drafter-invariant: every algorithm "
        "gives non-SI's tokens for a seed, on every runtime; lower acceptance)",
    )
    p.add_argument("--seed", type=seed, default=0, help="repeat r uses models, prompt and draws from seed + r")
    p.add_argument("--repeats", type=integer, default=5, help="runs per algorithm, interleaved (default 5)")
    p.add_argument("--vocab-size", type=integer, default=8, help="vocabulary of the simulated models (default 8)")
    p.add_argument("--prompt-length", type=integer, default=8, help="prompt tokens (default 8)")
    p.add_argument(
        "--tree",
        metavar="K1,...,KM|best:B",
        default=None,
        help="also run SI and DSI over SpecInfer token trees <k1,...,km> (k_i candidates at depth i, one target "
        "pass per tree), beside the chains: e.g. --tree 2,2,1; or best:B (B nodes grown best-first by the "
        "drafter's path probability)",
    )
    p.add_argument(
        "--acceptance-regimes",
        metavar="A1,A2,...:T",
        default=None,
        help="a drifting acceptance rate instead of -a: the drafter agrees at rate A1 for T tokens, then A2, ..., "
        "cycling (positions counted from the prompt's start), e.g. 0.9,0.4:50; -k auto and the closed forms use "
        "their mean",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument(
        "--timeline",
        metavar="PNG",
        default=None,
        help="also draw the first repeat of each algorithm as a Gantt chart of its tasks per server "
        "(drafts, verifications, cancelled work) to this PNG file",
    )
    p.add_argument(
        "--algo",
        choices=("compare", "hsd"),
        default="compare",
        help="compare: non-SI vs SI vs DSI (default); hsd: hierarchical speculative decoding on a "
        "simulated stack, the optimizer's plan vs the best single drafter vs the target alone",
    )
    from specpar.entrypoints.cli import simulate_hsd

    simulate_hsd.add_arguments(p)
    p.set_defaults(func=run)


def add_pair_arguments(p) -> None:
    """The simulated pair's latencies and acceptance rate (simulate, plan)."""
    lat = p.add_argument_group("latencies (ms per forward pass)")
    lat.add_argument(
        "--target-tpot",
        type=number,
        default=30.0,
        metavar="MS",
        help="target's time per output token: one forward pass with the prefix cached (default 30)",
    )
    lat.add_argument(
        "--target-ttft",
        type=number,
        default=None,
        metavar="MS",
        help="target's time to first token: the prefill pass (default: same as --target-tpot)",
    )
    lat.add_argument(
        "--target-per-token",
        type=number,
        default=0.0,
        metavar="MS",
        help="target's extra time per additional token in one pass (verifying k drafts, or catching up on unseen "
        "tokens): 0 models a memory-bound GPU (default), CPUs cost a good fraction of a TPOT",
    )
    lat.add_argument(
        "-c",
        "--drafter-latency",
        type=number,
        default=0.1,
        metavar="C",
        help="drafter latency as a fraction c of the target's, for both TTFT and TPOT (default 0.1)",
    )
    lat.add_argument(
        "--drafter-tpot",
        type=number,
        default=None,
        metavar="MS",
        help="drafter's time per output token in ms (overrides -c)",
    )
    lat.add_argument(
        "--drafter-ttft",
        type=number,
        default=None,
        metavar="MS",
        help="drafter's time to first token in ms (default: same as --drafter-tpot)",
    )
    p.add_argument(
        "-a",
        "--acceptance-rate",
        type=number,
        default=0.8,
        metavar="A",
        help="probability that a draft token is accepted, iid per position (default 0.8)",
    )
    p.add_argument(
        "--profile",
        metavar="FILE",
        default=None,
        help="take both latency profiles (TTFT, TPOT, per-token cost) and the acceptance rate from a "
        'JSON profile: the file `specpar profile` writes, or the plain form {"target": {"ttft_ms", '
        '"tpot_ms", "per_token_ms"}, "drafter": {...}, "acceptance_rate": a} (overrides the '
        "latency flags and -a)",
    )
    p.add_argument(
        "--acceptance-estimate",
        choices=("geometric", "direct"),
        default="geometric",
        help="with --profile: the paper's geometric fit (default) or the direct per-token rate",
    )


def _profiles(args) -> tuple[LatencyProfile, LatencyProfile]:
    for flag in ("target_tpot", "target_ttft", "target_per_token", "drafter_tpot", "drafter_ttft"):
        value = getattr(args, flag)
        if value is not None and not 0 <= value <= MAX_LATENCY_MS:
            raise ConfigError(
                f"--{flag.replace('_', '-')} must be a latency in [0, {MAX_LATENCY_MS:g}] ms, got {value}"
            )
    target = LatencyProfile(
        args.target_ttft if args.target_ttft is not None else args.target_tpot, args.target_tpot, args.target_per_token
    )
    if args.drafter_tpot is not None:
        ttft = args.drafter_ttft if args.drafter_ttft is not None else args.drafter_tpot
        drafter = LatencyProfile(ttft, args.drafter_tpot)
    else:
        c = args.drafter_latency
        if not 0 <= c * max(target.ttft_ms, target.tpot_ms) <= MAX_LATENCY_MS:
            raise ConfigError(
                f"drafter latency fraction c must be >= 0 and give a drafter latency <= {MAX_LATENCY_MS:g} ms, got {c!r}"
            )
        drafter = target.scaled(c)
    return target, drafter


def pair_from_args(args) -> tuple[LatencyProfile, LatencyProfile, float]:
    """(target latency, drafter latency, acceptance rate) from the flags of add_pair_arguments, or --profile."""
    target_lat, drafter_lat = _profiles(args)
    if args.profile:
        from specpar.experiments.pair_profile import PairProfile

        pair = PairProfile.load(args.profile, args.acceptance_estimate)  # either form: `specpar profile`'s or save()'s
        target_lat, drafter_lat, args.acceptance_rate = pair.target, pair.drafter, pair.acceptance_rate
    a = args.acceptance_rate
    if not 0.0 <= a <= 1.0:
        raise ConfigError(f"acceptance rate a must be in [0, 1], got {a!r}")
    return target_lat, drafter_lat, a


def parse_lookahead(text) -> int | str:
    """-k/--lookahead: "auto" or an integer >= 1 (a ConfigError otherwise)."""
    if text == "auto":
        return text
    try:
        k = int(text)
    except (TypeError, ValueError):
        k = 0
    if k < 1:
        raise ConfigError(f"--lookahead must be 'auto' or an integer >= 1, got {text!r}")
    return k


def _lookaheads(args, target_lat, drafter_lat, a) -> tuple[dict[str, int], str]:
    """Each algorithm's lookahead ({"si": k, "dsi": k}) and a line saying how it was chosen."""
    k = parse_lookahead(args.lookahead)
    if k != "auto":
        t, d, pt = target_lat.tpot_ms, drafter_lat.tpot_ms, target_lat.per_token_ms
        if d > 0 and verification_servers(t, d, k, pt) is None:
            why = "given; no SP degree satisfies Eq. 1 with this per-token cost"
        else:
            need = sp_degree_needed(t, d, k, pt) if d > 0 else 0
            why = "given" + (f"; Eq. 1 needs SP >= {need}" if need > args.sp_degree else "")
        return {"si": k, "dsi": k}, why
    from specpar.experiments.lookahead_choice import choose_lookahead

    if drafter_lat.tpot_ms <= 0:
        raise ConfigError("a drafter with zero latency drafts infinitely fast: -k auto has nothing to weigh; give -k K")
    n = args.max_new_tokens
    dsi = choose_lookahead(target_lat, drafter_lat, a, args.sp_degree, n, seed=args.seed)
    si = choose_lookahead(target_lat, drafter_lat, a, 1, n, seed=args.seed, algorithm="si")
    si_why = si.why.removeprefix("SI's ")
    return {"si": si.lookahead, "dsi": dsi.lookahead}, f"auto: DSI {dsi.why}; SI {si_why}"


def run(args) -> int:
    check_temperature(args.temperature)
    for name in ("max_new_tokens", "repeats", "sp_degree", "prompt_length"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("prompt_length", "vocab_size"):  # simulated models score every token of the vocabulary in Python
        if getattr(args, name) > MAX_SIMULATED:
            raise ConfigError(
                f"--{name.replace('_', '-')} must be at most {MAX_SIMULATED:,}, got {getattr(args, name)}"
            )
    if args.algo == "hsd":
        from specpar.entrypoints.cli import simulate_hsd

        return simulate_hsd.run(args)
    from specpar.core.json_output import print_json
    from specpar.experiments.comparison import compare
    from specpar.planning import analytic

    if args.timeline:
        from specpar.core.paths import check_output_file, image_suffixes

        args.timeline = check_output_file(args.timeline, "--timeline", image_suffixes())
    target_lat, drafter_lat, a = pair_from_args(args)
    regimes = None
    if args.acceptance_regimes is not None:
        from specpar.backends import Regimes

        regimes = Regimes.parse(args.acceptance_regimes)
        a = args.acceptance_rate = regimes.mean
    c = drafter_lat.tpot_ms / target_lat.tpot_ms if target_lat.tpot_ms > 0 else None  # undefined: printed "-"
    from specpar.entrypoints.cli.progress import status

    with status("choosing each algorithm's lookahead (-k auto)", args.lookahead == "auto" and not args.json):
        k, why = _lookaheads(args, target_lat, drafter_lat, a)
    if args.tree is not None:
        from specpar.core.trees import parse_tree

        args.tree = parse_tree(args.tree)

    def make_models(seed):
        target = SimulatedModel(args.vocab_size, seed=seed, latency=target_lat)
        return target, target.drafter(regimes or a, drafter_lat, seed=seed + 7919)

    def make_prompt(seed):
        rng = random.Random(seed)
        return [rng.randrange(args.vocab_size) for _ in range(args.prompt_length)]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpecparWarning)
        summary = _run_with_progress(compare, args, make_models, make_prompt, k)
    messages = sorted({str(w.message) for w in caught if issubclass(w.category, SpecparWarning)})

    closed = {}
    if (
        target_lat.ttft_ms == target_lat.tpot_ms
        and drafter_lat.ttft_ms == drafter_lat.tpot_ms
        and target_lat.per_token_ms == 0
    ):
        n, t, d = args.max_new_tokens, target_lat.tpot_ms, drafter_lat.tpot_ms
        closed = {
            "nonsi_ms": analytic.nonsi_latency(t, n),
            "si_expected_ms": analytic.si_expected_latency(t, d, a, k["si"], n),
            "dsi_prop1_bound_ms_lookahead1": analytic.dsi_latency_bound(t, d, a, n),
        }

    if args.timeline:
        from specpar.experiments.timeline_plot import plot_timelines

        plot_timelines(
            [s.first_run for s in summary.values()],
            args.timeline,
            title=f"c = {fmt(c, '.3g')}, a = {a:g}, N = {args.max_new_tokens}, seed {args.seed}",
        )
    if args.json:
        print_json(
            {
                "config": {
                    "target": {
                        "ttft_ms": target_lat.ttft_ms,
                        "tpot_ms": target_lat.tpot_ms,
                        "per_token_ms": target_lat.per_token_ms,
                    },
                    "drafter": {
                        "ttft_ms": drafter_lat.ttft_ms,
                        "tpot_ms": drafter_lat.tpot_ms,
                        "per_token_ms": drafter_lat.per_token_ms,
                    },
                    "drafter_latency_fraction": c,
                    "acceptance_rate": a,
                    "acceptance_regimes": args.acceptance_regimes,
                    "lookahead": k,
                    "lookahead_choice": why,
                    "sp_degree": args.sp_degree,
                    "max_new_tokens": args.max_new_tokens,
                    "runtime": args.runtime,
                    "link_ms": args.link_ms,
                    "temperature": args.temperature,
                    "seed": args.seed,
                    "repeats": args.repeats,
                    "tree": str(args.tree) if isinstance(args.tree, BestFirst) else args.tree,
                },
                "results": {name: s.to_dict() for name, s in summary.items()},
                "closed_forms": closed,
                "warnings": messages,
            },
        )
        return 0
    _print_table(args, summary, target_lat, drafter_lat, c, k, why, closed, messages)
    if args.timeline:
        print(f"timeline of the first repeat written to {args.timeline}")
    return 0


def _run_with_progress(compare, args, make_models, make_prompt, k):
    kwargs = dict(
        max_new_tokens=args.max_new_tokens,
        lookahead=k,
        sp_degree=args.sp_degree,
        repeats=args.repeats,
        seed=args.seed,
        temperature=args.temperature,
        coupling=args.coupling,
        runtime=args.runtime,
        runtime_options=runtime_options(args),
        tree=args.tree,
    )
    from specpar.entrypoints.cli.progress import TokenProgress

    runs = (3 if args.tree is None else 5) * args.repeats
    with TokenProgress(runs * args.max_new_tokens, f"simulating {runs} runs", not args.json) as bar:
        done = iter(range(1, runs + 1))
        progress = lambda algo: bar.describe(f"simulated {next(done)} of {runs} runs")  # noqa: E731
        return compare(make_models, make_prompt, progress=progress, stream=bar.callback, **kwargs)


def _print_table(args, summary, target_lat, drafter_lat, c, k, why, closed, messages) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 130)
    clock = CLOCKS[args.runtime] + (f", {args.link_ms:g} ms links" if args.link_ms else "")
    mode = "greedy" if args.temperature == 0 else f"sampling at temperature {args.temperature:g}"
    console.print(
        f"target {target_lat.tpot_ms:g} ms/token (TTFT {target_lat.ttft_ms:g} ms), "
        f"drafter {drafter_lat.tpot_ms:g} ms/token (c = {fmt(c, '.3g')}), a = {args.acceptance_rate:g}"
        + (f" (regimes {args.acceptance_regimes})" if args.acceptance_regimes else "")
        + ", "
        f"N = {args.max_new_tokens}, {args.repeats} repeats, {clock}, {mode}"
    )
    ks = f"k = {k['dsi']}" if k["si"] == k["dsi"] else f"SI k = {k['si']}, DSI k = {k['dsi']}"
    console.print(f"lookahead {ks} ({why})")
    table = Table()
    for col in (
        "algorithm",
        "k",
        "SP",
        "latency ms",
        "vs non-SI",
        "vs SI",
        "accept rate",
        "mean accept len",
        "run len",
        "target fwd",
        "drafter fwd",
        "same tokens",
    ):
        table.add_column(col, justify="right" if col != "algorithm" else "left")
    tree = "<" + shape_text(args.tree) + ">" if args.tree else ""
    names = {"nonsi": "non-SI", "si": "SI", "dsi": "DSI", "si-tree": f"SI {tree}", "dsi-tree": f"DSI {tree}"}
    for name, s in summary.items():
        speed = fmt(s.speedup_vs_nonsi, ".2f", "x")
        table.add_row(
            names[name],
            str(s.lookahead or "-"),
            str(s.sp_degree),
            f"{s.mean_ms:.1f}±{s.std_ms:.1f}",
            f"[red]{speed}[/red]" if s.speedup_vs_nonsi < 1 - 1e-9 else speed,
            fmt(s.speedup_vs_si, ".2f", "x"),
            fmt(s.acceptance_rate),
            fmt(s.mean_acceptance_length),
            fmt(s.mean_run_length),
            f"{s.target_forwards:.1f}",
            f"{s.drafter_forwards:.1f}",
            "-" if s.same_tokens_as_nonsi is None else ("yes" if s.same_tokens_as_nonsi else "[red]NO[/red]"),
        )
    console.print(table)
    console.print(METRICS_FOOTNOTE, style="dim")
    if closed:
        console.print(
            f"closed forms (iid acceptance): non-SI {closed['nonsi_ms']:.1f} ms; "
            f"SI expected {closed['si_expected_ms']:.1f} ms; "
            f"DSI bound of Proposition 1 (lookahead 1, enough servers) {closed['dsi_prop1_bound_ms_lookahead1']:.1f} ms"
        )
    for m in messages:
        console.print(f"[yellow]warning:[/yellow] {m}")
