"""What every server over a real model's KV cache shares: one call at a time, a reset that waits for it, and the
account of its forward passes. :class:`~specpar.backends.transformers_server.TransformersServer` and
:class:`~specpar.backends.llama.server.LlamaServer` are these, each with its own cache and passes."""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np

from specpar.backends.forward_log import ForwardLog
from specpar.core.calls import Draft, DraftTree, Proposal, Score, Scores, ScoreTree
from specpar.core.errors import Cancelled, ConfigError, ServerError, stop_if_cancelled
from specpar.core.latency import stall_limit_s
from specpar.core.model import Server
from specpar.core.prefix import common_prefix_len


class CachedServer(Server):
    """One instance of a model with its own KV cache, kept across calls; implements the runtime's server contract
    (:meth:`run`, :meth:`compute`, :meth:`reset`).

    One call at a time: a call holds the server while it runs, and :meth:`reset` waits for it, so a cache is never
    wiped under a pass still writing to it (a cancelled call finishes its pass, or stops between two, first).

    tokens: the tokens whose keys and values the cache holds; forward_s: seconds spent inside forward passes so far;
    forward_log: their (start, end) ``time.perf_counter()`` times (a :class:`ForwardLog`: the latest passes,
    bounded), for the time a generation spends outside forward passes; forwards: how many passes ran.

    A subclass sets ``model`` and ``latency`` (its profile, or None) and gives ``_clear()`` (forget the cache),
    ``_sync(context, need_from, decoding)`` (bring the cache to ``context`` of a request decoded with ``decoding``,
    whose ``prompt_len`` a backend may prefill in passes of its own; return the logits of its inputs from ``need_from``
    on), ``_rows``, the draft loop's three steps (``_last_logits``, ``_draft_row``, ``_next_logits``), the tree calls
    ``_score_tree`` and ``_draft_tree``, and where it needs one, a context every call runs in (``_inside_call``). A
    call that sees its ``cancelled`` event set between two passes raises :class:`~specpar.core.errors.Cancelled`
    (:func:`~specpar.core.errors.stop_if_cancelled`): :meth:`run` returns None for it.
    """

    def __init__(self, name: str):
        self.name = name
        self.tokens: tuple[int, ...] = ()
        self.forward_s = 0.0
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

    def _clear(self) -> None:
        raise NotImplementedError

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
        self.forward_s += t1 - t0
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
