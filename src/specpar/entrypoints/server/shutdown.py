"""The server's stop on SIGTERM: requests that cannot finish within ``--shutdown-timeout`` end as OpenAI errors.

Past its graceful timeout uvicorn cancels the requests in flight, cutting streams mid-body (no error event, no
``[DONE]``) and answering a plain-text 500. So ``shutdown_timeout`` seconds after the signal :meth:`Shutdown.abort`
ends every request itself (a stream with an error event and ``data: [DONE]``, a whole request with a 503 and
OpenAI's error body), and uvicorn's own timeout comes ``GRACE_S`` later, for those answers to go out.
"""

from __future__ import annotations

import asyncio
import threading

import anyio

GRACE_S = 2.0  # after the abort, for the error answers to be sent before uvicorn cancels what is left


class ShuttingDown(Exception):
    """A request the server stopped because it is shutting down (HTTP 503)."""


class Shutdown:
    """The server's stop, shared by its requests: ``flag`` (a threading.Event the generations read) and the
    abort's reason."""

    def __init__(self):
        self.flag = threading.Event()
        self.why = "the server is shutting down"
        self._event: anyio.Event | None = None

    def event(self) -> anyio.Event:
        """The abort as an event of the app's loop (made in it on first use)."""
        if self._event is None:
            self._event = anyio.Event()
            if self.flag.is_set():
                self._event.set()
        return self._event

    def abort(self, timeout_s: float) -> None:
        """End the requests still in the server (call on the app's loop)."""
        self.why = (
            f"the server is shutting down: this request did not finish within its shutdown timeout ({timeout_s:g} s)"
        )
        self.flag.set()
        self.event().set()

    def check(self) -> None:
        """Raise ShuttingDown once aborted (a generation's stream callback: it ends at its next verified tokens)."""
        if self.flag.is_set():
            raise ShuttingDown(self.why)

    async def race(self, fn, *args):
        """``fn(*args)`` on a worker thread, its result; ShuttingDown if the abort comes first (the thread is left to
        end on its own: its generation stops at its next verified tokens)."""
        self.check()
        outcome: list = []
        async with anyio.create_task_group() as group:

            async def work():
                try:
                    outcome.append((True, await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)))
                except Exception as exc:  # the generation's own error, raised below
                    outcome.append((False, exc))
                group.cancel_scope.cancel()

            async def watch():
                await self.event().wait()
                group.cancel_scope.cancel()

            group.start_soon(work)
            group.start_soon(watch)
        if not outcome:
            raise ShuttingDown(self.why)
        ok, value = outcome[0]
        if not ok:
            raise value
        return value


def server(config, shutdown: Shutdown, timeout_s: float):
    """A uvicorn Server (of ``config``'s app) that calls ``shutdown.abort`` ``timeout_s`` after it starts to shut down, and
    cancels what is left only ``GRACE_S`` later (``config.timeout_graceful_shutdown``)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None):
            timer = asyncio.get_running_loop().call_later(timeout_s, shutdown.abort, timeout_s)
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    config.timeout_graceful_shutdown = timeout_s + GRACE_S
    return Server(config)
