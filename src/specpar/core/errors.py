"""Errors and warnings that specpar raises; each names the problem in words a user can act on."""


class SpecparError(Exception):
    """Base class of every error specpar raises on purpose."""


class ConfigError(SpecparError, ValueError):
    """A parameter is out of range or inconsistent (bad prompt, N, lookahead, sp_degree, ...)."""


class ServerError(SpecparError, RuntimeError):
    """A server (model) raised while running a task; the original exception is its ``__cause__``."""

    def __init__(self, server: str, kind: str, cause: BaseException):
        self.server = server
        self.kind = kind
        super().__init__(f"server {server!r} failed while running a {kind} task: {type(cause).__name__}: {cause}")


class SpecparWarning(UserWarning):
    """A configuration that runs, but outside the assumptions a guarantee needs."""


class Cancelled(Exception):
    """A call was cancelled while it ran: its server stops between two passes, and its ``run`` returns None (raised
    and caught inside a server, never seen by an algorithm)."""


def stop_if_cancelled(cancelled) -> None:
    """Raise :class:`Cancelled` if a call's ``cancelled`` event is set (None: the call cannot be cancelled)."""
    if cancelled is not None and cancelled.is_set():
        raise Cancelled


class SamplingDefaultWarning(UserWarning):
    """A request that samples at its surface's default temperature without having asked (an Engine request with no
    SamplingParams and no temperature: vLLM's temperature 1, where ``generate()`` is greedy)."""
