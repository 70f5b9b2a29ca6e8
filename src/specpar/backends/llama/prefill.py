"""The passes a llama.cpp server feeds tokens in: the prompt in its canonical shape, the rest in exact passes.

In the exact mode a row after the prompt must not depend on how its pass was made up, so passes after the prompt
hold at most ``limit`` tokens (:mod:`specpar.backends.llama.settings`). The prompt needs only the same cache on every
server of a request: its first ``region(prompt_len)`` tokens (all but the last) go in passes that end at multiples of
``size`` and at the region's end, a shape that is a function of the prompt's length alone, so replicas, catch-ups
and late servers compute the very same keys and values in llama.cpp's fastest kernels (~2x on the default pair).
A cache filled under one region is valid for another only in whole passes both share (:func:`reusable`,
:func:`whole_passes`: two prompts of one length share the shape of their passes, not their keys and values).
"""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.errors import ConfigError

EVERYTHING = 1 << 62


def region(prompt_len: int) -> int:
    """The end of the prompt's canonical region: all of the prompt but its last token (0: no region)."""
    return max(0, prompt_len - 1)


def reusable(held: int, wanted: int, size: int) -> int:
    """How many first cached tokens, computed for a region ending at ``held``, a request whose region ends at
    ``wanted`` may keep (EVERYTHING when the two are one region; else the whole passes both share)."""
    if held == wanted:
        return EVERYTHING
    return min(held, wanted) // size * size


def whole_passes(keep: int, end: int, size: int) -> int:
    """Of ``keep`` cached tokens a request whose region ends at ``end`` shares, those it may keep: below the region's
    end only whole canonical passes (a pass fed again from its middle would be another shape), past it all."""
    return keep if keep >= end else keep - keep % size


def passes(
    start: int, stop: int, end: int, size: int, limit: int, rows: Sequence[int] = (), cap: int = EVERYTHING
) -> list[int]:
    """Lengths of the passes that feed positions ``start`` .. ``stop`` - 1: those below the region's ``end`` in
    passes that end at multiples of ``size`` and at ``end``, the others in passes of at most ``limit``.

    rows: the positions whose logits are asked for (ascending); a pass after the region ends early rather than ask
    for more than ``cap`` of them (llama.cpp's logits buffer); a canonical pass cannot, and refuses.
    """
    if start < end and stop < end:
        raise ConfigError(
            f"a call's context ({stop} tokens) ends inside its request's prompt ({end + 1} tokens): the prompt is "
            "prefilled whole"
        )
    out, p, r = [], start, 0
    while p < stop:
        q = min(end, (p // size + 1) * size) if p < end else min(p + limit, stop)
        while r < len(rows) and rows[r] < p:
            r += 1
        asked = [x for x in rows[r : r + cap + 1] if x < q]
        if len(asked) > cap:
            if p < end:
                raise ConfigError(f"{len(asked)} rows asked of one pass over the prompt: at most {cap}")
            q = asked[cap - 1] + 1
        out.append(q - p)
        p = q
    return out
