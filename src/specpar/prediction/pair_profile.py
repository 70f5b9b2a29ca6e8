"""The DSI paper's profile of a model pair (App. F.1 and F.2): computed from a machine's measurements, written by
``specpar profile`` (``"format": "specpar-profile/1"``), and read as a :class:`PairProfile` (what the online table and
``specpar simulate --profile`` simulate).

TTFT and TPOT (App. F.1): the prompt's prefill and a one-token pass on a warm cache; beside them one verification
pass over k + 1 tokens, so that ``per_token_ms = (verify - tpot) / k`` (near 0 on a memory-bound GPU, large on a
CPU). Acceptance (App. F.2): with n_i the exact-match prefix of the two models' greedy outputs on prompt i,
a = 1 - 1 / (1 + mean n_i) (the geometric fit); also the direct rate: the share of positions where the drafter's
greedy token, given the target's prefix, is the target's.

Two JSON forms are read: ``specpar profile``'s (:func:`parse`, App. F.2's geometric estimate by default), and a
hand-written one::

    {"target":  {"name": "T", "ttft_ms": 41.0, "tpot_ms": 22.5, "per_token_ms": 0.0},
     "drafter": {"name": "D", "ttft_ms": 15.2, "tpot_ms": 9.1},
     "acceptance_rate": 0.71}

(ttft_ms defaults to tpot_ms, per_token_ms to 0; latency fields may sit under a "latency" object; other keys are
kept as metadata). The default pair's profile is looked for at ``<cache>/profiles/default-pair.json``.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specpar.core.errors import ConfigError
from specpar.core.json_output import parse
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import is_number
from specpar.core.paths import read_text
from specpar.prediction import profile_cache

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


def parse_profile(
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


@dataclass(frozen=True)
class PairProfile:
    target_name: str
    drafter_name: str
    target: LatencyProfile
    drafter: LatencyProfile
    acceptance_rate: float
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not is_number(self.acceptance_rate, 0, 1):
            raise ConfigError(f"acceptance_rate must be in [0, 1], got {self.acceptance_rate!r}")
        if self.target.tpot_ms <= 0:
            raise ConfigError(f"the target's tpot_ms must be > 0, got {self.target.tpot_ms!r}")

    @property
    def label(self) -> str:
        return f"{self.target_name} / {self.drafter_name}" if self.drafter_name else self.target_name

    @property
    def drafter_fraction(self) -> float:
        """Drafter latency c: the drafter's TPOT as a fraction of the target's."""
        return self.drafter.tpot_ms / self.target.tpot_ms

    @classmethod
    def from_dict(cls, d: dict, where: str = "profile") -> PairProfile:
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: expected a JSON object with 'target', 'drafter' and 'acceptance_rate'")

        def model(key):
            m = d.get(key)
            if not isinstance(m, dict):
                raise ConfigError(f"{where}: missing '{key}' object with ttft_ms and tpot_ms")
            lat = m.get("latency", m)
            try:
                tpot = float(lat["tpot_ms"])
                ttft, per_token = float(lat.get("ttft_ms", tpot)), float(lat.get("per_token_ms", 0.0))
            except (KeyError, TypeError, ValueError):
                raise ConfigError(
                    f"{where}: '{key}' needs a number tpot_ms (and optionally ttft_ms, per_token_ms)"
                ) from None
            return str(m.get("name", key)), LatencyProfile(ttft, tpot, per_token)

        a = d.get(
            "acceptance_rate",
            (d.get("acceptance") or {}).get("rate") if isinstance(d.get("acceptance"), dict) else d.get("acceptance"),
        )
        if a is None:
            raise ConfigError(f"{where}: missing 'acceptance_rate'")
        (tn, t), (dn, dr) = model("target"), model("drafter")
        meta = {k: v for k, v in d.items() if k not in ("target", "drafter", "acceptance_rate")}
        try:
            a = float(a)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: acceptance_rate must be a number, got {a!r}") from None
        return cls(tn, dn, t, dr, a, meta)

    def to_dict(self) -> dict:
        def model(name, lat):
            return {"name": name, "ttft_ms": lat.ttft_ms, "tpot_ms": lat.tpot_ms, "per_token_ms": lat.per_token_ms}

        return {
            "target": model(self.target_name, self.target),
            "drafter": model(self.drafter_name, self.drafter),
            "acceptance_rate": self.acceptance_rate,
            **self.meta,
        }

    @classmethod
    def load(cls, path: str | os.PathLike, estimate: str = "geometric") -> PairProfile:
        """Read either JSON form; ``estimate`` picks the acceptance estimate of a ``specpar profile`` file."""
        if not Path(path).exists():
            raise ConfigError(
                f"cannot read profile {str(path)!r}: it does not exist (write one with `specpar profile -o FILE`)"
            )
        where = f"profile {str(path)!r}"
        d = parse(read_text(path, "profile"), where)
        if isinstance(d, dict) and d.get("format") == FORMAT:
            target, drafter, a = parse_profile(d, estimate, where)
            names = [str(d[role].get("name", role)) for role in ("target", "drafter")]
            return cls(*names, target, drafter, a, {k: v for k, v in d.items() if k not in ("target", "drafter")})
        return cls.from_dict(d, where=where)

    def save(self, path: str | os.PathLike) -> None:
        profile_cache.write(path, self.to_dict())


def default_profile_path() -> Path:
    """Where the default model pair's profile measured on this machine is kept (in specpar's cache)."""
    from specpar.backends.weights import cache_dir

    return cache_dir() / "profiles" / "default-pair.json"


def load_default_profile(estimate: str = "geometric") -> PairProfile | None:
    """The default pair's profile if it has been measured here (None if not)."""
    path = default_profile_path()
    return PairProfile.load(path, estimate) if path.is_file() else None
