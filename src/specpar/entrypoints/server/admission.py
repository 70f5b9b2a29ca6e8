"""Backpressure: at most ``limit`` requests in the server at once (the one generating and those waiting for the
engine), every kind alike, streams included; more are answered 429 at once. Admitted requests take the engine in
the order they arrived (an asyncio lock, which is FIFO).

A request is admitted when it arrives (:meth:`Admission.admit`, before any answer starts, so fifty streams sent at
once count as fifty) and holds a :class:`Ticket` until it ends, whatever ends it: its answer, an error, or a
client gone before its stream began (:class:`TicketedStream` releases it after the response in every case).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import anyio
from starlette.responses import StreamingResponse

from specpar.entrypoints.server.schemas import RequestError


@dataclass
class Timing:
    """A request's wall times (time.perf_counter(), seconds): arrival, engine taken, first token, last token."""

    arrival: float
    started: float | None = None
    first_token: float | None = None
    end: float | None = None

    def token(self) -> None:
        if self.first_token is None:
            self.first_token = time.perf_counter()


class Admission:
    """The requests in the server: ``admitted`` of at most ``limit``, one of them generating."""

    def __init__(self, limit: int, metrics):
        self.limit, self.metrics = limit, metrics
        self.turn = asyncio.Lock()
        self.admitted = self.running = 0

    def admit(self, arrival: float) -> Ticket:
        """A Ticket for a request that arrived at ``arrival``, or a 429 when ``limit`` are in already."""
        if self.admitted >= self.limit:
            raise RequestError(f"the server is full ({self.limit} requests in): retry later", status=429,
                               code="queue_full")  # fmt: skip
        self.admitted += 1
        self._show()
        return Ticket(self, Timing(arrival))

    def _show(self) -> None:
        self.metrics.queued(self.admitted - self.running, self.running)


class Ticket:
    """One admitted request: ``async with ticket`` waits for the engine and holds it; :meth:`release` (once,
    whatever calls it first) frees the request's place."""

    def __init__(self, admission: Admission, timing: Timing):
        self.admission, self.timing = admission, timing
        self.holding = self.released = False

    async def __aenter__(self) -> Ticket:
        a = self.admission
        await a.turn.acquire()
        self.holding, self.timing.started = True, time.perf_counter()
        a.running += 1
        a._show()
        return self

    async def __aexit__(self, *exc) -> None:
        self._leave_turn()

    def _leave_turn(self) -> None:
        if self.holding:
            self.holding = False
            self.admission.running -= 1
            self.admission.turn.release()
            self.admission._show()

    def release(self) -> None:
        self._leave_turn()
        if not self.released:
            self.released = True
            self.admission.admitted -= 1
            self.admission._show()


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
