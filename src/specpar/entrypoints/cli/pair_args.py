"""The simulated pair's options (SimulatedPair's flags, built by :mod:`.config_args`; the object is ``args.pair``),
and the measured pair profiles (--profile) that can stand in for its latencies and acceptance rate."""

from __future__ import annotations

from specpar.backends.simulated_pair import SimulatedPair
from specpar.entrypoints.cli.config_args import ConfigOptions

LATENCY_FIELDS = (
    "target_tpot_ms",
    "target_ttft_ms",
    "target_per_token_ms",
    "drafter_latency",
    "drafter_tpot_ms",
    "drafter_ttft_ms",
    "drafter_per_token_ms",
)
LATENCIES = "latencies (ms per forward pass)"


def add_pair_arguments(p, fields=(*LATENCY_FIELDS, "acceptance_rate"), defaults=None, title=LATENCIES):
    """SimulatedPair's flags for ``fields`` (the latencies in a group titled ``title``, the others beside the
    command's own flags); returns the ConfigOptions."""
    options = ConfigOptions(SimulatedPair, "pair", fields=fields, defaults=defaults)
    options.add_to(p, title, [f for f in fields if f in LATENCY_FIELDS])
    options.add_to(p, None, [f for f in fields if f not in LATENCY_FIELDS])
    return options


def add_profile_arguments(p, repeated: bool = False) -> None:
    """--profile (a measured pair, or several when ``repeated``) and --acceptance-estimate."""
    if repeated:
        p.add_argument(
            "--profile",
            action="append",
            default=[],
            metavar="FILE",
            help="a pair profile (target/drafter ttft_ms, tpot_ms, acceptance_rate); may be repeated",
        )
    else:
        p.add_argument(
            "--profile",
            metavar="FILE",
            default=None,
            help="take both latency profiles (TTFT, TPOT, per-token cost) and the acceptance rate from a JSON "
            'profile: the file `specpar profile` writes, or the plain form {"target": {"ttft_ms", "tpot_ms", '
            '"per_token_ms"}, "drafter": {...}, "acceptance_rate": a} (overrides the latency flags and -a)',
        )
    p.add_argument(
        "--acceptance-estimate",
        choices=("geometric", "direct"),
        default="geometric",
        help="for `specpar profile` files: App. F.2's geometric fit (default) or the direct per-token rate",
    )


def pair_from_args(args) -> SimulatedPair:
    """``args.pair``, with the latencies and acceptance rate of ``--profile`` when given (also set as
    ``args.pair``)."""
    pair = args.pair
    if args.profile:
        from specpar.prediction.pair_profile import PairProfile

        profile = PairProfile.load(args.profile, args.acceptance_estimate)  # `specpar profile`'s form or save()'s
        pair = args.pair = pair.with_latencies(profile.target, profile.drafter, profile.acceptance_rate)
        args.acceptance_rate = pair.acceptance_rate
    return pair
