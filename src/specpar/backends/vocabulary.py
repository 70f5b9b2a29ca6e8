"""A drafter's vocabulary against the target's: one tokenizer, output rows that may differ only by padding.

Models of one family often share a tokenizer but not the size of their output layer (Qwen2.5-0.5B has 151,936 output
rows, Qwen2.5-7B 152,064, for 151,665 tokens): the rows beyond the tokenizer's ids are padding. Speculative sampling
compares rows token by token, so a drafter whose rows differ from the target's only by padding is *fitted* to the
target's width (:func:`fit_drafter`): its padding rows and the target's extra rows get probability 0, which keeps
verification lossless. Two models whose tokenizers map text to different ids are refused (:func:`check_tokenizers`).
A model takes part through its ``tokenizer``, ``vocab_size`` (the width of its servers' rows) and ``with_rows(n)``
(a copy whose servers return rows of width n; None for models that cannot be fitted).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from specpar.core.errors import ConfigError
from specpar.core.model import Model, as_model

log = logging.getLogger(__name__)


def check_tokenizers(target_tokenizer, drafter_tokenizer, target_name: str = "target", drafter_name: str = "drafter"):
    """Refuse two tokenizers that map some text to different ids (either None: nothing to compare)."""
    if target_tokenizer is None or drafter_tokenizer is None:
        return
    if target_tokenizer.get_vocab() != drafter_tokenizer.get_vocab():
        raise ConfigError(
            f"the tokenizers of target {target_name} and drafter {drafter_name} differ: speculative inference needs "
            "a drafter with the target's tokenizer (the same ids for the same text); output rows that differ only by "
            "padding are fine, a different tokenizer is not"
        )


def token_count(model: Model) -> int | None:
    """How many ids are real tokens: the model's ``token_count``, else its tokenizer's largest id + 1 (or None)."""
    if model.token_count is not None:
        return model.token_count
    if model.tokenizer is None:
        return None
    ids = model.tokenizer.get_vocab().values()
    return max(ids) + 1 if ids else 0


def fit_drafter(target, drafter):
    """The drafter to pair with ``target``: ``drafter.with_rows(target's width)`` when their rows differ only by
    padding (every real token id below both widths, where known), else ``drafter`` itself (one width already, no
    ``with_rows``, Pools of servers, or rows that differ by more than padding: greedy decoding still works, sampling
    is refused by :func:`specpar.algorithms.checks.check_tokens`). Different tokenizers are refused
    (:func:`check_tokenizers`)."""
    t, d = as_model(target), as_model(drafter)
    check_tokenizers(t.tokenizer, d.tokenizer, t.name or "target", d.name or "drafter")
    width, own = t.vocab_size, d.vocab_size
    if width is None or own is None or width == own or d.with_rows is None:
        return drafter
    tokens = max((n for n in (token_count(t), token_count(d)) if n is not None), default=None)
    if tokens is not None and tokens > min(width, d.native_rows or own):
        log.info("drafter rows %d vs target rows %d for %d tokens: more than padding, not fitted", own, width, tokens)
        return drafter
    log.info(
        "drafter %s has %d output rows, target %s %d: the rows beyond %s are padding, fitted to the target's width",
        d.name or "drafter", own, t.name or "target", width, tokens if tokens is not None else "the narrower model's",
    )  # fmt: skip
    return d.with_rows(width)


def fit_drafters(target, drafter):
    """:func:`fit_drafter` over what an entry point takes as the drafter: None, one model, or a list of them (HSD's
    levels, merged drafters); Pools of servers and models without ``with_rows`` pass as they are."""
    if drafter is None:
        return None
    if isinstance(drafter, (list, tuple)):
        return [fit_drafter(target, d) for d in drafter]
    return fit_drafter(target, drafter)


class TokenizedModel(Model):
    """A model that speaks text through its ``tokenizer`` (Hugging Face's interface: ``tokenizer(text)``,
    ``decode``, ``apply_chat_template``); ``no_tokenizer`` ends the error when it has none."""

    no_tokenizer = ": give token ids"

    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise ConfigError(f"{self.name} has no tokenizer{self.no_tokenizer}")
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._need_tokenizer()(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self._need_tokenizer().decode(list(ids), skip_special_tokens=True)

    def chat_prompt(self, turns: Sequence[str]) -> list[int]:
        """Token ids of user ``turns`` in the model's chat template, ending where the assistant speaks."""
        tok = self._need_tokenizer()
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"{self.name}'s tokenizer has no chat template")
        messages = [{"role": "user", "content": t} for t in turns]
        return self.encode(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
