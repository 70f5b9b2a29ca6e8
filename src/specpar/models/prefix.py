"""Longest-common-prefix bookkeeping shared by every server that keeps a cache."""

from __future__ import annotations

from collections.abc import Sequence

from specpar.calls import Context


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences of the same type (or two Contexts).

    Slice comparisons run in C. The common case (one extends the other) costs one
    comparison. Speculative decoding diverges near the end (a rejected draft), so a
    divergence is found by galloping back from the end, then bisecting the short
    stretch where it lies: O(log d) comparisons for a divergence d tokens from the end.
    """
    if type(a) is Context and type(b) is Context and a.base is b.base:
        # both hold base[:m] (the verified tokens only grow): only what follows can differ, a few drafts
        m = a.n if a.n < b.n else b.n
        return m + common_prefix_len(a[m:], b[m:])
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
