"""A server over a GGUF model on llama.cpp: its own context and KV cache, kept across calls, cut to the common prefix.

The server remembers which tokens its cache holds (``tokens``, at positions 0 .. len-1). A call carries the
whole context; the server keeps the longest common prefix, cuts the cache there (``llama_memory_seq_rm``) and
feeds only the rest, in passes of at most ``ubatch`` tokens, asking llama.cpp for the logits of the rows it needs:

* ``Score(context, n)``: the rows for positions len(context)-n .. len(context) are the logits at input indices
  len(context)-n-1 .. len(context)-1: one pass over the unseen tail (at least those n+1 inputs).
* ``Draft(context, k)``: one pass over the unseen tail, then one per drafted token; ``cancelled`` is checked
  between passes, and ``tokens`` always says what the cache holds.
* ``ScoreTree(context, tree)``: one pass over the unseen tail and every node of the tree, through sequence ids
  (:mod:`specpar.backends.llama.tree_seqs`): a node sees the context and its ancestors, at position
  len(context) + depth - 1. ``DraftTree``: one such pass per level of the expansion (or per best-first step).
  The tree's cells are dropped when the call ends (the next call feeds the followed path again): cutting a path
  out of the middle of the cache would leave holes that later tokens fill out of position order, and flash
  attention sums the cache in cell order, so the rows would no longer be bitwise those of a chain.

In the exact settings (:mod:`specpar.backends.llama.settings`) every row is bitwise the row of one-token decoding,
whatever the pass it was computed in. Rows follow :class:`specpar.core.calls.Scores`: argmax ids when greedy
(carrying their log-softmax rows when the decoding asks for log-probabilities), float64 probability rows after the
shared logits processors (:func:`specpar.core.logits_processors.rows`) when sampling; drafts are sampled with the
position-keyed uniforms of :mod:`specpar.core.decoding`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

import numpy as np

from specpar.backends.cached_server import CachedServer
from specpar.backends.llama.context import LlamaContext
from specpar.backends.llama.tree_seqs import TreeSeqs
from specpar.core.calls import DraftTree, Scores, ScoreTree, as_context
from specpar.core.decoding import Decoding
from specpar.core.errors import Cancelled, ConfigError, stop_if_cancelled
from specpar.core.logits_processors import rows, softmax
from specpar.core.prefix import common_prefix_len
from specpar.core.trees import BestFirst, TokenTree, expand, grow_best_first, tree_depth


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
        self._ctx = LlamaContext(model.weights.ptr, model.settings, n_ctx, model.vocab_size, model.tree_seqs)

    # -- the cache ---------------------------------------------------------------------------------------
    def _clear(self) -> None:
        self._ctx.clear()
        self.tokens = ()

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

    def _forward(self, new: Sequence[int], rows_from: int, cancelled=None) -> np.ndarray:
        """Feed ``new`` after the cached tokens; the float32 logits [len(new) - rows_from, V] of its inputs from
        ``rows_from`` on (Cancelled if cancelled between passes: what was fed stays cached and recorded)."""
        held = len(self.tokens)
        t0 = time.perf_counter()
        out = self._ctx.decode(new, range(held, held + len(new)), range(rows_from, len(new)), None, cancelled)
        self._passed(t0, time.perf_counter())
        if out is None:  # stopped between passes: the cache holds the passes that ran
            self.tokens += tuple(new[: self._ctx.fed])
            raise Cancelled
        self.tokens += tuple(new)
        return out

    def _sync(self, context, need_from: int, cancelled=None) -> np.ndarray:
        """Bring the cache to ``context``; the logits of its inputs from ``need_from`` on."""
        self._check_window(len(context))
        keep = min(common_prefix_len(self.tokens, context), need_from)
        self._crop(keep)
        return self._forward(context[keep:], need_from - keep, cancelled)

    # -- rows ----------------------------------------------------------------------------------------------
    @staticmethod
    def _rows(logits: np.ndarray, decoding: Decoding, context, start: int):
        """Rows for positions start .. from float32 logits [n, V] (greedy: argmax, exact in float32; with
        ``decoding.logprobs`` set, :class:`~specpar.core.logits_processors.LoggedArgmax` rows carrying the
        log-softmax, as every backend gives them)."""
        if decoding.greedy and not decoding.reshapes and decoding.logprobs is None:
            return logits.argmax(axis=-1).tolist()
        return rows(logits, context, start, decoding)

    # -- the contract (run, compute, _score, _draft: CachedServer) -------------------------------------------
    def _last_logits(self, ctx, cancelled) -> np.ndarray:
        return self._sync(ctx, len(ctx) - 1, cancelled)

    def _draft_row(self, logits: np.ndarray, dec: Decoding, ctx, tokens: list[int], position: int):
        if dec.greedy and not dec.reshapes:
            return int(logits[-1].argmax())
        return rows(logits[-1:], as_context(ctx) + tokens, position, dec)[0]

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
        t0 = time.perf_counter()
        out = self._ctx.decode(tokens, positions, range(first, len(tokens)), ids, cancelled)
        self._passed(t0, time.perf_counter())
        self.tokens += tuple(new)  # the tree's cells go at the call's end (TreeSeqs.close)
        if out is None:
            raise Cancelled
        return out

    def _score_tree(self, call: ScoreTree) -> Scores:
        """Rows at the root and after every node of the tree, from one forward pass."""
        ctx, tree = call.context, call.tree
        self._check_window(len(ctx) + tree.depth)
        keep = min(common_prefix_len(self.tokens, ctx), len(ctx) - 1)
        self._crop(keep)
        with TreeSeqs.whole(self._ctx, tree, keep, len(ctx)) as seqs:
            logits = self._feed_tree(seqs, ctx[keep:], tree, 0, len(tree))
        # trees take no logits processors (refused in generate), so rows need no context
        return Scores(call.start, self._rows(logits, call.decoding, None, call.start))

    def _draft_tree(self, call: DraftTree, cancelled) -> TokenTree:
        """SpecInfer's expansion (one pass per level over its new nodes) or best-first growth (one per step)."""
        ctx = call.context
        self._check_window(len(ctx) + tree_depth(call.shape))
        logits = self._sync(ctx, len(ctx) - 1, cancelled)
        with TreeSeqs.growing(self._ctx, len(ctx)) as seqs:
            if isinstance(call.shape, BestFirst):
                return self._grow(call, seqs, logits, cancelled)
            return self._expand(call, seqs, logits, cancelled)

    def _level(self, seqs: TreeSeqs, tree: TokenTree, frontier: list[int], cancelled) -> np.ndarray:
        """The logits of the nodes fed since the last pass (the new frontier), fed now."""
        stop_if_cancelled(cancelled)
        seqs.add(tree, frontier[0], len(tree))
        return self._feed_tree(seqs, (), tree, frontier[0], len(tree), cancelled)

    def _expand(self, call: DraftTree, seqs: TreeSeqs, logits: np.ndarray, cancelled) -> TokenTree:
        dec = call.decoding

        def level_rows(tree: TokenTree, frontier: list[int]) -> list:
            nonlocal logits
            if frontier[0] >= 0:  # the frontier is the nodes the last level added, in order
                logits = self._level(seqs, tree, frontier, cancelled)
            if dec.greedy:
                k = call.shape[tree.depths[frontier[0]] if frontier[0] >= 0 else 0]
                return [_top(row, k) for row in logits]
            return list(softmax(logits.astype(np.float64) / dec.temperature))

        return expand(call.shape, level_rows, dec, len(call.context), call.source)

    def _grow(self, call: DraftTree, seqs: TreeSeqs, logits: np.ndarray, cancelled) -> TokenTree:
        dec = call.decoding
        temperature = 1.0 if dec.greedy else dec.temperature  # greedy ranks by the drafter's own probabilities

        def ranked(fed: TokenTree, frontier: list[int], k: int) -> list:
            nonlocal logits
            if frontier[0] >= 0:
                logits = self._level(seqs, fed, frontier, cancelled)
            probs = softmax(logits.astype(np.float64) / temperature)
            tops = [_top(row, k) for row in probs]
            return [(top, [float(row[t]) for t in top]) for row, top in zip(probs, tops)]

        return grow_best_first(call.shape, ranked, dec, self.model.vocab_size, call.source)[0]

    # -- what runtimes ask ---------------------------------------------------------------------------------
    def remote_spec(self):
        """How a Ray actor builds this server: the model's ``factory`` loads the GGUF in the actor's process (the
        weights never travel; processes on one machine share the file's pages), then a server of this name."""
        return functools.partial(build_server, self.model.factory, self.name, self.n_ctx)

    def set_batch_threads(self, n: int) -> int:
        """Threads for passes of 2+ tokens from now on (exact at any count); returns the count before."""
        return self._ctx.set_batch_threads(n)

    def close(self) -> None:
        """Free the context (its KV cache); the server cannot run calls after."""
        self._ctx.close()

    def __repr__(self) -> str:
        return f"LlamaServer({self.name}, {self.n_ctx} tokens)"


def _top(row: np.ndarray, k: int) -> list[int]:
    """The ``k`` largest entries' indices, largest first (ties: lower index first)."""
    k = min(k, row.shape[-1])
    part = np.argpartition(-row, k - 1)[:k]
    return [int(i) for i in part[np.lexsort((part, -row[part]))]]


def build_server(factory, name: str, n_ctx: int) -> LlamaServer:
    """A server named ``name`` of the model ``factory()`` returns (in a Ray actor)."""
    return factory().server(name, n_ctx=n_ctx)
