"""The served model as the API sees it: prompt encoding, chat template, context window, token text."""

from __future__ import annotations

from specpar.core.errors import ConfigError
from specpar.core.token_text import token_bytes, token_name
from specpar.entrypoints.server.schemas import RequestError, id_text, parse_id_text


class Served:
    """The engine's target: prompts and messages into token ids, checked; output pieces and tokens into text.

    A target without a tokenizer (a simulated model) reads and writes *id text*: its text is its token ids in
    decimal, each preceded by a space (" 4 17 3"), so a prompt is a list of ids or such a string, streamed pieces
    join to the whole output, and a chat prompt is its messages' ids one after the other.
    """

    def __init__(self, engine, max_model_len: int | None = None):
        self.engine = engine
        model = engine.target_model
        self.tokenizer = engine.tokenizer
        self.vocab_size = model.vocab_size
        self.max_model_len = model.context_window or max_model_len

    def prompt_ids(self, prompt, param: str = "prompt") -> list[int]:
        """A prompt (text, or token ids) as token ids, checked against the vocabulary; never empty."""
        if isinstance(prompt, str):
            ids = parse_id_text(prompt, param) if self.tokenizer is None else self.engine.target_model.encode(prompt)
        else:
            ids = list(prompt)
        if not ids:
            raise RequestError("the prompt is empty: give at least one token", param)
        return self.check_ids(ids, param)

    def chat_ids(self, messages, add_generation_prompt: bool = True) -> list[int]:
        """The messages in the target's chat template, ending where the assistant speaks; without a tokenizer,
        the id text of every message's content, one after the other."""
        turns = [{"role": m.role, "content": content_text(m.content)} for m in messages]
        if self.tokenizer is None:
            return self.prompt_ids(" ".join(t["content"] for t in turns), "messages")
        if not getattr(self.tokenizer, "chat_template", None):
            raise RequestError("this model's tokenizer has no chat template: use /v1/completions", "messages")
        text = self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=add_generation_prompt)
        return self.prompt_ids(text, "messages")

    def check_ids(self, ids, param: str) -> list[int]:
        if self.vocab_size is not None and any(t < 0 or t >= self.vocab_size for t in ids):
            raise RequestError(f"token ids must be in [0, {self.vocab_size})", param)
        return list(ids)

    def room(self, prompt_len: int) -> int | None:
        """Tokens that fit after a prompt of ``prompt_len`` tokens (None: no limit known)."""
        return None if self.max_model_len is None else self.max_model_len - prompt_len

    def check_length(self, prompt_len: int, max_tokens: int) -> None:
        if self.max_model_len is not None and prompt_len + max_tokens > self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} for the completion).",
                "max_tokens",
                code="context_length_exceeded",
            )
        try:
            self.engine.check_length(prompt_len, max_tokens)
        except ConfigError as exc:
            raise RequestError(str(exc), "max_tokens", code="context_length_exceeded") from None

    def text(self, piece) -> str:
        """A streamed piece (text, or token ids without a tokenizer) as text."""
        return piece if isinstance(piece, str) else id_text(piece)

    def decode(self, ids) -> str:
        """The text of token ids (id text without a tokenizer)."""
        return id_text(ids) if self.tokenizer is None else self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_bytes(self, t: int) -> bytes:
        """One token's own bytes (chat logprobs' ``bytes``): a byte-level token's byte, not U+FFFD's."""
        return f" {t}".encode() if self.tokenizer is None else token_bytes(self.tokenizer, t)

    def token(self, t: int) -> str:
        """One token's name in the logprobs: its text, or OpenAI's ``bytes:\\xNN`` form for a token that is not whole
        characters alone (so distinct tokens keep distinct names: :mod:`specpar.core.token_text`)."""
        return token_name(self.token_bytes(t))


def content_text(content) -> str:
    """A message's content: a string, or its text parts joined."""
    return content if isinstance(content, str) else "".join(p.text for p in content)
