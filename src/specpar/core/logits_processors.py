"""Logits processors: how a request reshapes next-token distributions, one implementation for target and drafter.

Every server (simulated or transformers, target or drafter) turns its raw logits into rows through
:func:`rows`, so the target's rows that verification reads are exactly the processed target's, and the
drafter's proposals come from its own logits processed the same way. Speculative sampling is then lossless
for the processed target: greedy output equals the processed target's argmax decoding, sampled output is
distributed as the processed target's sampling.

Order (Hugging Face's ``generate`` and vLLM): repetition penalty on the raw logits, temperature, top-k,
top-p, min-p. Each row is processed with its own prefix (the prompt, the verified tokens and the drafts
before its position), which the repetition penalty reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class LogitsProcessors:
    """The controls that reshape a distribution (defaults: no change).

    repetition_penalty: > 0; a token already in the prefix has its logit divided by it when positive,
        multiplied by it when negative (CTRL, Keskar et al. 2019; HF's and vLLM's definition). 1: off.
    top_k: keep the k most likely tokens (ties at the k-th kept); 0: off.
    top_p: keep the smallest set of most likely tokens whose probability reaches top_p; 1: off.
    min_p: drop tokens less likely than min_p times the most likely one; 0: off.
    """

    repetition_penalty: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def active(self) -> bool:
        return self.repetition_penalty != 1.0 or self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    @property
    def changes_argmax(self) -> bool:
        """Whether greedy decoding sees a difference: only the penalty moves the argmax (the filters keep it)."""
        return self.repetition_penalty != 1.0

    def apply(self, logits: np.ndarray, context: Sequence[int], start: int, temperature: float) -> np.ndarray:
        """Processed logits: [n, V] raw logits -> [n, V] float64, removed tokens at -inf; when sampling, up to a
        constant per row (the largest is 0: see :func:`scaled`), which changes no distribution.

        Row i is the distribution at position ``start + i``, after the tokens ``context[:start + i]``.
        temperature: 0 (greedy) applies only the penalty (the filters cannot change the argmax).
        """
        z = np.array(logits, dtype=np.float64)  # a copy: the caller's logits stay raw
        if self.repetition_penalty != 1.0:
            penalize_repeats(z, context, start, self.repetition_penalty)
        if temperature == 0.0:
            return z
        z = scaled(z, temperature)  # the filters below are relative: a shift per row changes none of them
        if 0 < self.top_k < z.shape[-1]:
            kth = np.partition(z, -self.top_k, axis=-1)[:, -self.top_k, None]
            z[z < kth] = -np.inf
        if self.top_p < 1.0:
            order = np.argsort(z, axis=-1)  # ascending, as HF's TopPLogitsWarper
            ascending = np.take_along_axis(z, order, axis=-1)
            drop = np.cumsum(softmax(ascending), axis=-1) <= 1.0 - self.top_p
            drop[:, -1] = False  # the most likely token always stays
            np.put_along_axis(z, order, np.where(drop, -np.inf, ascending), axis=-1)
        if self.min_p > 0.0:
            p = softmax(z)
            z[p < self.min_p * p.max(axis=-1, keepdims=True)] = -np.inf
        return z


def penalize_repeats(z: np.ndarray, context: Sequence[int], start: int, penalty: float) -> None:
    """In place: in row i of ``z`` [n, V], every token of context[:start + i] gets its logit / penalty (> 0)
    or * penalty (< 0)."""
    seen = np.zeros(z.shape[-1], dtype=bool)
    seen[list(set(context[:start]))] = True
    for i in range(z.shape[0]):
        if i:
            seen[context[start + i - 1]] = True
        row = z[i]
        s = row[seen]
        row[seen] = np.where(s < 0, s * penalty, s / penalty)


def scaled(z: np.ndarray, temperature: float) -> np.ndarray:
    """(z - max z) / temperature, row-wise ([..., V] float64): the logits softmax(z / T) is taken of, shifted so that
    none is above 0 and none overflows, however small T (>= specpar.core.decoding.MIN_TEMPERATURE; z / T alone is
    +inf once T < max |z| / 1.8e308, and its softmax nan)."""
    return (z - z.max(axis=-1, keepdims=True)) / temperature


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of [n, V] logits (-inf allowed, at least one finite per row)."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rows(logits: np.ndarray, context: Sequence[int], start: int, decoding) -> list[int] | np.ndarray:
    """Rows in :class:`specpar.core.calls.Scores`' form from raw logits [n, V] for positions start .. start + n - 1
    (prefixes context[:start + i]): argmax ids when greedy, [n, V] probabilities when sampling.

    decoding: a :class:`specpar.core.decoding.Decoding`; its processors (if any) are applied first.
    """
    proc = decoding.processors
    if proc is not None:
        z = proc.apply(logits, context, start, decoding.temperature)
    else:
        z = np.asarray(logits, dtype=np.float64)
        if not decoding.greedy:
            z = scaled(z, decoding.temperature)
    if decoding.greedy:
        return z.argmax(axis=-1).tolist()
    return softmax(z)
