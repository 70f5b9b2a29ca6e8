"""Numeric argument checks, one place for every layer: what counts as an integer or a number in a range.

An integer is an ``int``, never a ``bool`` (True is not a count); a number is an ``int`` or a ``float``, never NaN;
``numpy=True`` also takes numpy's integers and floats (arrays' elements). Each caller keeps its own words for the
error (a flag's, a field's), or uses the two phrasings here.
"""

from __future__ import annotations

import math

import numpy as np

from specpar.core.errors import ConfigError


def is_int(value, lo: int | None = None, hi: int | None = None, *, numpy: bool = False) -> bool:
    """Whether ``value`` is an integer in [lo, hi] (None: no bound)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer) if numpy else int):
        return False
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def is_number(value, lo: float = -math.inf, hi: float = math.inf, *, lo_open=False, hi_open=False, numpy=False) -> bool:
    """Whether ``value`` is a number (not NaN) in the interval from ``lo`` to ``hi``, each end closed unless open:
    ``is_number(x, 0, math.inf, hi_open=True)`` is a finite number >= 0."""
    kinds = (int, float, np.integer, np.floating) if numpy else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        return False
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return False
    above = value > lo if lo_open else value >= lo
    below = value < hi if hi_open else value <= hi
    return above and below


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is an integer >= 1, else a ConfigError: "{name} must be a positive integer"."""
    if not is_int(value, 1):
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def int_at_least(name: str, value, lo: int = 1) -> int:
    """``value`` as an int if it is an integer >= ``lo``, else a ConfigError: "{name} must be an integer >= {lo}"."""
    if not is_int(value, lo):
        raise ConfigError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)
