"""A token's own bytes and its name in logprobs (core/token_text.py): OpenAI's "bytes:" form for a token that is
part of a character, for a GGUF tokenizer (its own bytes), a byte-level BPE vocabulary and SentencePiece byte
tokens; text otherwise."""

from __future__ import annotations

from specpar.core.token_text import token_bytes, token_name


class ByteLevel:
    """GPT-2-like: id 0 is "Ġa" (" a"), id 1 "âĢ" (0xE2 0x80, the start of a 3-byte character), id 2 "ľ" (0x9C)."""

    pieces = ["Ġa", "âĢ", "ľ"]
    raw = [b" a", b"\xe2\x80", b"\x9c"]

    def decode(self, ids):
        return b"".join(self.raw[i] for i in ids).decode("utf-8", "replace")

    def convert_ids_to_tokens(self, i):
        return self.pieces[i]


class SentencePiece:
    """Llama-2-like: id 0 "▁the", id 1 the byte-fallback token "<0xE2>"."""

    def decode(self, ids):
        return "".join({0: " the", 1: "\ufffd"}[i] for i in ids)

    def convert_ids_to_tokens(self, i):
        return ["▁the", "<0xE2>"][i]


def test_byte_level_tokens_keep_their_own_bytes_and_distinct_names():
    t = ByteLevel()
    assert [token_bytes(t, i) for i in range(3)] == ByteLevel.raw
    names = [token_name(token_bytes(t, i)) for i in range(3)]
    assert names == [" a", "bytes:\\xe2\\x80", "bytes:\\x9c"]
    assert len(set(names)) == 3 and {t.decode([1]), t.decode([2])} == {"\ufffd"}  # the control: text collapses them
    assert token_bytes(t, 1) + token_bytes(t, 2) == "\u201c".encode()  # together: the character


def test_sentencepiece_byte_tokens_and_a_tokenizers_own_answer():
    t = SentencePiece()
    assert token_bytes(t, 0) == b" the" and token_bytes(t, 1) == b"\xe2"
    assert token_name(token_bytes(t, 1)) == "bytes:\\xe2"

    class Own:
        def token_bytes(self, i):
            return b"\xf0\x9f"

    assert token_bytes(Own(), 5) == b"\xf0\x9f"
