"""A GGUF model's own tokenizer (llama.cpp's), with the few methods of a Hugging Face tokenizer specpar calls
(special tokens parsed in text and skipped in output, as specpar calls transformers'); the chat template is rendered
with Jinja2 as transformers renders it (a sandbox, trimmed blocks, ``tojson`` and ``raise_exception``).
"""

from __future__ import annotations

import ctypes
import functools
import json
from collections.abc import Sequence

from specpar.backends.llama.library import lib
from specpar.core.errors import ConfigError

SPECIAL_TYPES = (3, 4)  # GGUF token types: CONTROL and USER_DEFINED (a Hugging Face tokenizer's added tokens)


class GGUFTokenizer:
    """The tokenizer in a loaded GGUF model (``model``: a ``llama_model`` pointer).

    token_types: the file's ``tokenizer.ggml.token_type`` (as written, before llama.cpp overrides any): its control
        and user-defined tokens are the special tokens, as in the Hugging Face tokenizer the file came from.
    """

    def __init__(self, model, chat_template: str | None, token_types=None):
        L = lib()
        self._L = L
        self.vocab = L.llama_model_get_vocab(model)
        self.size = int(L.llama_vocab_n_tokens(self.vocab))
        eos = L.llama_vocab_eos(self.vocab)
        self.eos_token_id = eos if eos >= 0 else None
        self.chat_template = chat_template
        self.token_types = token_types

    # -- ids <-> text --------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        n = len(data) + 16
        while True:
            buf = (ctypes.c_int32 * n)()
            got = self._L.llama_tokenize(self.vocab, data, len(data), buf, n, False, True)
            if got >= 0:
                return list(buf[:got])
            n = -got  # the buffer was too small: llama.cpp says how many ids there are

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._bytes(ids, skip_special_tokens).decode("utf-8", "replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes one token stands for (a special token: its text), before any UTF-8 decoding: a byte-level
        token that is part of a character is that byte, not U+FFFD (:mod:`specpar.core.token_text`)."""
        return self._bytes([token], skip_special_tokens=False)

    def _bytes(self, ids: Sequence[int], skip_special_tokens: bool) -> bytes:
        ids = [int(i) for i in ids]
        if not ids:
            return b""
        tokens = (ctypes.c_int32 * len(ids))(*ids)
        n = 16 * len(ids) + 16
        while True:
            buf = ctypes.create_string_buffer(n)
            got = self._L.llama_detokenize(self.vocab, tokens, len(ids), buf, n, False, not skip_special_tokens)
            if got >= 0:
                return buf.raw[:got]
            n = -got

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": self.encode(text)}

    # -- special tokens ------------------------------------------------------------------------------------
    def text(self, token: int) -> str:
        return self._L.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    @functools.cached_property
    def _special(self) -> dict[str, int]:
        """Special tokens' texts and ids: the file's control and user-defined tokens (llama.cpp's own attributes
        when the file has no token types)."""
        if self.token_types is not None:
            import numpy as np

            ids = np.nonzero(np.isin(self.token_types, SPECIAL_TYPES))[0]
            return {self.text(int(t)): int(t) for t in ids}
        is_control = self._L.llama_vocab_is_control
        return {self.text(t): t for t in range(self.size) if is_control(self.vocab, t)}

    @property
    def all_special_tokens(self) -> list[str]:
        return list(self._special)

    def get_added_vocab(self) -> dict[str, int]:
        return dict(self._special)

    def convert_tokens_to_ids(self, name: str) -> int | None:
        if name in self._special:
            return self._special[name]
        ids = self.encode(name)
        return ids[0] if len(ids) == 1 else None

    def get_vocab(self) -> dict[str, int]:
        return {self.text(t): t for t in range(self.size)}

    # -- chat ----------------------------------------------------------------------------------------------
    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True, **kw):
        """The chat ``messages`` (dicts with role and content) as the model's template writes them."""
        if not self.chat_template:
            raise ConfigError("this GGUF model has no chat template (tokenizer.chat_template)")
        text = _template(self.chat_template).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.text(self._L.llama_vocab_bos(self.vocab))
            if self._L.llama_vocab_bos(self.vocab) >= 0
            else "",
            eos_token=self.text(self.eos_token_id) if self.eos_token_id is not None else "",
            **kw,
        )
        return self.encode(text) if tokenize else text


@functools.lru_cache(maxsize=4)
def _template(source: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)
