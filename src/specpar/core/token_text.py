"""One token's own bytes, and its name where the API lists tokens one by one (logprobs).

A byte-level tokenizer (GPT-2's, Qwen's) has tokens that are single bytes of a character other tokens complete:
decoded alone each is U+FFFD, so naming tokens by their decoded text gives many tokens one name (completions'
``top_logprobs`` dict lost entries and gave the chosen token another token's value) and chat's ``bytes`` the bytes of
U+FFFD. OpenAI names such a token ``"bytes:\\xe2\\x80"`` (its bytes, escaped) and gives its own bytes in ``bytes``;
:func:`token_name` does the same, so distinct tokens keep distinct names.
"""

from __future__ import annotations

import functools
import re

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte tokens (Llama 2, Mistral)


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read back: each printable stand-in character to its byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def token_bytes(tokenizer, token: int) -> bytes:
    """The bytes ``token`` stands for: the tokenizer's own answer where it has one (``token_bytes``: a GGUF model's);
    else its decoded text when that is whole characters, a SentencePiece byte token's byte, or a byte-level token's
    bytes read from its vocabulary entry."""
    own = getattr(tokenizer, "token_bytes", None)
    if own is not None:
        return own(token)
    text = tokenizer.decode([token])
    if "\ufffd" not in text:
        return text.encode("utf-8")
    piece = tokenizer.convert_ids_to_tokens(token) if hasattr(tokenizer, "convert_ids_to_tokens") else None
    if isinstance(piece, str):
        fallback = _BYTE_FALLBACK.fullmatch(piece)
        if fallback:
            return bytes([int(fallback.group(1), 16)])
        decoder = _byte_decoder()
        if piece and all(c in decoder for c in piece):
            return bytes(decoder[c] for c in piece)
    return text.encode("utf-8")


def token_name(data: bytes) -> str:
    """A token's name from its bytes: its text when they are whole UTF-8 characters, else OpenAI's
    ``bytes:\\xNN...`` form."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data)
