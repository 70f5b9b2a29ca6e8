"""A configuration's defaults decided for the models at hand: :func:`resolve`."""

from __future__ import annotations

import logging

from specpar.core.config import SpeculativeConfig
from specpar.core.errors import ConfigError
from specpar.core.trees import tree_depth
from specpar.planning import min_lookahead
from specpar.runtimes.base import latency_of

log = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD = 5


def prefill_pays_off(target) -> bool:
    """DSI's default for prefilling every target replica at the start: when TTFT > TPOT (a cold replica pays TTFT
    on its first verification), or when unknown; it costs ~0.1% when TTFT = TPOT (python -m benchmarks theorem_grid)."""
    lat = latency_of(target)
    return lat is None or lat.ttft_ms > lat.tpot_ms


def verification_costs_grow(target) -> bool:
    """DSI's default for keeping a target server for passes on the cursor: when verifying k drafts costs more
    than a pass on the verified prefix (per_token_ms > 0, as on CPUs), or when the cost is unknown."""
    lat = latency_of(target)
    return lat is None or lat.per_token_ms > 0


def default_lookahead(target, drafter, sp_degree: int, dedicated_cursor: bool | None = None) -> int:
    """The smallest lookahead satisfying Eq. 1 when both latencies are known and one does, else 5; with a server
    kept for the cursor (dedicated_cursor; None: DSI's default, on per-token costs) one fewer verifies."""
    t, d = latency_of(target), latency_of(drafter)
    if t is None or d is None or d.tpot_ms <= 0 or t.tpot_ms <= 0:
        return DEFAULT_LOOKAHEAD
    try:
        return min_lookahead(
            t.tpot_ms, d.tpot_ms, sp_degree, per_token_ms=t.per_token_ms, dedicated_cursor=dedicated_cursor
        )
    except ConfigError:  # reading a token costs the target more than drafting it: no lookahead keeps up
        return DEFAULT_LOOKAHEAD


def resolve(spec: SpeculativeConfig, algorithm, target, drafter) -> SpeculativeConfig:
    """``spec`` with every default decided for these models: sp_degree (1 unless the algorithm verifies in
    parallel), the lookahead (a tree's depth; Eq. 1's smallest; "adaptive" stays, for the proposer), HSD's buffers,
    DSI's modes. algorithm: the registry's entry for ``spec.algorithm``; drafter: a model, a list of levels (HSD),
    or None."""
    sp = (spec.sp_degree or 1) if algorithm.parallel else 1
    changes: dict = {"sp_degree": sp}
    k = spec.lookahead
    if k == "auto":
        raise ConfigError('lookahead="auto" is chosen by the Engine or generate() (a simulation of the models)')
    if spec.tree is not None:  # (checked by SpeculativeConfig, and against the context by check_request)
        changes["lookahead"] = tree_depth(spec.tree)
    elif algorithm.hierarchy:
        levels = len(drafter)
        buffers = spec.buffers or (k or DEFAULT_LOOKAHEAD,) * levels
        if len(buffers) != levels:
            raise ConfigError(
                f"HSD needs one buffer size T_i per drafter level: {levels} drafters, got {len(buffers)} buffer "
                f"sizes {list(buffers)}"
            )
        changes.update(buffers=tuple(buffers), lookahead=buffers[-1])
    elif algorithm.drafts and k is None:
        # Eq. 1's lookahead for the configured SP degree, also for SI (which verifies on one server)
        k = default_lookahead(target, drafter if spec.uses_drafter else None, spec.sp_degree or 1,
                              spec.dedicated_cursor)  # fmt: skip
        log.info("lookahead %d: the smallest that keeps %d target server(s) busy (Eq. 1)", k, spec.sp_degree or 1)
        changes["lookahead"] = k
    if algorithm.parallel:
        if spec.prefill_replicas is None:
            changes["prefill_replicas"] = prefill_pays_off(target)
        if spec.dedicated_cursor is None:
            changes["dedicated_cursor"] = verification_costs_grow(target)
    return spec.replace(**changes)
