"""Planning: the lookahead / SP-degree trade-off of DSI (the paper's Eq. 1, §3.1 and App. D).

Arguments everywhere: ``target_ms`` and ``drafter_ms`` are forward latencies per token (TPOT, ms, or any one unit),
``lookahead`` is k (drafts per verification task), ``sp_degree`` counts *target* servers only (the drafter runs on
one more device), ``per_token_ms`` is the target's extra cost per additional token in one pass (0 on GPUs).

The paper's Eq. 1: a chunk of k drafts is ready every ``k * drafter_ms`` and each verification occupies a target
server for ``target_ms``, so no verification waits for a server iff

    sp_degree >= target_ms / (lookahead * drafter_ms)          (Eq. 1, :func:`eq1_servers`)

Its worked examples, which :func:`min_lookahead` and :func:`sp_degree_needed` return as such:

* App. D / §3.1: a drafter at 5% of the target's latency with SP = 4 needs lookahead 5
  (``min_lookahead(1.0, 0.05, 4) == 5``): 4 target servers and the drafter, 5 devices;
* §3.1, SP vs MP: a drafter at 10% with lookahead 2 runs on 5 target servers and 1 drafter
  (``sp_degree_needed(1.0, 0.1, 2) == 5``).

A proposer that costs nothing (prompt lookup, :mod:`specpar.algorithms.ngram`) is Eq. 1 at ``drafter_ms -> 0``: its
right-hand side grows without bound for every lookahead, so no number of servers keeps up and no lookahead makes it
hold (the functions below refuse a drafter latency of 0). The drafter then no longer limits DSI: the drafts of a
whole match exist at once, and the lookahead only caps the drafts one verification carries (docs/proposers.md).

What Eq. 1 leaves out, counted only where it applies:

* **the server kept for the cursor** (``dedicated_cursor``, :mod:`specpar.algorithms.dsi`). Where a verification costs
  more than a pass on the verified prefix (``per_token_ms > 0``, CPUs), DSI keeps one target server for passes on
  the cursor and verifies on the others, so it needs one server more than its verifications
  (:func:`keeps_cursor_server`: as given, by default where ``per_token_ms > 0``, as ``specpar.generate``
  decides). Without it (the default where verifying is as cheap as a pass, the paper's setting) a verification
  covering the cursor stands in for that pass: the pass on the cursor after a rejection is the first of the
  overlapping target passes Eq. 1 counts, and no server is added.
* **catch-up.** Where each extra token in a pass costs ``per_token_ms``, V servers verifying chunks in turn each
  read the V * k tokens drafted since their last turn, so a verification costs
  ``target_ms + per_token_ms * (V k - 1)``. V keep up with the drafter iff
  ``V k drafter_ms >= target_ms + per_token_ms (V k - 1)``, i.e.
  ``V >= (target_ms - per_token_ms) / (k (drafter_ms - per_token_ms))`` (:func:`verification_servers`). With
  ``per_token_ms = 0`` this is Eq. 1. Where ``per_token_ms >= drafter_ms`` no number of servers keeps up (every
  server must read every token, more slowly than the drafter writes them): verifications queue whatever the
  lookahead (None). DSI stays lossless and, keeping a server for the cursor, never slower than non-SI; only its
  speedup suffers.

Two effects of specpar's DSI that Eq. 1 does not count, and which the simulators show (the planner does not add
servers for them):

* where a chunk takes longer to draft than a target pass (``k * drafter_ms > target_ms``, Eq. 1 then says one
  server), the pass on the cursor ends before the chunk exists, the target takes that token itself (as non-SI
  would) and starts the next such pass, so on a single target server the chunk's verification queues behind it:
  DSI at c = 0.05, a = 0.94, k = 22 on one server is slower than SI at k = 22, on two faster
  (tests/planning/test_planning.py); Theorem 2's comparison therefore runs DSI on at least two
  (:func:`specpar.experiments.heatmap.theorem2_servers`);
* at the end of a generation the last chunk is shorter and arrives sooner: on Eq. 1's 7 servers at c = 0.01,
  a = 1, k = 15 it waits behind the pass on the cursor (2.00 target passes for N = 100, 1.99 on 8 servers).
"""

