"""The one experiment loop under every command that compares algorithms, and the one speedup definition.

Arms are interleaved over repeats (nonsi, si, dsi, nonsi, si, dsi, ...), so a slow drift of a shared machine falls on
every arm alike. Speedup over a baseline = mean(baseline) / mean(arm) over the same repeats; its spread: the paired
per-repeat ratios, *inconclusive* when they straddle 1 (one repeat has no spread and is not judged).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def run_arms(
    arms: Sequence[str],
    repeats: int,
    run: Callable[[str, Any], T],
    *,
    setup: Callable[[int], Any] | None = None,
    on_result: Callable[[str, int, T], None] | None = None,
) -> dict[str, list[T]]:
    """Run every arm once per repeat, arms interleaved: ``{arm: [result of repeat 0, 1, ...]}``.

    run(arm, x): one run, where x = setup(r) (built once per repeat r, e.g. its models and prompt) or r itself.
    on_result(arm, r, result): after each run (progress, a JSON line).
    """
    runs: dict[str, list[T]] = {a: [] for a in arms}
    for r in range(repeats):
        x = setup(r) if setup is not None else r
        for arm in arms:
            result = run(arm, x)
            runs[arm].append(result)
            if on_result is not None:
                on_result(arm, r, result)
    return runs


@dataclass(frozen=True)
class Speedup:
    """How much faster an arm is than a baseline, over paired repeats.

    value: mean(baseline ms) / mean(arm ms), nan when the arm took no time; ratios: baseline_r / arm_r per repeat.
    """

    value: float
    ratios: tuple[float, ...]

    @property
    def std(self) -> float:
        return statistics.stdev(self.ratios) if len(self.ratios) > 1 else 0.0

    @property
    def inconclusive(self) -> bool | None:
        """True when the per-repeat ratios straddle 1; None with fewer than two repeats (no spread to judge)."""
        if len(self.ratios) < 2:
            return None
        return min(self.ratios) < 1 < max(self.ratios)

    def to_dict(self) -> dict:
        finite = [x for x in self.ratios if math.isfinite(x)]
        return {
            "value": self.value if math.isfinite(self.value) else None,
            "ratio_mean": statistics.fmean(finite) if finite else None,
            "ratio_std": self.std if finite else None,
            "ratio_min": min(finite, default=None),
            "ratio_max": max(finite, default=None),
            "repeats": len(self.ratios),
            "inconclusive": self.inconclusive,
        }


def speedup(baseline_ms: Sequence[float], arm_ms: Sequence[float]) -> Speedup:
    """The speedup of the arm over the baseline: paired latencies (ms), repeat r of each at index r."""
    if len(baseline_ms) != len(arm_ms) or not arm_ms:
        raise ValueError(f"paired latencies needed, got {len(baseline_ms)} and {len(arm_ms)}")
    mean_arm = statistics.fmean(arm_ms)
    value = statistics.fmean(baseline_ms) / mean_arm if mean_arm > 0 else math.nan
    return Speedup(value, tuple(b / a if a > 0 else math.nan for b, a in zip(baseline_ms, arm_ms)))


def inconclusive_line(name: str, baseline: str, spread: dict) -> str | None:
    """The on-screen sentence for an inconclusive ratio (``spread``: :meth:`Speedup.to_dict`), else None."""
    if not spread.get("inconclusive"):
        return None
    return (
        f"{name} vs {baseline}: {spread['value']:.2f}x is inconclusive: its {spread['repeats']} paired repeats "
        f"range from {spread['ratio_min']:.2f}x to {spread['ratio_max']:.2f}x, on both sides of 1"
    )


def load_warning() -> str | None:
    """One line when the 1-minute load average exceeds the machine's cores (wall times then include waiting)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None
    cores = os.cpu_count() or 1
    if load <= cores:
        return None
    return (
        f"load average {load:.1f} exceeds this machine's {cores} cores: other work shares the CPUs, "
        "so wall times and their ratios may not hold on a quiet machine"
    )
