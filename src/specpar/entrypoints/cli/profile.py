"""``specpar profile``: measure a real model pair on this machine into its machine profile (kept in specpar's cache)
and show it, with the DSI paper's App. F profile (TTFT, TPOT, acceptance rate) written to ``--out``."""

from __future__ import annotations

import argparse
import importlib.util
import statistics

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.entrypoints.cli import arguments, real_models

DESCRIPTION = """\
Measure a target/drafter pair on this machine, through the servers' own calls as
the engine runs them, into its machine profile (what `--algorithm auto` and the
predictions work from): each model's prefill of prompts of a few lengths and
v(k), one pass over k = 1..K new tokens on a warm cache, at every thread count
the engine gives passes; how much a pass slows while n servers run at once
(contention); the threads runtime's overhead per call (and a Ray actor call's
with --ray: an engine on Ray whose profile lacks it assumes 1.5 ms, with a
warning); the non-SI loop's own time per token; the drafter's acceptance rate
and the n-gram proposer's rates on --prompts sample prompts (default: the
built-in sample that `--algorithm auto` measures on first need; --dataset:
that source's first ones), -N greedy tokens each. The profile is kept in
specpar's cache, keyed by the models' files, the backend's settings, this
machine and how it was measured: without --dataset and the finer options it is
the entry `--algorithm auto` and the predictions read (refreshed); measured
otherwise it is kept apart, read through --profile FILE.

Also the DSI paper's profile (App. F.1, F.2): TTFT (the sample's prefills),
TPOT (their one-token steps), a verification of -k drafts (per_token_ms: its
extra cost per token) and the acceptance rate (App. F.2: both models decode
greedily; the longest exact-match prefix n_i per prompt gives
a = 1 - 1/(1 + mean n_i); the direct per-token rate beside it). It is written
to -o with the machine profile in it: `specpar simulate --profile FILE`
reads it.
"""


def register(sub) -> None:
    what = "measure a real model pair on this machine (its machine profile and App. F's)"
    p = arguments.command_parser(sub, "profile", what, DESCRIPTION)
    arguments.add_prompt_args(p)
    arguments.add_prompt_count(p, 3, "sample prompts: the built-in sample's (3) or --dataset's first n")
    integer = arguments.integer
    tokens = p.add_argument("-N", "--max-tokens", type=integer, default=48, metavar="N",
                            help="greedy tokens per sample prompt (default 48)")  # fmt: skip
    arguments.add_deprecated(p, tokens, "--tokens", "--accept-tokens")
    p.add_argument("-k", "--lookahead", type=integer, default=5, help="drafts in App. F's verification (default 5)")
    finer = [  # the measurement's finer controls (--help=all)
        p.add_argument("--max-pass", type=integer, default=10, metavar="K", help="longest pass timed, tokens (default 10)"),
        p.add_argument("--repeats", type=integer, default=3, help="timings of each pass length, median (default 3)"),
        p.add_argument("--ray", action=argparse.BooleanOptionalAction, default=False,
                       help="measure a Ray actor call's round trip too (starts Ray; default: not measured)"),
    ]  # fmt: skip
    for action in finer:
        arguments.advanced_flag(action)
    what = "where to write the profile (default profile.json)"
    arguments.add_output(p, what, "FILE.json", "profile.json", old=("--out",))
    arguments.add_json(p, "print the profile as JSON instead of a summary")
    arguments.add_model_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from specpar.algorithms.checks import check_context_window
    from specpar.backends.cpu_threads import cpu_cores
    from specpar.core.paths import check_output_file
    from specpar.entrypoints.cli.progress import TokenProgress
    from specpar.experiments import prompts
    from specpar.prediction.machine import load_or_build
    from specpar.prediction.measure_pair import MeasureOptions
    from specpar.prediction.profile_cache import write

    real_models.check_common(args)
    if args.ray and importlib.util.find_spec("ray") is None:
        raise ConfigError("--ray needs Ray: pip install 'specpar[ray]'")
    overheads = ("threads", "ray") if args.ray else ("threads",)
    options = MeasureOptions(tokens=args.max_tokens, max_pass=args.max_pass, repeats=args.repeats,
                             lookahead=args.lookahead, overheads=overheads)  # fmt: skip
    args.output = check_output_file(args.output, "-o")  # before minutes of measuring, not after
    chosen = prompts.load(args.dataset, args.prompts) if args.dataset is not None else None
    target, drafter = real_models.load_models(args)
    ids = [p.token_ids(target) for p in chosen] if chosen is not None else _sample(target, args.prompts)
    for x in ids:
        check_context_window(len(x), args.max_tokens + 1, target, drafter)
    with TokenProgress(options.steps(len(ids), cpu_cores()), "measuring", not args.json, unit="steps") as bar:
        profile = load_or_build(target=target, drafter=drafter, prompts=ids, options=options,
                                progress=bar.advance, refresh=True)  # fmt: skip
    data = {**profile.meta["app_f"], "dataset": args.dataset or "sample", "dtype": args.dtype or "float32"}
    data["machine"] = profile.to_dict()
    write(args.output, data)
    if args.json:
        print_json(data)
        return 0
    _app_f(args, data, len(ids))
    _machine(profile)
    print(f"wrote {args.output}; predict speedups with: specpar simulate --profile {args.output} --sp-degree 2")
    return 0


