"""A server over a GGUF model on llama.cpp: its own context and KV cache, kept across calls, cut to the common prefix.

The server remembers which tokens its cache holds (``tokens``, at positions 0 .. len-1) and, in the exact mode, the
prompt region they were prefilled for (``region_end``). A call carries the whole context (and in its decoding, its
request's prompt length); the server keeps the longest common prefix its cache may reuse for that prompt
(:func:`specpar.backends.llama.prefill.reusable`), cuts the cache there (``llama_memory_seq_rm``) and feeds only the
rest: the prompt in its canonical passes, the tokens after it in passes of at most ``ubatch`` tokens
(:func:`specpar.backends.llama.prefill.passes`), asking llama.cpp for the logits of the rows it needs
(:class:`~specpar.backends.cached_server.CachedServer` says which). Token trees are fed through sequence ids
(:mod:`specpar.backends.llama.tree_seqs`), and their cells dropped when the call ends: cutting a path out of the
middle of the cache would leave holes that later tokens fill out of position order, and flash attention sums the
cache in cell order, so the rows would no longer be bitwise those of a chain.

In the exact mode (:mod:`specpar.backends.llama.settings`) every row after the prompt is bitwise the row of one-token
decoding after the same canonical prefill, whatever the pass it was computed in.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np

from specpar.backends.cached_server import CachedServer
from specpar.backends.llama import prefill
from specpar.backends.llama.context import LlamaContext
from specpar.backends.llama.tree_seqs import TreeSeqs
from specpar.core.decoding import Decoding
from specpar.core.errors import Cancelled, ConfigError
from specpar.core.logits_processors import rows, softmax
from specpar.core.prefix import common_prefix_len
from specpar.core.trees import TokenTree


class LlamaServer(CachedServer):
    """One instance of a :class:`~specpar.backends.llama.model.LlamaModel` with its own context and KV cache of
    ``n_ctx`` tokens; every server of one model in a process shares its weights (one mapping of the file).
    One call at a time, reset, the forward account: :class:`CachedServer`.
    """

    def __init__(self, model, name: str, n_ctx: int):
        super().__init__(name)
        self.model = model
        self.device = "cpu"
        self.latency = model.latency
        self.n_ctx = n_ctx
        self.settings = model.settings
        self._ctx = LlamaContext(model.weights.ptr, model.settings, n_ctx, model.vocab_size, model.tree_seqs)
        self.region_end = 0  # the prompt region (prefill.region) the cached tokens were prefilled for

    # -- the cache ---------------------------------------------------------------------------------------
    def _clear(self) -> None:
        self._ctx.clear()
        self.tokens = ()
        self.region_end = 0

    def _crop(self, keep: int) -> None:
        if keep < len(self.tokens):
            self._ctx.keep(keep)
            self.tokens = self.tokens[:keep]

    def _check_window(self, length: int) -> None:
        if length > self.n_ctx:
            raise ConfigError(
                f"a sequence of {length} tokens exceeds the {self.n_ctx}-token cache of {self.model.name}'s server "
                f"{self.name} (its context window is {self.model.context_window}): shorten the prompt or lower "
                "max_tokens"
            )

    def _region(self, context, decoding) -> int:
        """The end of the canonical prompt region of ``context``'s request (0: none, and always in the fast mode)."""
        prompt_len = decoding.prompt_len if self.settings.exact and decoding is not None else 0
        if prompt_len > len(context):
            raise ConfigError(f"a call's context ({len(context)} tokens) is shorter than its prompt ({prompt_len})")
        return prefill.region(prompt_len)

    def _keep(self, context, limit: int, region: int) -> int:
        """Cut the cache to what a call for ``context`` (whose prompt region ends at ``region``) may reuse, at most
        ``limit`` tokens; returns how many it holds."""
        if self.settings.exact:
            limit = min(limit, prefill.reusable(self.region_end, region, self.settings.prefill_ubatch))
        keep = min(common_prefix_len(self.tokens, context), limit)
        if self.settings.exact:
            keep = prefill.whole_passes(keep, region, self.settings.prefill_ubatch)
        self._crop(keep)
        self.region_end = region  # what is kept was computed as this region computes it
        return keep

    def _plan(self, start: int, stop: int, rows=(), region: int = 0) -> list[int]:
        """The passes that feed positions start .. stop - 1 (prefill.passes with this server's settings)."""
        st = self.settings
        return prefill.passes(start, stop, region, st.prefill_ubatch, st.ubatch, rows, self._ctx.max_outputs)

    def _forward(self, new: Sequence[int], rows_from: int, cancelled=None, region: int = 0) -> np.ndarray:
        """Feed ``new`` after the cached tokens (those below ``region`` in the prompt's canonical passes); the float32
        logits [len(new) - rows_from, V] of its inputs from ``rows_from`` on (Cancelled if cancelled between passes:
        what was fed stays cached and recorded)."""
        held = len(self.tokens)
        plan = self._plan(held, held + len(new), range(held + rows_from, held + len(new)), region)
        t0 = time.perf_counter()
        out = self._ctx.decode(new, range(held, held + len(new)), range(rows_from, len(new)), None, cancelled, plan)
        self._passed(t0, time.perf_counter())
        if out is None:  # stopped between passes: the cache holds the passes that ran
            self.tokens += tuple(new[: self._ctx.fed])
            raise Cancelled
        self.tokens += tuple(new)
        return out

    def _sync(self, context, need_from: int, decoding=None, cancelled=None) -> np.ndarray:
        """Bring the cache to ``context`` (``decoding``: its prompt length); the logits of its inputs from ``need_from``."""
        self._check_window(len(context))
        region = self._region(context, decoding)
        keep = self._keep(context, need_from, region)
        return self._forward(context[keep:], need_from - keep, cancelled, region)

    # -- rows ----------------------------------------------------------------------------------------------
    @staticmethod
    def _rows(logits: np.ndarray, decoding: Decoding, context, start: int):
        """Rows for positions start .. from float32 logits [n, V] (greedy: argmax, exact in float32; with
        ``decoding.logprobs`` set, :class:`~specpar.core.logits_processors.LoggedArgmax` rows carrying the
        log-softmax, as every backend gives them)."""
        if decoding.greedy and not decoding.reshapes and decoding.logprobs is None:
            return logits.argmax(axis=-1).tolist()
        return rows(logits, context, start, decoding)

    @staticmethod
    def _probs(logits: np.ndarray, temperature: float) -> np.ndarray:
        return softmax(logits.astype(np.float64) / temperature)

    @staticmethod
    def _top(rows: np.ndarray, k: int) -> list[list[int]]:
        """The ``k`` largest entries' indices of each row, largest first (ties: lower index first)."""
        k = min(k, rows.shape[-1])
        out = []
        for row in rows:
            part = np.argpartition(-row, k - 1)[:k]
            out.append([int(i) for i in part[np.lexsort((part, -row[part]))]])
        return out

    # -- the contract (run, the draft loops: CachedServer) ------------------------------------------------
    def _next_logits(self, token: int) -> np.ndarray:
        return self._forward([token], 0)

    # -- token trees ---------------------------------------------------------------------------------------
    def _feed_tree(self, seqs: TreeSeqs, new: Sequence[int], tree: TokenTree, lo: int, hi: int, cancelled=None):
        """One pass (or as many as ``ubatch`` needs) over ``new`` context tokens after the cached ones, then tree
        nodes lo .. hi-1 (their ancestors fed before); the logits of the last context token (if any) and every node
        fed, [1 + hi - lo or hi - lo, V]."""
        held = len(self.tokens)
        base = held + len(new)  # len(context): the root's children sit here
        tokens = [*new, *tree.tokens[lo:hi]]
        positions = [*range(held, base), *(base + d - 1 for d in tree.depths[lo:hi])]
        ids = [seqs.linear()] * len(new) + [seqs.of(i) for i in range(lo, hi)]
        first = len(new) - 1 if new else 0
        plan = self._plan(0, len(tokens), range(first, len(tokens)))  # after the prompt region: exact passes
        t0 = time.perf_counter()
        out = self._ctx.decode(tokens, positions, range(first, len(tokens)), ids, cancelled, plan)
        self._passed(t0, time.perf_counter())
        self.tokens += tuple(new)  # the tree's cells go at the call's end (TreeSeqs.close)
        if out is None:
            raise Cancelled
        return out

    def _feed_whole_tree(self, ctx, tree: TokenTree, decoding) -> np.ndarray:
        """The logits of ``ctx``'s last token and every node of ``tree``: the cache cut to what ``ctx`` may reuse (at
        most all but its last token), its prompt region fed in the canonical passes, then the rest and the tree."""
        region = self._region(ctx, decoding)
        keep = self._keep(ctx, len(ctx) - 1, region)
        if keep < region:
            self._forward(ctx[keep:region], region - keep, None, region)
            keep = region
        with TreeSeqs.whole(self._ctx, tree, keep, len(ctx)) as seqs:
            return self._feed_tree(seqs, ctx[keep:], tree, 0, len(tree))

    def _growing_tree(self, n_context: int) -> TreeSeqs:
        """Sequence ids given as nodes are fed; the tree's cells dropped when the call ends."""
        return TreeSeqs.growing(self._ctx, n_context)

    def _feed_level(self, seqs: TreeSeqs, tree: TokenTree, lo: int, cancelled) -> np.ndarray:
        """The logits of nodes lo .. of ``tree``, fed now after the nodes before them."""
        seqs.add(tree, lo, len(tree))
        return self._feed_tree(seqs, (), tree, lo, len(tree), cancelled)

    # -- what runtimes ask ---------------------------------------------------------------------------------
    def remote_spec(self):
        """How a Ray actor builds this server: the model's ``factory`` loads the GGUF in the actor's process (the
        weights never travel; processes on one machine share the file's pages), then a server of this name."""
        return functools.partial(build_server, self.model.factory, self.name, self.n_ctx)

    def set_batch_threads(self, n: int) -> int:
        """``n`` threads for the passes this mode lets run on several from now on (exact: passes of 2+ tokens, at
        any count; fast: every pass); returns the count before."""
        ctx = self._ctx
        before = ctx.batch_threads
        ctx.set_threads(ctx.threads if self.settings.exact else n, n)
        return before

    def close(self) -> None:
        """Free the context (its KV cache); the server cannot run calls after."""
        self._ctx.close()

    def __repr__(self) -> str:
        return f"LlamaServer({self.name}, {self.n_ctx} tokens)"


def build_server(factory, name: str, n_ctx: int) -> LlamaServer:
    """A server named ``name`` of the model ``factory()`` returns (in a Ray actor)."""
    return factory().server(name, n_ctx=n_ctx)
