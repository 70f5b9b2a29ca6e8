"""Profiling a model pair (paper App. F.1 and F.2) and the JSON profile that ``specpar simulate --profile`` reads.

TTFT and TPOT (App. F.1): for each prompt, a server with a cold cache generates
``tokens`` tokens greedily, one forward pass each; the first pass (the prefill)
is TTFT, the mean of the others TPOT; both averaged over prompts. We also time
one verification pass over k+1 tokens with the prefix cached, so that
``per_token_ms = (verify - tpot) / k`` (near 0 on a memory-bound GPU, large on a CPU).

Acceptance rate (App. F.2): target and drafter each generate ``accept_tokens``
tokens greedily; n_i is the longest exact-match prefix of the two outputs, and
a = 1 - 1 / (1 + mean n_i) (the geometric fit). Also the direct per-token rate:
the fraction of positions where the drafter's greedy token, given the target's
own prefix, equals the target's token.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from specpar.core.calls import Score
from specpar.core.decoding import GREEDY
from specpar.core.errors import ConfigError
from specpar.core.json_output import dumps
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import is_number
from specpar.core.prefix import common_prefix_len

FORMAT = "specpar-profile/1"


def greedy_timed(server, prompt: Sequence[int], n: int) -> tuple[list[int], list[float]]:
    """``n`` greedy tokens from a cold cache, and the ms of each forward pass (the first is the prefill)."""
    server.reset()
    ctx, out, ms = tuple(prompt), [], []
    for _ in range(n):
        t0 = time.perf_counter()
        token = server.run(Score(ctx, 0, GREEDY)).rows[0]
        ms.append((time.perf_counter() - t0) * 1e3)
        out.append(token)
        ctx += (token,)
    return out, ms


def verify_ms(server, sequence: Sequence[int], k: int) -> float:
    """ms of one verification pass over the last k+1 tokens of ``sequence`` (the rest cached)."""
    server.run(Score(tuple(sequence[:-1]), 0, GREEDY))  # cache everything but the tail
    t0 = time.perf_counter()
    server.run(Score(tuple(sequence), k, GREEDY))
    return (time.perf_counter() - t0) * 1e3


def profile_pair(
    target_server,
    drafter_server,
    prompts: Sequence[Sequence[int]],
    tokens: int = 20,
    accept_tokens: int = 64,
    lookahead: int = 5,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Measure TTFT/TPOT of both servers and the pair's acceptance rate over ``prompts`` (token ids)."""
    if tokens < 2 or accept_tokens < 1 or lookahead < 1:
        raise ConfigError("profile needs --tokens >= 2, --accept-tokens >= 1 and --lookahead >= 1")
    n = max(tokens, accept_tokens)
    timings = {"target": {"ttft": [], "tpot": [], "verify": []}, "drafter": {"ttft": [], "tpot": [], "verify": []}}
    prefixes, direct_hits, direct_total = [], 0, 0
    for ids in prompts:
        outs = {}
        for role, server in (("target", target_server), ("drafter", drafter_server)):
            out, ms = greedy_timed(server, ids, n)
            outs[role] = out
            timings[role]["ttft"].append(ms[0])
            timings[role]["tpot"].extend(ms[1:tokens])
            timings[role]["verify"].append(verify_ms(server, list(ids) + out[: lookahead + 1], lookahead))
            if progress:
                progress(role)
        t_out = outs["target"][:accept_tokens]
        prefixes.append(common_prefix_len(t_out, outs["drafter"][:accept_tokens]))
        drafter_server.reset()
        rows = drafter_server.run(Score(tuple(ids) + tuple(t_out), len(t_out), GREEDY)).rows
        direct_hits += sum(int(r == t) for r, t in zip(rows, t_out))
        direct_total += len(t_out)
    mean_prefix = statistics.fmean(prefixes)

    def latency(role: str) -> dict:
        t = timings[role]
        tpot = statistics.fmean(t["tpot"])
        return {
            "ttft_ms": statistics.fmean(t["ttft"]),
            "tpot_ms": tpot,
            "per_token_ms": max(0.0, (statistics.fmean(t["verify"]) - tpot) / lookahead),
            "verify_ms": statistics.fmean(t["verify"]),
        }

    return {
        "format": FORMAT,
        "prompts": len(prompts),
        "tokens": tokens,
        "accept_tokens": accept_tokens,
        "lookahead": lookahead,
        "target": {"name": target_server.model.name, "device": target_server.device, **latency("target")},
        "drafter": {"name": drafter_server.model.name, "device": drafter_server.device, **latency("drafter")},
        "acceptance_rate": {
            "geometric": 1 - 1 / (1 + mean_prefix),
            "mean_exact_prefix": mean_prefix,
            "exact_prefix_per_prompt": prefixes,
            "direct": direct_hits / direct_total,
        },
    }


def write(profile: dict, path: str | Path) -> None:
    Path(path).write_text(dumps(profile) + "\n", encoding="utf-8")


def parse(
    data, estimate: str = "geometric", where: str = "the profile"
) -> tuple[LatencyProfile, LatencyProfile, float]:
    """(target latency, drafter latency, acceptance rate) from a decoded ``specpar profile`` JSON object.

    estimate: "geometric" (App. F.2's fit, the default) or "direct" (the per-token rate).
    Files are read by :meth:`specpar.prediction.pair_profile.PairProfile.load`, which also takes the plain form.
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