def _sample(target, n: int) -> list[list[int]]:
    """The built-in sample's first ``n`` prompts in ``target``'s tokens (what auto measures on first need)."""
    from specpar.prediction.profile_cache import sample_prompts

    ids = sample_prompts(target)
    if n > len(ids):
        raise ConfigError(f"the built-in sample has {len(ids)} prompts: give --dataset for {n}")
    return ids[:n]


def _app_f(args, prof: dict, n: int) -> None:
    """App. F's figures, as `specpar profile` has always printed them."""
    from specpar.core.results import fmt

    tl, dl, acc = prof["target"], prof["drafter"], prof["acceptance_rate"]
    print(f"{n} {args.dataset or 'sample'} prompts, {args.max_tokens} greedy tokens each")
    for role, r in (("target", tl), ("drafter", dl)):
        print(
            f"{role:8s} {r['name']}: TTFT {r['ttft_ms']:.0f} ms, TPOT {r['tpot_ms']:.0f} ms, verification of "
            f"{args.lookahead + 1} tokens {r['verify_ms']:.0f} ms (+{r['per_token_ms']:.0f} ms per extra token)"
        )
    print(f"drafter latency c = {dl['tpot_ms'] / tl['tpot_ms']:.3f} (TPOT ratio)")
    walks = ", ".join(f"k={k} {fmt(a, '.3f')}" for k, a in acc.get("walk", {}).items())
    print(
        f"acceptance rate: {fmt(acc['geometric'], '.3f')} (App. F.2: mean exact-match prefix "
        f"{fmt(acc['mean_exact_prefix'], '.1f')} tokens, a = 1 - 1/(1 + mean)); direct per-token rate "
        f"{fmt(acc['direct'], '.3f')}; greedy SI's per-token rate at lookahead {walks}"
    )


def _machine(profile) -> None:
    """The machine profile's figures: v(k) in one-token passes, prefill per token, contention, overheads."""
    from specpar.prediction.profile_cache import cache_path, cacheable

    meta = profile.meta
    print(f"machine: {profile.key['cpu']}, {profile.cores} cores{', GPU ' + ', '.join(profile.key['gpu']) if profile.key['gpu'] else ''}")  # fmt: skip
    for role, costs in (("target", profile.target), ("drafter", profile.drafter)):
        for threads, v in costs.pass_ms.items():
            ratios = " ".join(f"{x / v[0]:.2f}" for x in v)
            per_token = statistics.fmean(ms / n for n, ms in costs.prefill_points(threads))
            print(f"{role:8s} {threads} thread(s): v(1) {v[0]:.1f} ms; v(k)/v(1), k = 1..{len(v)}: {ratios}; "
                  f"prefill {per_token:.1f} ms/token")  # fmt: skip
    print(
        f"contention (a pass's time with 1, 2, ... servers busy): {' '.join(f'{f:.2f}' for f in profile.contention)}; "
        f"overhead per call: {', '.join(f'{r} {ms:.3f} ms' for r, ms in profile.overhead_ms.items() if r in meta['overheads_measured'])}; "
        f"non-SI's own time per token {profile.per_token_ms:.3f} ms"
    )  # fmt: skip
    print(f"n-gram proposer: match rate {profile.ngram['match_rate']:.3f}, acceptance rate {profile.ngram['acceptance_rate']:.3f}")  # fmt: skip
    where = f"kept in {cache_path(profile.key)}" if cacheable(profile.key) else "not kept (a model held in memory)"
    print(f"measured in {meta['seconds']:.0f} s at load average {meta['load_average'][0][0]:.1f}; {where}")
