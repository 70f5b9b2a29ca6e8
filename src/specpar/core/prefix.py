"""Longest-common-prefix bookkeeping shared by every server that keeps a cache."""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.calls import Context


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences of the same type (or two Contexts).

    Slice comparisons run in C. The common case (one extends the other) costs one
    comparison. Speculative decoding diverges near the end (a rejected draft), so a
    divergence is found by galloping back from the end, then bisecting the short
    stretch where it lies: O(log d) comparisons for a divergence d tokens from the end.
    """
    if type(a) is Context and type(b) is Context and a.base is b.base:
        return shared_base_lcp(a, b)
    n = len(a) if len(a) < len(b) else len(b)
    if n == 0 or (a[n - 1] == b[n - 1] and a[:n] == b[:n]):
        return n
    hi, step = n, 8  # invariant: a[:hi] != b[:hi]
    while True:
        lo = max(0, hi - step)
        if a[:lo] == b[:lo]:
            break
        hi, step = lo, step * 2
    while hi - lo > 1:  # invariant: a[:lo] == b[:lo], a[lo:hi] != b[lo:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def shared_base_lcp(a: Context, b: Context) -> int:
    """common_prefix_len of two Contexts of one generation: both hold base[:min(n)] (the verified tokens only
    grow), so only a few drafts are compared. The simulator's replica choice calls this on every submit."""
    if a.n > b.n:
        a, b = b, a
    n, tail = a.n, a.tail
    if not tail:
        return n
    k = len(tail)
    gap = b.n - n  # verified tokens b holds beyond a's
    if gap == 0:
        other = b.tail
    elif k <= gap:
        other = tuple(b.base[n : n + k])
    else:
        other = tuple(b.base[n : b.n]) + b.tail
    m = k if k < len(other) else len(other)
    if tail[:m] == other[:m]:
        return n + m
    i = 0
    while tail[i] == other[i]:
        i += 1
    return n + i
