"""The backend surface: what every model and every server is, as the layers above read them.

Every backend declares these types (``class SimulatedLM(Model)``); the defaults here stand for what a class lacks, so
a reader asks ``model.context_window``, never whether there is one. An object that only looks like a model or a
server is taken through :func:`as_model` and :func:`as_server`, the one place that asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from specpar.core.latency import LatencyProfile

REAL_KINDS = ("transformers", "llama")  # backends whose servers run real forward passes


class Server(Protocol):
    """One instance of a model with its own cache: what a runtime runs calls on (:mod:`specpar.runtimes`).

    model: what it was made from (None: a server made of others, its ``parts``, which a runtime claims with it).
    latency: its LatencyProfile (None: unknown). device: where it computes (None: a simulation). forward_log: a real
    server's record of its latest forward passes. cached_len(context): leading tokens of ``context`` its cache holds.
    duration_ms(call), compute(call): the virtual clock's duration and result; run(call, cancelled): the result in
    real time (None once ``cancelled`` is set). set_batch_threads(n): llama.cpp's threads for its batched passes, the
    count before (None: no such setting). remote_spec(): how a Ray actor builds it (None: it cannot run on Ray).
    """

    name: str
    model: Model | None = None
    latency: LatencyProfile | None = None
    device: str | None = None
    parts: Sequence[Server] = ()
    forward_log: Any = None

    def cached_len(self, context) -> int: ...

    def duration_ms(self, call) -> float: ...

    def compute(self, call) -> Any: ...

    def run(self, call, cancelled) -> Any: ...

    def reset(self) -> None:
        return None

    def set_batch_threads(self, n: int) -> int | None:
        return None

    def remote_spec(self):
        return None

    def close(self) -> None:
        return None


class Model(Protocol):
    """A model a backend simulates or loads: what the engine, the checks and the predictions read of it.

    kind: "simulated", "transformers", "llama" (or "other": known only by its ``server``); ``real`` when its servers
    run forward passes. vocab_size: the width of its rows. max_token_id: the largest id a prompt may hold.
    context_window: the longest sequence it takes. latency: its LatencyProfile. tokenizer: ``encode`` and ``decode``.
    generation_config: transformers' (its eos ids). path: where it was loaded from. backend_settings(): how its
    backend computes, as a profile's key records it. exact_mode: the llama.cpp mode it runs in (None: no modes).
    acceptance_rate: a simulated drafter's. token_count: the ids that are real tokens; native_rows: its own rows'
    width; with_rows(n): a copy whose servers return rows of width n (:mod:`specpar.backends.vocabulary`).
    servers(n, devices, prefix, max_tokens): ``n`` servers named prefix0, prefix1, ... None everywhere: unknown.
    """

    name: str | None = None
    kind: str = "other"
    vocab_size: int | None = None
    max_token_id: int | None = None
    context_window: int | None = None
    latency: LatencyProfile | None = None
    tokenizer: Any = None
    device: str | None = None
    generation_config: Any = None
    path: str | None = None
    exact_mode: bool | None = None
    acceptance_rate: float | None = None
    token_count: int | None = None
    native_rows: int | None = None
    with_rows: Any = None

    @property
    def real(self) -> bool:
        return self.kind in REAL_KINDS

    def server(self, name: str | None = None) -> Server: ...

    def backend_settings(self) -> dict:
        return {"backend": type(self).__name__}

    def servers(
        self, n: int, devices: Sequence[str] | None = None, prefix: str = "server", max_tokens: int = 0
    ) -> list[Server]:
        return [self.server(f"{prefix}{i}") for i in range(n)]


MODEL_FIELDS = tuple(Model.__annotations__)
SERVER_FIELDS = tuple(f for f in Server.__annotations__ if f != "name")


def declares(obj, kind: type) -> bool:
    """Whether ``obj``'s class declares ``kind`` (:class:`Model` or :class:`Server`) among its bases."""
    return kind in type(obj).__mro__


def as_model(source) -> Model:
    """``source`` as a :class:`Model`: itself when it declares one, else a view of it with the defaults for what it
    lacks (a model known only by its ``server(name)``)."""
    return source if declares(source, Model) else _Foreign(source)


def as_server(source) -> Server:
    """``source`` as a :class:`Server`: itself when it declares one, else a view of it with the defaults for what it
    lacks."""
    return source if declares(source, Server) else _ForeignServer(source)


class _Foreign(Model):
    """A model that declares no :class:`Model`: what it has, the defaults for the rest; its servers as Servers."""

    def __init__(self, inner):
        self.inner = inner
        for field in MODEL_FIELDS:
            if hasattr(inner, field):
                setattr(self, field, getattr(inner, field))

    def server(self, name: str | None = None) -> Server:
        return as_server(self.inner.server(name))

    def backend_settings(self) -> dict:
        inner = self.inner
        return inner.backend_settings() if hasattr(inner, "backend_settings") else {"backend": type(inner).__name__}

    def __repr__(self) -> str:
        return repr(self.inner)


class _ForeignServer(Server):
    """A server that declares no :class:`Server`: its calls go to it; what it has, the defaults for the rest."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        for field in SERVER_FIELDS:
            if hasattr(inner, field):
                setattr(self, field, getattr(inner, field))

    def cached_len(self, context) -> int:
        return self.inner.cached_len(context)

    def duration_ms(self, call) -> float:
        return self.inner.duration_ms(call)

    def compute(self, call) -> Any:
        return self.inner.compute(call)

    def run(self, call, cancelled) -> Any:
        return self.inner.run(call, cancelled)

    def reset(self) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset()

    def __repr__(self) -> str:
        return repr(self.inner)
