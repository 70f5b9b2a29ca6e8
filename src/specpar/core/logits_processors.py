"""Logits processors: how a request reshapes next-token distributions, one implementation for target and drafter.

Every server turns its raw logits into rows through :func:`rows`, so verification reads the processed target's rows
and the drafter proposes from its own logits processed alike: speculative sampling is then lossless for the
processed target. Order (vLLM's, and Hugging Face's for what it shares): logit bias and min_tokens on the raw
logits, the repetition, presence and frequency penalties, temperature, top-k, top-p, min-p; each row with its own
prefix (the prompt, the verified tokens and the drafts before its position).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specpar.core.errors import ConfigError
from specpar.core.results import TokenLogprob


@dataclass(frozen=True, slots=True)
class LogitsProcessors:
    """The controls that reshape a distribution (defaults: no change; :class:`specpar.core.params.SamplingParams`
    says what each means).

    stop_ids: end of text and the request's stop ids, which get logit -inf at output indices < min_tokens.
    repetition_penalty: a logit of a token in the prefix is divided by it when positive, multiplied when negative
    (CTRL; HF's and vLLM's definition). presence_penalty + c * frequency_penalty: subtracted from the logit of a
    token that appears c > 0 times in the *output*. top_k: ties at the k-th kept. prompt_len: where the output begins
    in a row's context.
    """

    repetition_penalty: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_tokens: int = 0
    stop_ids: tuple[int, ...] = ()
    prompt_len: int = 0

    @property
    def active(self) -> bool:
        return self.changes_argmax or self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    @property
    def changes_argmax(self) -> bool:
        """Whether greedy decoding sees a difference: penalties, the bias and min_tokens move the argmax (the
        filters keep it)."""
        return (
            self.repetition_penalty != 1.0
            or self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or bool(self.logit_bias)
            or (self.min_tokens > 0 and bool(self.stop_ids))
        )

    def apply(self, logits: np.ndarray, context: Sequence[int], start: int, temperature: float) -> np.ndarray:
        """Processed logits: [n, V] raw logits -> [n, V] float64, removed tokens at -inf (when sampling, shifted per
        row: :func:`scaled`). Row i is the distribution after ``context[:start + i]``. temperature 0 (greedy) applies
        only what moves the argmax."""
        z = np.array(logits, dtype=np.float64)  # a copy: the caller's logits stay raw
        vocab = z.shape[-1]
        if self.logit_bias:
            ids, bias = zip(*self.logit_bias)
            if max(ids) >= vocab:
                raise ConfigError(f"logit_bias names token {max(ids)}, outside the vocabulary of {vocab} tokens")
            z[:, list(ids)] += bias
        if self.min_tokens > 0 and self.stop_ids:
            end = self.prompt_len + self.min_tokens - start  # rows before it are at output indices < min_tokens
            if end > 0:  # (a stop id outside the vocabulary never comes anyway)
                z[:end, [t for t in self.stop_ids if t < vocab]] = -np.inf
        if self.repetition_penalty != 1.0:
            penalize_repeats(z, context, start, self.repetition_penalty)
        if self.presence_penalty != 0.0 or self.frequency_penalty != 0.0:
            penalize_output(z, context, start, self.prompt_len, self.presence_penalty, self.frequency_penalty)
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


def penalize_output(z: np.ndarray, context: Sequence[int], start: int, prompt_len: int, presence: float,
                    frequency: float) -> None:  # fmt: skip
    """In place: in row i of ``z`` [n, V], every token that appears c > 0 times in the output
    context[prompt_len:start + i] gets its logit lowered by presence + c * frequency."""
    counts = np.bincount(np.asarray(context[prompt_len:start], dtype=np.int64), minlength=z.shape[-1])[: z.shape[-1]]
    counts = counts.astype(np.float64)
    for i in range(z.shape[0]):
        if i and start + i - 1 >= prompt_len:
            counts[context[start + i - 1]] += 1
        z[i] -= (counts > 0) * presence + counts * frequency


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
    """(z - max z) / temperature, row-wise ([..., V] float64): the logits of softmax(z / T), none above 0, so none
    overflows however small T (>= specpar.core.decoding.MIN_TEMPERATURE)."""
    return (z - z.max(axis=-1, keepdims=True)) / temperature


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax of [n, V] logits (-inf allowed, at least one finite per row)."""
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of [n, V] logits (-inf allowed, at least one finite per row)."""
    shifted = z - z.max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class LoggedArgmax(int):
    """A greedy row when log-probabilities are asked for: the argmax token id (an int, as any greedy row) carrying
    ``logprobs``, the [V] float64 log-probabilities of the processed row."""

    def __new__(cls, token: int, logprobs: np.ndarray | None = None):  # a default: pickle calls it with the id
        row = super().__new__(cls, token)
        row.logprobs = logprobs
        return row


def rows(logits: np.ndarray, context: Sequence[int], start: int, decoding) -> list[int] | np.ndarray:
    """Rows in :class:`specpar.core.calls.Scores`' form from raw logits [n, V] for positions start .. start + n - 1,
    after ``decoding``'s processors: argmax ids when greedy (:class:`LoggedArgmax` with ``decoding.logprobs``),
    [n, V] probabilities when sampling."""
    proc = decoding.processors
    if proc is not None:
        z = proc.apply(logits, context, start, decoding.temperature)
    else:
        z = np.asarray(logits, dtype=np.float64)
        if not decoding.greedy:
            z = scaled(z, decoding.temperature)
    if decoding.greedy:
        ids = z.argmax(axis=-1).tolist()
        if decoding.logprobs is None:
            return ids
        return [LoggedArgmax(t, lp) for t, lp in zip(ids, log_softmax(z))]
    return softmax(z)


def token_logprob(token: int, row, top: int) -> TokenLogprob:
    """``token``'s log-probability in a target row that carries them (a :class:`LoggedArgmax` when greedy, a [V]
    probability row when sampling), and the ``top`` most likely tokens there (-inf for removed ones)."""
    if isinstance(row, LoggedArgmax):
        lp = row.logprobs
    elif isinstance(row, np.ndarray):
        with np.errstate(divide="ignore"):
            lp = np.log(row)
    else:
        raise ConfigError("this target's server returns no log-probability rows (Decoding.logprobs is not supported)")
    best = ()
    if top:
        ids = np.argpartition(-lp, top - 1)[:top] if top < len(lp) else np.arange(len(lp))
        best = tuple((int(i), float(lp[i])) for i in sorted(ids.tolist(), key=lambda i: (-lp[i], i)))
    return TokenLogprob(int(token), float(lp[token]), best)
