"""Planning: the lookahead / SP-degree trade-off of DSI (the paper's Eq. 1, App. D), with the costs it leaves out.

The paper's Eq. 1: a chunk of k drafts is ready every ``k * drafter_ms``, each
verification occupies a target server for ``target_ms``, so no verification waits
for a server iff

    sp_degree >= target_ms / (lookahead * drafter_ms)          (Eq. 1, :func:`eq1_servers`)

Example (§3.1): a drafter at 5% of the target's latency with SP = 4 needs lookahead 5.

specpar counts two costs Eq. 1 leaves out (:func:`sp_degree_needed`):

* **the pass on the cursor.** At the start and after every rejection one target pass
  runs on the verified prefix while the next chunks are drafted and verified beside
  it (this is what makes DSI never slower than non-SI), so DSI keeps one server more
  than its verifications need. (Without it, c = 0.01, a = 1, k = 15 on Eq. 1's 7
  servers made the short last chunk queue behind that pass: 2.00 target passes of
  time where 8 servers give 1.99.)
* **catch-up.** Where each extra token in a pass costs ``per_token_ms`` (CPUs), V
  servers verifying chunks in turn each read the V * k tokens drafted since their
  last turn, so a verification costs ``target_ms + per_token_ms * (V k - 1)``. V keep
  up with the drafter iff ``V k drafter_ms >= target_ms + per_token_ms (V k - 1)``,
  i.e. ``V >= (target_ms - per_token_ms) / (k (drafter_ms - per_token_ms))``.
  With ``per_token_ms = 0`` this is Eq. 1. Where ``per_token_ms >= drafter_ms`` no
  number of servers keeps up (every server must read every token, more slowly than
  the drafter writes them): verifications queue whatever the lookahead
  (:func:`verification_servers` returns None). DSI stays lossless and, keeping a
  server for the cursor, never slower than non-SI; only its speedup suffers.

With one target server there is no server to keep: it verifies and takes the passes
on the cursor in turn, and the lookahead satisfying Eq. 1 for it alone is used.
"""

from __future__ import annotations

import math

from specpar.core.errors import ConfigError

_EPS = 1e-9


def _check(target_ms: float, drafter_ms: float, per_token_ms: float = 0.0) -> None:
    if not target_ms > 0 or math.isinf(target_ms):
        raise ConfigError(f"target latency must be a finite number > 0 ms, got {target_ms!r}")
    if not drafter_ms >= 0 or math.isinf(drafter_ms):
        raise ConfigError(f"drafter latency must be a finite number >= 0 ms, got {drafter_ms!r}")
    if not per_token_ms >= 0 or math.isinf(per_token_ms):
        raise ConfigError(f"per_token_ms must be a finite number >= 0 ms, got {per_token_ms!r}")
    if drafter_ms == 0 or math.isinf(target_ms / drafter_ms):  # so small a latency that the ratio overflows
        raise ConfigError(
            f"a drafter with {'zero latency' if drafter_ms == 0 else f'a latency of {drafter_ms!r} ms'} drafts "
            "infinitely fast: no finite SP degree or lookahead satisfies Eq. 1 (give the drafter a latency > 0)"
        )


def _check_lookahead(lookahead) -> None:
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 1:
        raise ConfigError(f"lookahead must be an integer >= 1, got {lookahead!r}")


def eq1_servers(target_ms: float, drafter_ms: float, lookahead: int) -> int:
    """The paper's Eq. 1 as written: ceil(target_ms / (lookahead * drafter_ms)), at least 1."""
    _check(target_ms, drafter_ms)
    _check_lookahead(lookahead)
    return max(1, math.ceil(target_ms / (lookahead * drafter_ms) - _EPS))


def verification_servers(target_ms: float, drafter_ms: float, lookahead: int, per_token_ms: float = 0.0) -> int | None:
    """Servers verifying in turn that keep up with the drafter (Eq. 1 with catch-up), at least 1; None where none
    do (per_token_ms >= drafter_ms and a pass costs more than its first token)."""
    _check(target_ms, drafter_ms, per_token_ms)
    _check_lookahead(lookahead)
    need = target_ms - per_token_ms  # a pass's fixed cost beyond its tokens
    if need <= 0:
        return 1
    room = lookahead * (drafter_ms - per_token_ms)  # drafting time per chunk left after reading it
    if room <= 0:
        return None
    return max(1, math.ceil(need / room - _EPS))


def sp_degree_needed(target_ms: float, drafter_ms: float, lookahead: int, per_token_ms: float = 0.0) -> int:
    """Target servers DSI keeps busy at once with this lookahead: the verification servers of Eq. 1 with catch-up
    (:func:`verification_servers`) plus one for the pass on the cursor. ConfigError where no count suffices."""
    v = verification_servers(target_ms, drafter_ms, lookahead, per_token_ms)
    if v is None:
        raise ConfigError(_no_servers_message(drafter_ms, per_token_ms))
    return v + 1


def satisfies_eq1(
    target_ms: float, drafter_ms: float, lookahead: int, sp_degree: int, per_token_ms: float = 0.0
) -> bool:
    """Whether ``sp_degree`` target servers keep up at this lookahead: sp_degree >= sp_degree_needed, or, with one
    server (no server kept for the cursor), one verification server suffices."""
    v = verification_servers(target_ms, drafter_ms, lookahead, per_token_ms)
    return v is not None and v <= max(1, sp_degree - 1)


def min_lookahead(
    target_ms: float, drafter_ms: float, sp_degree: int, max_lookahead: int | None = None, per_token_ms: float = 0.0
) -> int:
    """The smallest lookahead k that ``sp_degree`` target servers keep up with (:func:`satisfies_eq1`).

    target_ms, drafter_ms: forward latencies per token (tpot), ms; per_token_ms: the target's extra cost per
    additional token in one pass. Sends drafts to verification soonest, so rejections are found earliest; the
    fastest lookahead may be larger (``specpar plan`` predicts it).
    Raises ConfigError where no lookahead (<= max_lookahead, if given) satisfies it.
    """
    _check(target_ms, drafter_ms, per_token_ms)
    if isinstance(sp_degree, bool) or not isinstance(sp_degree, int) or sp_degree < 1:
        raise ConfigError(f"sp_degree must be an integer >= 1, got {sp_degree!r}")
    if target_ms - per_token_ms <= 0:
        k = 1
    elif drafter_ms <= per_token_ms:
        raise ConfigError(_no_servers_message(drafter_ms, per_token_ms))
    else:
        v = max(1, sp_degree - 1)
        k = max(1, math.ceil((target_ms - per_token_ms) / (v * (drafter_ms - per_token_ms)) - _EPS))
    if max_lookahead is not None and k > max_lookahead:
        need = sp_degree_needed(target_ms, drafter_ms, max_lookahead, per_token_ms)
        raise ConfigError(
            f"no lookahead <= {max_lookahead} lets {sp_degree} target server(s) keep up with a drafter of "
            f"{drafter_ms:g} ms per token (target {target_ms:g} ms per pass, {per_token_ms:g} ms per extra token): "
            f"it needs lookahead {k}, or sp_degree >= {need}"
        )
    return k


def _no_servers_message(drafter_ms: float, per_token_ms: float) -> str:
    return (
        f"no number of target servers keeps up with the drafter: each token costs every server that verifies "
        f"{per_token_ms:g} ms to read, no less than the {drafter_ms:g} ms the drafter takes to write it, so "
        "verifications queue whatever the lookahead (DSI stays lossless and never slower than non-SI; "
        "`specpar plan` finds its fastest lookahead by simulation)"
    )
