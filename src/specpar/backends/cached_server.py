"""What every server over a real model's KV cache shares: one call at a time, a reset that waits for it, the
account of its forward passes, and the loops that draft chains and token trees one pass at a time.
:class:`~specpar.backends.transformers_server.TransformersServer` and :class:`~specpar.backends.llama.server.LlamaServer`
are these, each with its own cache and passes."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from specpar.backends.forward_log import ForwardLog
from specpar.core.calls import Draft, DraftTree, Proposal, Score, Scores, ScoreTree, as_context
from specpar.core.errors import Cancelled, ConfigError, ServerError, stop_if_cancelled
from specpar.core.latency import stall_limit_s
from specpar.core.model import Server
from specpar.core.prefix import common_prefix_len
from specpar.core.trees import BestFirst, TokenTree, expand, grow_best_first, tree_depth


class CachedServer(Server):
    """One instance of a model with its own KV cache, kept across calls; implements the runtime's server contract
    (:meth:`run`, :meth:`compute`, :meth:`reset`). One call at a time: :meth:`reset` waits for the call running, so
    a cache is never wiped under a pass still writing to it.

    tokens: the tokens whose keys and values the cache holds; forward_log: the (start, end) ``time.perf_counter()``
    times of the latest passes (a :class:`ForwardLog`); forwards: how many passes ran.

    A subclass sets ``model`` and ``latency`` and gives ``_clear()``, ``_sync(context, need_from, decoding,
    cancelled)`` (bring the cache to ``context``; the logits [n, V] of its inputs from ``need_from`` on), ``_rows``,
    ``_next_logits(token)`` ([1, V]), ``_check_window``, the tree passes (``_feed_whole_tree``, ``_growing_tree``,
    ``_feed_level``) and their rows (``_probs``: float64 [n, V]; ``_top``: each row's k best ids). A call that sees
    ``cancelled`` set between two passes raises :class:`~specpar.core.errors.Cancelled` (:func:`~specpar.core.errors.stop_if_cancelled`): :meth:`run` returns
    None for it.
    """

    def __init__(self, name: str):
        self.name = name
        self.tokens: tuple[int, ...] = ()
        self.forward_log = ForwardLog()
        self.forwards = 0
        self._in_call = threading.Lock()  # held by the call running on this server
        self._longest_call_ms: float | None = None  # the longest call so far (how long reset() may have to wait)

    # -- the cache ---------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything cached (the next call is a prefill); first waits for a call still running here (a
        cancelled one finishing its pass), up to its stall limit (specpar.core.latency.stall_limit_s)."""
        limit = stall_limit_s(self._longest_call_ms)
        if not self._in_call.acquire(timeout=limit):
            cause = TimeoutError(f"a call still runs on it after {limit:.3g} s: its cache cannot be reset")
            raise ServerError(self.name, "reset", cause) from cause
        try:
            self._clear()
        finally:
            self._in_call.release()

    def cached_len(self, context) -> int:
        """How many of ``context``'s first tokens the cache holds."""
        return common_prefix_len(self.tokens, context)

    def duration_ms(self, call) -> float:
        """Predicted time of ``call`` from the model's measured latency profile (virtual clock)."""
        lat = self.latency
        if lat is None:
            raise ConfigError(
                f"{self.model.name} has no latency profile, so the virtual clock cannot time it: run real models on "
                "the threads runtime, or measure a profile with `specpar profile` and give it as latency="
            )
        return lat.call_ms(call, self.cached_len(call.context) if lat.cache_matters else 0)

    def _passed(self, t0: float, t1: float) -> None:
        """One forward pass ran from ``t0`` to ``t1`` (perf_counter seconds)."""
        self.forward_log.append((t0, t1))
        self.forwards += 1

    # -- the contract --------------------------------------------------------------------------------------
    def _inside_call(self):
        """The context every call runs in."""
        return contextlib.nullcontext()

    def run(self, call, cancelled=None):
        """The result of ``call`` from real forward passes; None when ``cancelled`` was set mid-draft."""
        with self._in_call, self._inside_call():
            t0 = time.perf_counter()
            kind = type(call)
            try:
                if kind is Score:
                    result = self._score(call)
                elif kind is Draft:
                    result = self._draft(call, cancelled)
                elif kind is ScoreTree:
                    result = self._score_tree(call)
                elif kind is DraftTree:
                    result = self._draft_tree(call, cancelled)
                else:
                    raise TypeError(f"unknown call {call!r}")
            except Cancelled:
                result = None
            ms = (time.perf_counter() - t0) * 1000.0
            if self._longest_call_ms is None or ms > self._longest_call_ms:
                self._longest_call_ms = ms
            return result

    def compute(self, call):
        """The result of ``call`` at once (virtual clock)."""
        return self.run(call, None)

    def _score(self, call: Score) -> Scores:
        """Rows for positions len(context) - n .. len(context): the logits at inputs len(context) - n - 1 on."""
        ctx = call.context
        logits = self._sync(ctx, len(ctx) - call.n_drafts - 1, call.decoding)
        return Scores(call.start, self._rows(logits, call.decoding, ctx, call.start))

    def _draft(self, call: Draft, cancelled) -> Proposal:
        """``call.k`` tokens drafted one at a time: a pass over the unseen context, then one per drafted token but the
        last, ``cancelled`` checked between them; when sampling, with the rows they were drawn from."""
        ctx, dec = call.context, call.decoding
        logits = self._last_logits(ctx, cancelled, dec)
        tokens, q = [], []
        for i in range(call.k):
            position = len(ctx) + i
            row = self._draft_row(logits, dec, ctx, tokens, position)
            if dec.greedy:
                token = int(row)
            else:
                token = dec.draft(row, position)
                q.append(row)
            tokens.append(token)
            if i + 1 < call.k:
                stop_if_cancelled(cancelled)
                logits = self._next_logits(token)
        return Proposal(tokens, None if dec.greedy else np.stack(q))

    def _last_logits(self, ctx, cancelled, decoding):
        return self._sync(ctx, len(ctx) - 1, decoding, cancelled)

    def _draft_row(self, logits, dec, ctx, tokens: list[int], position: int):
        """The row the token at ``position`` is drafted from (greedy: its id), from ``logits`` [1, V]."""
        if dec.greedy and not dec.reshapes:
            return int(logits[-1].argmax())
        return self._rows(logits, dec, as_context(ctx) + tokens, position)[0]

    def _score_tree(self, call: ScoreTree) -> Scores:
        """Rows at the root and after every node of the tree, from one forward pass with tree attention."""
        ctx, tree = call.context, call.tree
        self._check_window(len(ctx) + tree.depth)
        logits = self._feed_whole_tree(ctx, tree, call.decoding)
        # trees take no logits processors (refused in generate), so rows need no context
        return Scores(call.start, self._rows(logits, call.decoding, None, call.start))

    def _draft_tree(self, call: DraftTree, cancelled) -> TokenTree:
        """SpecInfer's expansion (:func:`specpar.core.trees.expand`: one pass per level over its new nodes) or
        best-first growth (:func:`specpar.core.trees.grow_best_first`: one pass per step over the nodes it expands),
        ``cancelled`` checked between passes."""
        ctx, dec = call.context, call.decoding
        self._check_window(len(ctx) + tree_depth(call.shape))
        logits = self._last_logits(ctx, cancelled, dec)
        with self._growing_tree(len(ctx)) as growing:

            def fed(tree: TokenTree, frontier: list[int]):
                """The logits of ``frontier``: the root's, or the nodes the last step added (in order), fed now."""
                nonlocal logits
                if frontier[0] >= 0:
                    stop_if_cancelled(cancelled)
                    logits = self._feed_level(growing, tree, frontier[0], cancelled)
                return logits

            def level_rows(tree: TokenTree, frontier: list[int]) -> list:
                rows = fed(tree, frontier)
                if dec.greedy:
                    return self._top(rows, call.shape[tree.depths[frontier[0]] if frontier[0] >= 0 else 0])
                return list(self._probs(rows, dec.temperature))

            def ranked(tree: TokenTree, frontier: list[int], k: int) -> list:
                # greedy ranks by the drafter's own probabilities
                probs = self._probs(fed(tree, frontier), 1.0 if dec.greedy else dec.temperature)
                return [(top, [float(row[t]) for t in top]) for row, top in zip(probs, self._top(probs, k))]

            if isinstance(call.shape, BestFirst):
                return grow_best_first(call.shape, ranked, dec, logits.shape[-1], call.source)[0]
            return expand(call.shape, level_rows, dec, len(ctx), call.source)
