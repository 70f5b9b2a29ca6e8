"""Tiny random-weight GGUF models written by the tests (no downloads), in the default pair's weight formats.

The weights mix the quantizations of the default pair's Q4_K_M files (Q4_K and Q6_K blocks, which llama.cpp's
tiled matmul and weight repacking would change with the batch size; Q8_0, which its llamafile kernels take) so that
the exactness tests exercise the kernels the real models run. K-quant blocks are random bytes with scales that give
weights of about ``std`` (the ``gguf`` package writes, but does not quantize, K-quants).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

QK = 256  # elements per K-quant block (and the hidden size: K-quant rows must be whole blocks)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (byte-level BPE token text)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def _q4_k(rng, rows: int, cols: int, std: float) -> np.ndarray:
    """Random Q4_K rows [rows, cols / 256 * 144] bytes: d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 of
    4-bit quants per block; w = d * scale * q - dmin * min, centred on average."""
    blocks = rows * cols // QK
    d = 2.0e-4 * std / 0.05
    head = np.array([d, 7.5 * d], dtype=np.float16).view(np.uint8)
    out = rng.integers(0, 256, size=(blocks, 144), dtype=np.uint8)
    out[:, :4] = head
    return out.reshape(rows, -1)


def _q6_k(rng, rows: int, cols: int, std: float) -> np.ndarray:
    """Random Q6_K rows [rows, cols / 256 * 210] bytes: 128 + 64 bytes of 6-bit quants, 16 int8 scales, d (f16);
    w = d * scale * (q - 32)."""
    blocks = rows * cols // QK
    out = rng.integers(0, 256, size=(blocks, 210), dtype=np.uint8)
    out[:, 208:] = np.array([4.0e-5 * std / 0.05], dtype=np.float16).view(np.uint8)
    return out.reshape(rows, -1)


def write_tiny_gguf(
    path,
    *,
    vocab: int | None = None,
    seed: int = 0,
    layers: int = 2,
    context: int = 1024,
    hidden: int = QK,
    ffn: int = 2 * QK,
    heads: int = 4,
    kv_heads: int = 2,
    std: float = 0.05,
    out_std: float = 0.05,
    arch: str = "qwen2",
    quantized: bool = True,
    truncate: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
    padding: int = 0,
    swapped: bool = False,
) -> Path:
    """A random-weight ``arch`` (qwen2 or llama) model at ``path``; returns the path.

    vocab: None for a byte-level BPE tokenizer (256 byte tokens, 3 merges and Qwen's end-of-text and chat tokens:
        263 tokens, with a chatml chat template), or n for n tokenless ids (llama.cpp's "none" vocabulary: token ids
        only, as small as the sampling tests need).
    quantized: Q4_K / Q6_K / Q8_0 weights as in a Q4_K_M file; False: float32 (the llamafile kernels' type).
    truncate: cut that many bytes off the end of the file (a damaged download).
    padding: that many "[PAD<id>]" tokens after the tokenizer's (rows no text maps to, as Qwen's GGUFs have).
    swapped: another tokenizer of the same size: the texts of ids 0 and 1 exchanged.
    noise: a drafter of the model of the same ``seed``: this fraction of its weight bytes (and values) redrawn
        with ``noise_seed``, so that it agrees with the target often but not always.
    """
    import gguf

    path = Path(path)
    rng = np.random.default_rng(seed)
    noisy = np.random.default_rng(noise_seed)

    def perturbed(a: np.ndarray, redraw) -> np.ndarray:
        if noise:
            hit = noisy.random(a.shape) < noise
            a = np.where(hit, redraw(a.shape), a).astype(a.dtype)
        return a

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(context)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M if quantized else gguf.LlamaFileType.ALL_F32)
    n_vocab = _add_vocab(w, vocab, padding, swapped)
    head_dim = hidden // heads
    Q = gguf.GGMLQuantizationType

    def dense(rows: int, cols: int, s: float) -> np.ndarray:
        return perturbed(
            (s * rng.standard_normal((rows, cols))).astype(np.float32), lambda n: s * noisy.standard_normal(n)
        )

    def matrix(name: str, rows: int, cols: int, kind: str, s: float = std) -> None:
        if not quantized:
            w.add_tensor(name, dense(rows, cols, s))
        elif kind == "q4_k":
            w.add_tensor(name, redraw(_q4_k(rng, rows, cols, s), 144, slice(4, 144)), raw_dtype=Q.Q4_K)
        elif kind == "q6_k":
            w.add_tensor(name, redraw(_q6_k(rng, rows, cols, s), 210, slice(0, 208)), raw_dtype=Q.Q6_K)
        else:
            w.add_tensor(name, gguf.quants.quantize(dense(rows, cols, s), Q.Q8_0), raw_dtype=Q.Q8_0)

    def redraw(a: np.ndarray, block: int, quants: slice) -> np.ndarray:
        """A fraction ``noise`` of the quant bytes of each block redrawn (never the scales: same weight sizes)."""
        if not noise:
            return a
        blocks = a.reshape(-1, block).copy()
        part = blocks[:, quants]
        hit = noisy.random(part.shape) < noise
        blocks[:, quants] = np.where(hit, noisy.integers(0, 256, size=part.shape, dtype=np.uint8), part)
        return blocks.reshape(a.shape)

    def vector(name: str, n: int, value: float | None = None) -> None:
        if value is not None:
            w.add_tensor(name, np.full(n, value, np.float32))
        else:
            w.add_tensor(name, dense(1, n, std)[0])

    matrix("token_embd.weight", n_vocab, hidden, "q4_k", 1.0)
    for i in range(layers):
        b = f"blk.{i}"
        vector(f"{b}.attn_norm.weight", hidden, 1.0)
        matrix(f"{b}.attn_q.weight", heads * head_dim, hidden, "q4_k")
        matrix(f"{b}.attn_k.weight", kv_heads * head_dim, hidden, "q4_k")
        matrix(f"{b}.attn_v.weight", kv_heads * head_dim, hidden, "q8_0")
        if arch == "qwen2":
            vector(f"{b}.attn_q.bias", heads * head_dim)
            vector(f"{b}.attn_k.bias", kv_heads * head_dim)
            vector(f"{b}.attn_v.bias", kv_heads * head_dim)
        matrix(f"{b}.attn_output.weight", hidden, heads * head_dim, "q4_k")
        vector(f"{b}.ffn_norm.weight", hidden, 1.0)
        matrix(f"{b}.ffn_gate.weight", ffn, hidden, "q4_k")
        matrix(f"{b}.ffn_up.weight", ffn, hidden, "q4_k")
        matrix(f"{b}.ffn_down.weight", hidden, ffn, "q6_k")
    vector("output_norm.weight", hidden, 1.0)
    matrix("output.weight", n_vocab, hidden, "q6_k", out_std)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if truncate:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(size - truncate)
    return path


def _add_vocab(w, vocab: int | None, padding: int = 0, swapped: bool = False) -> int:
    """Write the tokenizer keys; returns the number of ids."""
    if vocab is not None:
        w.add_tokenizer_model("none")
        w.add_uint32(f"{w.arch}.vocab_size", vocab)
        return vocab
    byte_chars = _bytes_to_unicode()
    tokens = [byte_chars[b] for b in range(256)]
    merges = ["Ġ t", "Ġ a", "e r"]
    tokens += [m.replace(" ", "") for m in merges] + list(SPECIAL)
    types = [1] * (len(tokens) - len(SPECIAL)) + [3] * len(SPECIAL)  # normal, then control
    if swapped:
        tokens[0], tokens[1] = tokens[1], tokens[0]
    types += [4] * padding  # user-defined, as llama.cpp's converter marks padding
    tokens += [f"[PAD{len(tokens) + i}]" for i in range(padding)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    return len(tokens)
