"""CPU threads for forward passes: the cores this process may use, and the thread counts set while requests run.

torch's intra-op count is process-wide; a llama.cpp server keeps its own count for passes of 2+ tokens (its
one-token passes keep one thread: exactness, :mod:`specpar.backends.llama.settings`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from contextlib import contextmanager

from specpar.core.model import as_model


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def pass_threads(cores: int, units: int, busy: int, cpus_per_server: float | None = None) -> int:
    """The threads an engine gives each forward pass, so that the servers running at once share ``cores``: on Ray
    (``cpus_per_server`` given) each actor's CPU bundle; with ``units`` > 1 processing units one unit's share;
    with one unit, a share for each of the ``busy`` servers that run at once (:func:`busy_servers`)."""
    if cpus_per_server is not None:
        return max(1, int(cpus_per_server))
    if units > 1:
        return max(1, cores // units)
    return max(1, cores // max(1, busy))


def busy_servers(algorithm: str, cpu_servers: int) -> int:
    """The servers whose passes share the cores at once in a request of ``algorithm`` on one unit: DSI's
    ``cpu_servers`` (its target servers and its drafter's), one for the others (they run one server at a time)."""
    return cpu_servers if algorithm in ("dsi", "hsd-sp") else 1


def model_uses_torch(model) -> bool:
    """Whether ``model`` computes with torch (a transformers model: its thread count is torch's, process-wide)."""
    return as_model(model).kind == "transformers"


class SharedThreads:
    """The CPU threads of a forward pass, set while any request of an engine runs and restored when the last ends:
    torch's (process-wide) when ``torch`` (never imported otherwise), and each of ``servers``' ``set_batch_threads``
    (llama.cpp's: its passes of 2+ tokens)."""

    def __init__(self, torch: bool, servers: Sequence = ()):
        self._torch = torch
        self._servers = list(servers)
        self._lock = threading.Lock()
        self._count = 0
        self._before: tuple = (None, [])

    @contextmanager
    def __call__(self, n: int):
        with self._lock:
            if self._count == 0:
                self._before = self._set(n)
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                if self._count == 0:
                    self._restore(*self._before)

    def _set(self, n: int) -> tuple:
        """Set ``n`` threads; returns what was set before (torch's count or None, each server's count)."""
        return _torch_threads(n) if self._torch else None, [s.set_batch_threads(n) for s in self._servers]

    def _restore(self, torch_before, server_before) -> None:
        if torch_before is not None:
            _torch_threads(torch_before)
        for s, n in zip(self._servers, server_before):
            s.set_batch_threads(n)


def _torch_threads(n: int) -> int:
    """Set torch's intra-op thread count (process-wide) to ``n``; returns the count before."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    return before
