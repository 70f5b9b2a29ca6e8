"""When a generation ends before its max_tokens: at a stop token or at a stop string, and the text so far.

:class:`Generation` asks :meth:`Stopping.stops_at` about every output token in order and ends at the first that stops
it. Stop strings may span tokens, so text is decoded incrementally (:class:`Detokenizer`) and each new piece is
searched together with the end of the text before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specpar.core.errors import ConfigError
from specpar.core.model import Model

# Tokens that end generation in the chat and base formats of common model families, as llama.cpp lists them
# (llama-vocab.cpp's end-of-generation tokens): matched against a tokenizer's special and added tokens only.
END_OF_TEXT_TOKENS = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "<|return|>",
    "<|call|>",
    "<EOT>",
    "</s>",
    "<｜end▁of▁sentence｜>",
)


def end_of_text_ids(model: Model) -> frozenset[int]:
    """Every id that ends a model's text: its generation config's and tokenizer's eos ids, and the tokenizer's
    special tokens that are end-of-text markers (Qwen2.5's GGUF names only <|endoftext|> as eos, not <|im_end|>)."""
    ids: set[int] = set()
    eos = getattr(model.generation_config, "eos_token_id", None)  # transformers' GenerationConfig, or None
    ids.update(eos if isinstance(eos, (list, tuple)) else () if eos is None else (eos,))
    tok = model.tokenizer
    if tok is not None:
        if getattr(tok, "eos_token_id", None) is not None:
            ids.add(tok.eos_token_id)
        # special and added tokens (a GGUF conversion may not flag added tokens as special)
        added = tok.get_added_vocab() if hasattr(tok, "get_added_vocab") else {}
        special = set(getattr(tok, "all_special_tokens", ())) | set(added)
        for name in special & set(END_OF_TEXT_TOKENS):
            ids.add(tok.convert_tokens_to_ids(name))
    return frozenset(int(i) for i in ids if i is not None and i >= 0)


class Detokenizer:
    """Text from tokens one at a time, each piece final: a token that ends inside a multi-byte character adds nothing
    until it is whole (vLLM's incremental detokenization). context: the tokens before the first pushed (the prompt's
    last few), so that the text at the joint comes out as in the whole text."""

    WINDOW = 6  # prompt tokens kept as context

    def __init__(self, tokenizer, context: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.ids = list(context)[-self.WINDOW :]
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token: int) -> str:
        """The new text ``token`` completes ("" while a character is incomplete)."""
        self.ids.append(token)
        before = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        if len(text) > len(before) and not text.endswith("\ufffd"):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return text[len(before) :]
        return ""


def find_stop(text: str, stop: Sequence[str], since: int = 0, floor: int = 0) -> tuple[int, int] | None:
    """(start, end) of the first stop string in ``text[since:]`` that ends past ``floor`` (the text of the tokens
    before min_tokens: a stop string there does not stop), or None."""
    best = None
    for s in stop:
        i = text.find(s, max(since, floor - len(s) + 1))
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(s))
    return best


def detokenize(tokenizer, prompt: Sequence[int], tokens: Iterable[int], stop: Sequence[str] = (), min_tokens: int = 0,
               include_stop: bool = False) -> str:  # fmt: skip
    """The text of ``tokens`` after ``prompt``, cut before the first stop string that ends after the first
    ``min_tokens - 1`` tokens' text (after it with ``include_stop``): what a :class:`TextStream` shows in all."""
    stream = TextStream(tokenizer, prompt, stop, min_tokens, include_stop)
    return stream.push(tokens) + stream.finish()


class TextStream:
    """Text pieces of a streamed output that never show any of a stop string (unless ``include_stop``): the last
    (longest stop - 1) characters wait until the next piece shows that no stop string begins in them. min_tokens,
    include_stop: as :func:`detokenize`'s."""

    def __init__(self, tokenizer, prompt: Sequence[int], stop: Sequence[str] = (), min_tokens: int = 0,
                 include_stop: bool = False):  # fmt: skip
        self._detok = Detokenizer(tokenizer, prompt)
        self.stop = tuple(stop)
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self.min_tokens, self.include_stop = min_tokens, include_stop
        self.count = 0  # tokens pushed
        self.floor = 0  # the text of the first min_tokens - 1 tokens: no stop string ends in it
        self.text = ""  # decoded so far, cut at a stop string once one shows
        self.shown = 0  # characters handed out
        self.stopped = False

    def push(self, tokens) -> str:
        """The text that ``tokens`` (the next output tokens) make safe to show."""
        if self.stopped:
            return ""
        since = max(0, len(self.text) - self._hold)
        for t in tokens:
            self.text += self._detok.push(t)
            self.count += 1
            if self.count < self.min_tokens:
                self.floor = len(self.text)
        cut = find_stop(self.text, self.stop, since, self.floor)
        if cut is not None:
            self.text, self.stopped = self.text[: cut[1] if self.include_stop else cut[0]], True
        safe = len(self.text) if self.stopped else len(self.text) - self._hold
        if safe <= self.shown:
            return ""
        piece, self.shown = self.text[self.shown : safe], safe
        return piece

    def finish(self) -> str:
        """What is left to show once the output is complete."""
        piece, self.shown = self.text[self.shown :], len(self.text)
        return piece


class Stopping:
    """A request's stop conditions (never the length: Generation counts that).

    stop_ids: ids whose token ends the output (kept as its last token). stop: strings that end the output (the text
    stops before the string, the tokens at the one completing it); they need ``tokenizer`` and ``prompt``.
    min_tokens: nothing stops the output before this many tokens (vLLM's min_tokens).
    """

    def __init__(self, stop_ids: Iterable[int] = (), stop: Sequence[str] = (), tokenizer=None, prompt=(),
                 min_tokens: int = 0):  # fmt: skip
        self.stop_ids = frozenset(stop_ids)
        if stop and tokenizer is None:
            raise ConfigError("stop strings need a tokenizer: give stop_token_ids instead, or a model with one")
        self._text = TextStream(tokenizer, prompt, stop, min_tokens) if stop else None
        self.min_tokens = min_tokens
        self.count = 0  # output tokens seen

    def pauses_here(self) -> bool:
        """Whether the generation pauses at the round that just ended, to go on later (specpar.scheduling.pausing);
        a request's own stop conditions never pause."""
        return False

    def stops_at(self, token: int) -> bool:
        """Whether the output ends with ``token`` (the next output token, in order)."""
        self.count += 1
        if token in self.stop_ids:
            if self._text is not None:  # counted toward min_tokens, not decoded
                self._text.count += 1
            return self.count >= self.min_tokens
        if self._text is None:
            return False
        self._text.push((token,))
        return self._text.stopped
