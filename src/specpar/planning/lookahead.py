"""Planning: the lookahead / SP-degree trade-off of DSI (the paper's Eq. 1, App. D).

A chunk of k drafts is ready every ``k * drafter_ms``; each verification occupies
a target server for ``target_ms``. So at most ``ceil(target_ms / (k * drafter_ms))``
verifications overlap, and no verification waits for a server iff

    sp_degree >= target_ms / (lookahead * drafter_ms)          (Eq. 1)

The smallest lookahead that satisfies it is best: it sends drafts to verification
soonest, so rejections are detected earliest. Example (§3.1): a drafter at 5% of
the target's latency with SP = 4 needs lookahead 5.

Where verifying costs more per draft (``per_token_ms``, e.g. on a CPU), a
verification of k drafts takes ``target_ms + per_token_ms * k``; that duration
stands for the target's latency in Eq. 1 (the paper's GPUs batch for free:
per_token_ms = 0).

One server more than Eq. 1 counts is needed when a chunk takes longer to draft
than a target pass (k * drafter_ms > target_ms): DSI's pass on the verified
prefix then finishes before the chunk exists, DSI takes the target's token (as
non-SI would) and starts the next such pass, and that pass must not make the
chunk's verification queue. So :func:`sp_degree_needed` is at least 2 there
(with one server, DSI was 18% slower than SI at c = 0.05, a = 0.94, k = 22).
"""

from __future__ import annotations

import math

from specpar.errors import ConfigError

_EPS = 1e-9


def _check(target_ms: float, drafter_ms: float) -> None:
    if not target_ms > 0 or math.isinf(target_ms):
        raise ConfigError(f"target latency must be a finite number > 0 ms, got {target_ms!r}")
    if not drafter_ms >= 0 or math.isinf(drafter_ms):
        raise ConfigError(f"drafter latency must be a finite number >= 0 ms, got {drafter_ms!r}")


def sp_degree_needed(target_ms: float, drafter_ms: float, lookahead: int, per_token_ms: float = 0.0) -> int:
    """Target servers DSI keeps busy at once with this lookahead: ceil(verify / (k * drafter)) (Eq. 1) with
    verify = target + per_token * k, and at least 2 when a chunk takes longer to draft than a target pass."""
    _check(target_ms, drafter_ms)
    if lookahead < 1:
        raise ConfigError(f"lookahead must be >= 1, got {lookahead!r}")
    if drafter_ms == 0:
        raise ConfigError("a drafter with zero latency drafts infinitely fast: no finite SP degree suffices")
    verify_ms = target_ms + per_token_ms * lookahead
    eq1 = max(1, math.ceil(verify_ms / (lookahead * drafter_ms) - _EPS))
    return max(eq1, 2) if lookahead * drafter_ms > target_ms * (1 + _EPS) else eq1


def min_lookahead(
    target_ms: float, drafter_ms: float, sp_degree: int, max_lookahead: int | None = None, per_token_ms: float = 0.0
) -> int:
    """The smallest lookahead k with sp_degree >= (target_ms + per_token_ms * k) / (k * drafter_ms) (Eq. 1).

    target_ms, drafter_ms: forward latencies per token (tpot), ms; per_token_ms: the target's extra cost
    per additional token verified in one pass.
    With sp_degree = 1 the k found usually drafts a chunk slower than a target pass, where DSI
    wants a second server (see sp_degree_needed).
    Raises ConfigError where no lookahead (<= max_lookahead, if given) satisfies Eq. 1.
    """
    _check(target_ms, drafter_ms)
    if isinstance(sp_degree, bool) or not isinstance(sp_degree, int) or sp_degree < 1:
        raise ConfigError(f"sp_degree must be an integer >= 1, got {sp_degree!r}")
    if drafter_ms == 0:
        raise ConfigError(
            "a drafter with zero latency drafts infinitely fast: no lookahead satisfies Eq. 1 "
            "(give the drafter a latency > 0)"
        )
    if not per_token_ms >= 0:
        raise ConfigError(f"per_token_ms must be >= 0, got {per_token_ms!r}")
    headroom = sp_degree * drafter_ms - per_token_ms  # ms of drafting per draft left after its verification cost
    if headroom <= 0:
        raise ConfigError(
            f"no lookahead satisfies Eq. 1: each extra verified token costs {per_token_ms:g} ms, no less than "
            f"sp_degree x drafter = {sp_degree * drafter_ms:g} ms, so verifications pile up whatever the lookahead; "
            f"raise sp_degree above {per_token_ms / drafter_ms:.2f}"
        )
    k = max(1, math.ceil(target_ms / headroom - _EPS))
    if max_lookahead is not None and k > max_lookahead:
        raise ConfigError(
            f"no lookahead <= {max_lookahead} satisfies Eq. 1 (sp_degree >= target / (lookahead * drafter)) "
            f"with target {target_ms:g} ms, drafter {drafter_ms:g} ms and sp_degree {sp_degree}: "
            f"it needs lookahead {k}, or sp_degree >= "
            f"{sp_degree_needed(target_ms, drafter_ms, max_lookahead, per_token_ms)}"
        )
    return k
