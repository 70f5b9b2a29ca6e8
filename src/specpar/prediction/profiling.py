"""The DSI paper's profile of a model pair (App. F.1 and F.2), from a machine's measurements: ``specpar profile``'s
JSON file (``"format": "specpar-profile/1"``), which ``specpar simulate --profile`` reads.

TTFT and TPOT (App. F.1): the prompt's prefill and a one-token pass on a warm cache; beside them one verification
pass over k + 1 tokens, so that ``per_token_ms = (verify - tpot) / k`` (near 0 on a memory-bound GPU, large on a
CPU). Acceptance (App. F.2): with n_i the exact-match prefix of the two models' greedy outputs on prompt i,
a = 1 - 1 / (1 + mean n_i) (the geometric fit); also the direct rate: the share of positions where the drafter's
greedy token, given the target's prefix, is the target's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from specpar.core.errors import ConfigError
from specpar.core.json_output import dumps
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import is_number

FORMAT = "specpar-profile/1"


def acceptance_of(prefixes: Sequence[int], hits: int, total: int) -> dict:
    """App. F.2's estimates from each prompt's exact-match prefix of the two greedy outputs (``prefixes``, tokens) and
    the direct rate ``hits / total``."""
    mean_prefix = statistics.fmean(prefixes)
    return {
        "geometric": 1 - 1 / (1 + mean_prefix),
        "mean_exact_prefix": mean_prefix,
        "exact_prefix_per_prompt": list(prefixes),
        "direct": hits / total if total else 0.0,
    }


def latency(ttft_ms: float, tpot_ms: float, verify_ms: float, lookahead: int) -> dict:
    """One model's App. F.1 figures: TTFT, TPOT, a verification of ``lookahead`` drafts (a pass over lookahead + 1
    tokens) and the cost of each token past the first, ``per_token_ms = (verify - tpot) / lookahead`` (>= 0)."""
    return {
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
        "per_token_ms": max(0.0, (verify_ms - tpot_ms) / lookahead),
        "verify_ms": verify_ms,
    }


def profile(target: dict, drafter: dict, rates: dict, prompts: int, tokens: int, lookahead: int) -> dict:
    """The JSON profile: ``target``/``drafter`` as :func:`latency` gives them (with "name" and "device"), ``rates``
    as :func:`acceptance_of`; ``tokens`` greedy tokens per prompt."""
    return {
        "format": FORMAT,
        "prompts": prompts,
        "tokens": tokens,
        "accept_tokens": tokens,
        "lookahead": lookahead,
        "target": target,
        "drafter": drafter,
        "acceptance_rate": rates,
    }


def write(profile: dict, path: str | Path) -> None:
    Path(path).write_text(dumps(profile) + "\n", encoding="utf-8")


def parse(
    data, estimate: str = "geometric", where: str = "the profile"
) -> tuple[LatencyProfile, LatencyProfile, float]:
    """(target latency, drafter latency, acceptance rate) from a decoded ``specpar profile`` JSON object.

    estimate: "geometric" (App. F.2's fit, the default) or "direct" (the per-token rate).
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f'{where} is not a specpar profile (expected "format": "{FORMAT}")')
    if estimate not in ("geometric", "direct"):
        raise ConfigError(f"acceptance estimate must be 'geometric' or 'direct', got {estimate!r}")

    def number(value, name: str) -> float:
        if not is_number(value):
            raise ConfigError(f"{where}: {name} must be a number, got {value!r} (re-run `specpar profile`)")
        return float(value)

    def field(obj, key: str, name: str):
        if not isinstance(obj, dict) or key not in obj:
            raise ConfigError(f"{where} has no {name}: it is incomplete (re-run `specpar profile` to write it)")
        return obj[key]

    def lat(role: str) -> LatencyProfile:
        r = field(data, role, f"'{role}' section")
        per_token = r.get("per_token_ms", 0.0) if isinstance(r, dict) else None
        return LatencyProfile(
            number(field(r, "ttft_ms", f"{role}.ttft_ms"), f"{role}.ttft_ms"),
            number(field(r, "tpot_ms", f"{role}.tpot_ms"), f"{role}.tpot_ms"),
            number(per_token, f"{role}.per_token_ms"),
        )

    rates = field(data, "acceptance_rate", "'acceptance_rate' section")
    return lat("target"), lat("drafter"), number(field(rates, estimate, f"acceptance_rate.{estimate}"), estimate)