from __future__ import annotations

import math

from specpar.core.errors import ConfigError
from specpar.core.numbers import int_at_least

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
    int_at_least("lookahead", lookahead)


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


def keeps_cursor_server(per_token_ms: float = 0.0, dedicated_cursor: bool | None = None) -> bool:
    """Whether DSI keeps a target server for passes on the cursor: ``dedicated_cursor`` as given, or by default
    (None) where verifications cost more than a pass on the verified prefix (``per_token_ms > 0``), as
    ``specpar.generate`` decides for a target whose latency is known."""
    return per_token_ms > 0 if dedicated_cursor is None else bool(dedicated_cursor)


def _verifying(sp_degree: int, kept: bool) -> int:
    """Of ``sp_degree`` target servers, those that verify: all but the one kept for the cursor (one server is never
    kept: it verifies and takes the passes on the cursor in turn, as :mod:`specpar.algorithms.dsi` does)."""
    return sp_degree - 1 if kept and sp_degree > 1 else sp_degree


def sp_degree_needed(
    target_ms: float,
    drafter_ms: float,
    lookahead: int,
    per_token_ms: float = 0.0,
    dedicated_cursor: bool | None = None,
) -> int:
    """Target servers (the drafter not counted) that keep up with the drafter at this lookahead: Eq. 1's
    ceil(target_ms / (lookahead * drafter_ms)), at least 1, with catch-up where ``per_token_ms > 0``
    (:func:`verification_servers`), plus one where DSI keeps a server for the cursor (:func:`keeps_cursor_server`).
    ``sp_degree_needed(1.0, 0.1, 2) == 5`` (§3.1). ConfigError where no count suffices."""
    v = verification_servers(target_ms, drafter_ms, lookahead, per_token_ms)
    if v is None:
        raise ConfigError(_no_servers_message(drafter_ms, per_token_ms))
    return v + 1 if keeps_cursor_server(per_token_ms, dedicated_cursor) else v


def satisfies_eq1(
    target_ms: float,
    drafter_ms: float,
    lookahead: int,
    sp_degree: int,
    per_token_ms: float = 0.0,
    dedicated_cursor: bool | None = None,
) -> bool:
    """Whether ``sp_degree`` target servers keep up at this lookahead: its verifying servers (all, or all but the
    one kept for the cursor) are at least :func:`verification_servers`."""
    v = verification_servers(target_ms, drafter_ms, lookahead, per_token_ms)
    return v is not None and v <= _verifying(sp_degree, keeps_cursor_server(per_token_ms, dedicated_cursor))


def min_lookahead(
    target_ms: float,
    drafter_ms: float,
    sp_degree: int,
    max_lookahead: int | None = None,
    per_token_ms: float = 0.0,
    dedicated_cursor: bool | None = None,
) -> int:
    """The smallest lookahead k that ``sp_degree`` target servers keep up with (:func:`satisfies_eq1`): with no
    server kept for the cursor, the paper's ceil(target_ms / (sp_degree * drafter_ms)), at least 1
    (``min_lookahead(1.0, 0.05, 4) == 5``, App. D); with one kept, the same on sp_degree - 1 servers, and catch-up
    counted where ``per_token_ms > 0``. Sends drafts to verification soonest, so rejections are found earliest; the
    fastest lookahead may be larger (``specpar plan`` predicts it).
    Raises ConfigError where no lookahead (<= max_lookahead, if given) satisfies it.
    """
    _check(target_ms, drafter_ms, per_token_ms)
    int_at_least("sp_degree", sp_degree)
    if target_ms - per_token_ms <= 0:
        k = 1
    elif drafter_ms <= per_token_ms:
        raise ConfigError(_no_servers_message(drafter_ms, per_token_ms))
    else:
        v = _verifying(sp_degree, keeps_cursor_server(per_token_ms, dedicated_cursor))
        k = max(1, math.ceil((target_ms - per_token_ms) / (v * (drafter_ms - per_token_ms)) - _EPS))
    if max_lookahead is not None and k > max_lookahead:
        need = sp_degree_needed(target_ms, drafter_ms, max_lookahead, per_token_ms, dedicated_cursor)
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
