"""Backpressure: at most ``limit`` requests in the server at once (generating, or waiting for the engine's
processing units), streams included; more are answered 429 at once. A request is admitted on arrival (before any
answer starts) and holds a :class:`Ticket` until it ends, whatever ends it (:class:`TicketedStream` releases it
after a streamed response in every case, a client gone before the first event included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
from starlette.responses import StreamingResponse

from specpar.entrypoints.server.schemas import RequestError


@dataclass
class Timing:
    """A request's wall times (time.perf_counter(), seconds): arrival, generation started (its first choice had
    units), first token, last token."""

    arrival: float
    started: float | None = None
    first_token: float | None = None
    end: float | None = None

    def token(self) -> None:
        if self.first_token is None:
            self.first_token = time.perf_counter()

    def engine_started(self, called: float, results) -> None:
        """The generation's start: when the first of ``results`` (GenerationResults of engine calls made at
        ``called``) got its units, each having waited ``queue_ms``."""
        waits = [r.queue_ms for r in results if r.queue_ms is not None]
        started = called + (min(waits) / 1e3 if waits else 0.0)
        if self.started is None or started < self.started:
            self.started = started


class Admission:
    """The requests in the server: ``admitted`` of at most ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self.admitted = 0

    def admit(self, arrival: float) -> Ticket:
        """A Ticket for a request that arrived at ``arrival``, or a 429 when ``limit`` are in already."""
        if self.admitted >= self.limit:
            raise RequestError(f"the server is full ({self.limit} requests in): retry later", status=429,
                               code="queue_full")  # fmt: skip
        self.admitted += 1
        return Ticket(self, Timing(arrival))


class Ticket:
    """One admitted request's place in the server: :meth:`release` (once, whatever calls it first) frees it."""

    def __init__(self, admission: Admission, timing: Timing):
        self.admission, self.timing = admission, timing
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.admitted -= 1


class TicketedStream(StreamingResponse):
    """A streamed answer that releases its request's Ticket (and closes its events) when the response ends, also
    when the client left before the first event."""

    def __init__(self, events, ticket: Ticket):
        super().__init__(events, media_type="text/event-stream")
        self.ticket = ticket

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with anyio.CancelScope(shield=True):  # a client gone cancels us: still end the generation
                    await self.body_iterator.aclose()
            finally:
                self.ticket.release()
