"""One llama.cpp context: a KV cache and the forward passes over it, as NumPy rows.

A :class:`LlamaContext` owns a ``llama_context`` (``n_ctx`` cells shared by every sequence id: ``kv_unified``) and a
reusable ``llama_batch``. :meth:`decode` feeds tokens in the passes its caller plans
(:mod:`specpar.backends.llama.prefill`) and returns the logits of the rows asked for only. Tokens are fed in position
order and only ever removed from the end (:meth:`keep`), so the cells hold positions 0 .. n-1 in order: flash
attention sums the visible cells in cell order, so a row does not depend on how its prefix reached the cache.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specpar.backends.llama.library import lib, recent_errors
from specpar.backends.llama.settings import LlamaSettings
from specpar.core.errors import ConfigError

MAX_OUTPUTS = 64  # logits rows a pass may return (a pass asking for more is split: prefill.passes)


class LlamaContext:
    """A llama.cpp context over ``model`` (a loaded ``llama_model`` pointer) with ``n_ctx`` cells.

    n_seq: sequence ids the cache may hold (1 for chains; a token tree uses one per leaf).
    vocab: logits per row.
    """

    def __init__(self, model, settings: LlamaSettings, n_ctx: int, vocab: int, n_seq: int = 1):
        L = lib()
        p = L.llama_context_default_params()
        p.n_ctx = n_ctx
        # one llama_decode = one pass: the chunking is ours (the prompt's passes may be longer than the others)
        self.max_pass = settings.longest_pass
        p.n_batch = p.n_ubatch = self.max_pass
        # the logits buffer holds a pass's rows (llama.cpp keeps at least a row per sequence), not n_ctx x vocab
        self.max_outputs = max(min(settings.ubatch, MAX_OUTPUTS), n_seq)
        p.n_outputs_max = self.max_outputs
        p.n_seq_max = n_seq
        p.kv_unified = True
        p.n_threads, p.n_threads_batch = settings.threads, settings.batch_threads
        p.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if settings.flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = True
        recent_errors(clear=True)
        self.ctx = L.llama_init_from_model(model, p)
        if not self.ctx:
            why = "; ".join(recent_errors()) or "llama.cpp gave no reason"
            raise ConfigError(f"llama.cpp could not make a context of {n_ctx} tokens: {why}")
        self._L = L
        self.mem = L.llama_get_memory(self.ctx)
        self.n_ctx = n_ctx
        self.vocab = vocab
        self.n_seq = n_seq
        self.batch = L.llama_batch_init(self.max_pass, 0, n_seq)
        self.fed = 0
        self.threads, self.batch_threads = settings.threads, settings.batch_threads

    def decode(
        self,
        tokens: Sequence[int],
        positions: Sequence[int],
        rows: Sequence[int],
        seqs: Sequence[Sequence[int]] | None = None,
        cancelled=None,
        passes: Sequence[int] | None = None,
    ) -> np.ndarray | None:
        """Feed ``tokens`` at ``positions`` (in sequence 0, or the ids ``seqs[i]``) in passes of the lengths
        ``passes`` (default: one pass) and return the float32 logits of the inputs at indices ``rows`` (ascending),
        [len(rows), vocab]; None if ``cancelled`` was set between passes (the tokens fed so far stay cached)."""
        L, b, V = self._L, self.batch, self.vocab
        out = np.empty((len(rows), V), dtype=np.float32)
        want = set(rows)
        done = 0
        n = len(tokens)
        self.fed = 0  # tokens of this call fed so far (all of them unless cancelled)
        if sum(passes or (n,)) != n or max(passes or (n,), default=0) > self.max_pass:
            raise ValueError(f"passes {passes} do not cover {n} tokens in passes of at most {self.max_pass}")
        start = 0
        for length in passes or (n,):
            if start and cancelled is not None and cancelled.is_set():
                return None
            stop = start + length
            outputs = 0
            for i in range(start, stop):
                j = i - start
                b.token[j] = tokens[i]
                b.pos[j] = positions[i]
                ids = (0,) if seqs is None else seqs[i]
                b.n_seq_id[j] = len(ids)
                row = b.seq_id[j]
                for a, s in enumerate(ids):
                    row[a] = s
                flag = i in want
                b.logits[j] = flag
                outputs += flag
            if outputs > self.max_outputs:
                raise ValueError(f"{outputs} rows asked of one pass: at most {self.max_outputs}")
            b.n_tokens = stop - start
            rc = L.llama_decode(self.ctx, b)
            if rc != 0:
                why = "; ".join(recent_errors(clear=True)) or f"llama_decode returned {rc}"
                raise RuntimeError(f"llama.cpp forward pass failed: {why}")
            self.fed = stop
            if outputs:
                logits = np.ctypeslib.as_array(L.llama_get_logits(self.ctx), shape=(outputs, V))
                out[done : done + outputs] = logits
                done += outputs
            start = stop
        return out

    def set_threads(self, threads: int, batch_threads: int) -> tuple[int, int]:
        """Threads for one-token passes and for passes of 2+ tokens; returns the counts before."""
        before = self.threads, self.batch_threads
        self.threads, self.batch_threads = max(1, int(threads)), max(1, int(batch_threads))
        self._L.llama_set_n_threads(self.ctx, self.threads, self.batch_threads)
        return before

    def keep(self, n: int) -> None:
        """Drop every cached token at position >= ``n`` (in every sequence)."""
        if not self._L.llama_memory_seq_rm(self.mem, -1, n, -1):
            raise RuntimeError(f"llama.cpp refused to cut its cache at position {n}")

    def drop_sequence(self, seq: int) -> None:
        """Drop every cached token of sequence ``seq`` (tokens of other sequences stay)."""
        self._L.llama_memory_seq_rm(self.mem, seq, -1, -1)

    def share(self, src: int, dst: int, p0: int, p1: int) -> None:
        """Make the cached tokens of sequence ``src`` at positions p0 .. p1-1 visible to sequence ``dst`` too."""
        self._L.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def clear(self) -> None:
        self._L.llama_memory_clear(self.mem, True)

    def close(self) -> None:
        if self.ctx:
            self._L.llama_batch_free(self.batch)
            self._L.llama_free(self.ctx)
            self.ctx = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass
