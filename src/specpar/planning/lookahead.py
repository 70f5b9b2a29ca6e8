"""DSI's lookahead / SP-degree trade-off: the paper's Eq. 1 (§3.1, App. D), with catch-up and the cursor's server.

``target_ms``, ``drafter_ms``: forward latencies per token (TPOT, ms or any one unit); ``lookahead``: k, drafts per
verification task; ``sp_degree``: *target* servers (the drafter runs on one more device); ``per_token_ms``: the
target's extra cost per additional token in one pass (0 on GPUs). No verification waits for a server iff

    sp_degree >= target_ms / (lookahead * drafter_ms)          (Eq. 1, :func:`eq1_servers`)

e.g. ``min_lookahead(1.0, 0.05, 4) == 5`` (App. D) and ``sp_degree_needed(1.0, 0.1, 2) == 5`` (§3.1, SP vs MP). Where
``per_token_ms > 0`` DSI keeps a server for the cursor (:func:`keeps_cursor_server`) and V servers verifying in turn
keep up iff ``V >= (target_ms - per_token_ms) / (k (drafter_ms - per_token_ms))`` (catch-up,
:func:`verification_servers`; none where ``per_token_ms >= drafter_ms``): docs/dsi.md. A drafter of latency 0 (prompt
lookup) satisfies Eq. 1 for no lookahead and is refused. Not counted: where ``k * drafter_ms > target_ms`` one
server's verification queues behind the pass on the cursor, so Theorem 2 runs DSI on at least two servers
(:func:`specpar.experiments.heatmap.theorem2_servers`).
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


def eq1_servers(target_ms: float, drafter_ms: float, lookahead: int) -> int:
    """The paper's Eq. 1 as written: ceil(target_ms / (lookahead * drafter_ms)), at least 1."""
    _check(target_ms, drafter_ms)
    int_at_least("lookahead", lookahead)
    return max(1, math.ceil(target_ms / (lookahead * drafter_ms) - _EPS))


def verification_servers(target_ms: float, drafter_ms: float, lookahead: int, per_token_ms: float = 0.0) -> int | None:
    """Servers verifying in turn that keep up with the drafter (Eq. 1 with catch-up), at least 1; None where none
    do (per_token_ms >= drafter_ms and a pass costs more than its first token)."""
    _check(target_ms, drafter_ms, per_token_ms)
    int_at_least("lookahead", lookahead)
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
