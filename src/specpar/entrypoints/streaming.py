"""One request's output as it is verified, for :meth:`specpar.Engine.stream`: the request runs on a thread of its
own, and its pieces (text, or token ids) are handed to the reader."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from specpar.core.params import SamplingParams
from specpar.core.results import GenerationResult
from specpar.core.stopping import TextStream
from specpar.entrypoints.requests import Requests, texts

_END = object()


class _Abandoned(Exception):
    """The reader of a stream stopped reading: the generation ends."""


def stream_pieces(requests: Requests, ids: list[int], params: SamplingParams, spec, cancel=None) -> Iterator:
    """The output of one request as it is verified: text pieces where the target has a tokenizer (joined, exactly
    the result's text, never any of a stop string), else lists of token ids. The request runs on a thread of its own;
    closing the iterator, or setting ``cancel``, ends it at its next verified tokens. Returns the result (None when
    ended early)."""
    pieces: queue.Queue = queue.Queue()
    abandoned = threading.Event()
    text = TextStream(requests.tokenizer, ids, *texts(params)) if requests.tokenizer is not None else None
    done: list[GenerationResult] = []

    def on_tokens(tokens):
        if abandoned.is_set() or (cancel is not None and cancel.is_set()):
            raise _Abandoned
        piece = text.push(tokens) if text is not None else list(tokens)
        if piece:
            pieces.put(piece)

    def work():
        try:
            done.append(requests.one(ids, params, spec, on_tokens))
            if text is not None and (rest := text.finish()):
                pieces.put(rest)
            pieces.put(_END)
        except _Abandoned:
            pieces.put(_END)
        except BaseException as exc:  # handed to the reader
            pieces.put(exc)

    worker = threading.Thread(target=work, name="specpar-stream", daemon=True)
    worker.start()
    try:
        while (item := pieces.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        abandoned.set()
        worker.join()
    return done[0] if done else None
