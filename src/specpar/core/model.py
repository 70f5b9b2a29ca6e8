"""The backend surface: what every model and every server is, as the layers above read them.

Every backend declares these types (``class SimulatedLM(Model)``, ``class CachedServer(Server)``):
its class sets what it has, and the defaults here stand for the rest, so a reader asks ``model.context_window`` or
``server.latency``, never whether there is one. An object that only looks like a model (anything with
``server(name)``) or a server is taken through :func:`as_model` and :func:`as_server`, the one place that asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from specpar.core.latency import LatencyProfile

REAL_KINDS = ("transformers", "llama")  # backends whose servers run real forward passes


class Server(Protocol):
    """One instance of a model with its own cache: what a runtime runs calls on (:mod:`specpar.runtimes`).

    name: its name in a generation's pools and timeline. model: the model it was made from (None: a server made of
        others, its ``parts``). latency: its LatencyProfile (the virtual clock's durations, the real runtimes' stall
        limits; None: unknown). device: where it computes ("cpu", "cuda:0"; None: a simulation, on no device).
    parts: the servers it is made of (a merge of drafters, HSD's levels): a runtime claims them with it.
    forward_log: a real server's record of its latest forward passes (None: a simulation keeps none).
    cached_len(context): how many leading tokens of ``context`` its cache holds (pools choose a replica by it).
    duration_ms(call): how long ``call`` takes from its current state (virtual clock). compute(call): the result
        at once (virtual clock). run(call, cancelled): the result in real time; None once ``cancelled`` is set.
    reset(): forget its cache. set_batch_threads(n): llama.cpp's threads for the passes its mode runs on several
        (exact mode: passes of 2+ tokens; fast mode: every pass), the count before (None: no such setting). remote_spec(): how a Ray actor builds it (None: it cannot run on Ray).
    close(): free what it holds (its cache's memory); it runs no more calls after.
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

    name: for messages and logs (None: unnamed, as simulated models are). kind: "simulated", "transformers", "llama" (or "other": a model known only by its
        ``server``); ``real`` when its servers run forward passes. vocab_size: the width of its rows (a drafter
        fitted to its target has the target's; None: unknown). max_token_id: the largest id a prompt may hold (None: unchecked).
    context_window: the longest sequence it takes (None: no limit). latency: its LatencyProfile (None: unknown, as a
        real model's until measured). tokenizer: text to ids and back (None: token ids only), with ``encode`` and
        ``decode``. device: where it computes (None: a simulation). generation_config: transformers' (its eos ids).
    path: the file or directory it was loaded from (None: built in memory, or simulated). backend_settings(): how
        its backend computes, as a profile's key records it. exact_mode: the llama.cpp mode it runs in (True:
        the exact settings, False: the fast ones); None: a backend without modes.
    acceptance_rate: a simulated drafter's, known by construction (None: unknown).
    token_count: the ids that are real tokens (None: its tokenizer's, or unknown); native_rows: its own output rows
        before any fitting (None: vocab_size). with_rows(n): a copy whose servers return rows of width n (None: it
        cannot be fitted to another width, :mod:`specpar.backends.vocabulary`).
    server(name): a new server of it (its own cache). servers(n, devices, prefix, max_tokens): ``n`` of them, named
        prefix0, prefix1, ... (real models place them on ``devices`` and check that they fit ``max_tokens`` each).
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


MODEL_FIELDS = ("name", "kind", "vocab_size", "max_token_id", "context_window", "latency", "tokenizer", "device",
                "generation_config", "path", "exact_mode", "acceptance_rate", "token_count", "native_rows",
                "with_rows")  # fmt: skip
SERVER_FIELDS = ("model", "latency", "device", "parts", "forward_log")


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
