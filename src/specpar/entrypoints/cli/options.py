"""Argument types the commands share: argparse turns a bad value into one line naming the flag (see specpar.entrypoints.cli)."""

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


MAX_INTEGER = 2**31 - 1  # what NumPy and C take as a size; larger counts fail inside, not here
MAX_SERVERS = 1024  # --sp-degree: servers are objects made up front (and threads on the threads runtime)


def integer(text: str) -> int:
    """An integer NumPy can size an array with (|x| < 2^31); ranges such as >= 1 are the command's to check."""
    try:
        x = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if abs(x) > MAX_INTEGER:
        raise argparse.ArgumentTypeError(f"must be an integer of at most {MAX_INTEGER}, got {text!r}")
    return x


def server_count(text: str) -> int:
    """A number of servers (--sp-degree): an integer of at most MAX_SERVERS."""
    x = integer(text)
    if x > MAX_SERVERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SERVERS} servers, got {text!r}")
    return x


def integers(text: str) -> list[int]:
    """Integers separated by commas (--levels 0,2,3)."""
    try:
        return [integer(x) for x in text.replace(" ", "").split(",") if x]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be integers separated by commas, got {text!r}") from None
