"""``specpar profile``: TTFT, TPOT and acceptance rate of a real model pair (paper App. F.1, F.2), as a JSON profile."""

from __future__ import annotations

from specpar.core.errors import ConfigError
from specpar.core.json_output import print_json
from specpar.entrypoints.cli import arguments, real_models
from specpar.entrypoints.cli.arguments import add_json, add_prompt_count, command_parser, integer

DESCRIPTION = """\
Profile a target/drafter pair as the DSI paper does. TTFT and TPOT (App. F.1):
each model generates --tokens tokens for each of --prompts prompts from a cold
cache; the first forward pass is TTFT, the others TPOT. Acceptance rate (App.
F.2): both models generate --accept-tokens tokens greedily; the longest
exact-match prefix n_i per prompt gives a = 1 - 1/(1 + mean n_i); the direct
per-token rate (drafter's greedy token given the target's prefix equals the
target's) is reported beside it. Also times one verification pass over k+1
tokens (per_token_ms = its extra cost per token).

Feed the JSON to `specpar simulate --profile FILE` to predict SI and DSI
speedups for this pair at any sp_degree.
"""


def register(sub) -> None:
    p = command_parser(sub, "profile", "TTFT, TPOT and acceptance rate of a real model pair, as a JSON profile",
                       DESCRIPTION)  # fmt: skip
    arguments.add_prompt_args(p, default="humaneval")
    add_prompt_count(p, 5, "prompts, the dataset's first n (paper: 50)")
    p.add_argument("--tokens", type=integer, default=20, help="tokens timed per prompt (paper: 20; default 20)")
    p.add_argument(
        "--accept-tokens",
        type=integer,
        default=64,
        help="tokens per prompt for the acceptance rate (paper: 256; default 64)",
    )
    p.add_argument(
        "-k", "--lookahead", type=integer, default=5, help="drafts in the timed verification pass (default 5)"
    )
    p.add_argument(
        "--out", metavar="FILE.json", default="profile.json", help="where to write the profile (default profile.json)"
    )
    add_json(p, "print the profile as JSON instead of a summary")
    arguments.add_model_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from specpar.backends.cpu_threads import cpu_cores, torch_threads
    from specpar.core.paths import check_output_file
    from specpar.experiments import prompts

    real_models.check_common(args)
    if args.lookahead < 1:
        raise ConfigError(f"--lookahead must be >= 1, got {args.lookahead}")
    args.out = check_output_file(args.out, "--out")  # before an hour of profiling, not after
    chosen = prompts.load(args.dataset, args.prompts)
    target, drafter, servers = real_models.load(args, 1, max_tokens=4096)
    ids = [p.token_ids(target) for p in chosen]
    for x in ids:
        servers.check_length(len(x), max(args.tokens, args.accept_tokens) + args.lookahead + 1)
    t, d = servers.targets.servers[0], servers.drafters.servers[0]
    with torch_threads(cpu_cores()):  # one model runs at a time
        prof = _measure(args, t, d, ids)
    prof.update(dataset=args.dataset, dtype=args.dtype or "float32", torch_threads=cpu_cores())
    return _report(args, prof, ids)


def _measure(args, t, d, ids) -> dict:
    from specpar.entrypoints.cli.progress import TokenProgress
    from specpar.prediction import profiling

    with TokenProgress(2 * len(ids), "profiling", not args.json, unit="steps") as bar:
        return profiling.profile_pair(
            t,
            d,
            ids,
            args.tokens,
            args.accept_tokens,
            args.lookahead,
            progress=lambda role: bar.advance(f"profiling {role}"),
        )


def _report(args, prof, ids) -> int:
    from specpar.core.results import fmt
    from specpar.prediction import profiling

    profiling.write(prof, args.out)
    if args.json:
        print_json(prof)
        return 0
    tl, dl, acc = prof["target"], prof["drafter"], prof["acceptance_rate"]
    print(f"{len(ids)} {args.dataset} prompts, {args.tokens} tokens timed, {args.accept_tokens} for acceptance")
    for role, r in (("target", tl), ("drafter", dl)):
        print(
            f"{role:8s} {r['name']}: TTFT {r['ttft_ms']:.0f} ms, TPOT {r['tpot_ms']:.0f} ms, verification of "
            f"{args.lookahead + 1} tokens {r['verify_ms']:.0f} ms (+{r['per_token_ms']:.0f} ms per extra token)"
        )
    print(f"drafter latency c = {dl['tpot_ms'] / tl['tpot_ms']:.3f} (TPOT ratio)")
    print(
        f"acceptance rate: {fmt(acc['geometric'], '.3f')} (App. F.2: mean exact-match prefix "
        f"{fmt(acc['mean_exact_prefix'], '.1f')} tokens, a = 1 - 1/(1 + mean)); direct per-token rate "
        f"{fmt(acc['direct'], '.3f')}"
    )
    print(f"wrote {args.out}; predict speedups with: specpar simulate --profile {args.out} --sp-degree 2")
    return 0
