"""Argument types the commands share: argparse turns a bad value into one line naming the flag (see specpar.cli)."""

from __future__ import annotations

import argparse
import math


def number(text: str) -> float:
    """A finite float: "inf", "nan" and overflowing values such as 1e999 are refused."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return x


def seed(text: str) -> int:
    """A seed: an integer >= 0 (NumPy's generators take no negative seed)."""
    try:
        s = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed must be an integer >= 0, got {text!r}") from None
    if s < 0:
        raise argparse.ArgumentTypeError(f"a seed must be an integer >= 0, got {text!r}")
    return s
