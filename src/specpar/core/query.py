"""What one generation is asked for, below the Engine: :class:`Query`, and the numbers of it that predictions
read, :class:`RequestShape`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specpar.core.decoding import GREEDY, Decoding
from specpar.core.stopping import Stopping


@dataclass(frozen=True, slots=True)
class Query:
    """A generation's request as the runner and the algorithms see it (the Engine makes it from a prompt and
    :class:`~specpar.core.params.SamplingParams`).

    prompt: token ids (not copied: the caller's list must stay as it is until the generation ends).
    max_tokens: the most output tokens. decoding: greedy or sampling, its draws keyed by position.
    stopping: ends the output early at a stop token or string (:mod:`specpar.core.stopping`); None: at the length.
    stream: called with each run of newly verified output token ids, in order; None: nobody listens.
    """

    prompt: Sequence[int]
    max_tokens: int
    decoding: Decoding = GREEDY
    stopping: Stopping | None = None
    stream: Callable[[list[int]], None] | None = None


@dataclass(frozen=True, slots=True)
class RequestShape:
    """What a request's predictions read of it (``algorithm="auto"``, ``lookahead="auto"``, the share curves), made
    once at the Engine's edge: plain numbers, never the prompt or the SamplingParams.

    prompt_tokens: the prompt's length in tokens. max_tokens: the most output tokens. processors: whether its
    decoding has logits processors (top_k, top_p, ...: token trees take none).
    """

    prompt_tokens: int
    max_tokens: int
    processors: bool = False
