"""Real models loaded once and served: the model pair, pools of servers on devices, torch threads, overhead.

The interfaces (``specpar generate | bench | profile``) load the pair once and run
every generation on the same servers (their weights and KV caches are reused),
on the thread runtime, through :func:`specpar.api.generate`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from contextlib import contextmanager

from specpar.api import check_context_window, generate
from specpar.errors import ConfigError
from specpar.results import GenerationResult
from specpar.runtimes import Pool


def load_pair(
    target: str | None = None,
    drafter: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    progress: bool = True,
    target_device: str | None = None,
):
    """(target, drafter) TransformersModels: the default pair when neither is given, else the two given;
    the drafter is loaded on ``device``, the target on ``target_device`` (default: the same)."""
    from specpar.models.transformers_model import TransformersModel, check_same_tokenizer
    from specpar.models.weights import load_default_pair

    if target is None and drafter is None:
        if dtype not in (None, "float32"):
            raise ConfigError("the default pair is converted to float32; give --target/--drafter for another dtype")
        return load_default_pair(device, progress, target_device)
    if target is None or drafter is None:
        raise ConfigError("give both --target and --drafter (or neither, for the default pair)")
    t = TransformersModel(target, device=target_device or device, dtype=dtype)
    d = TransformersModel(drafter, device=device, dtype=dtype)
    check_same_tokenizer(t, d)
    return t, d


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Servers:
    """sp_degree target servers and one drafter server, loaded once, for many generations.

    devices: where servers go: the drafter on the first, the targets round-robin over the
        others (over all of them when there is one device). Servers of one model on one device
        share its weights; each has its own KV cache.
    max_tokens: the longest sequence (prompt + new tokens) a server will hold, for the memory check.
    """

    def __init__(self, target, drafter, sp_degree: int = 1, devices: Sequence[str] = ("cpu",), max_tokens: int = 2048):
        if sp_degree < 1:
            raise ConfigError(f"sp_degree must be >= 1, got {sp_degree}")
        devices = list(devices)
        target_devices = devices[1:] if len(devices) > 1 else devices
        self.target, self.drafter = target, drafter
        self.targets = Pool(target.servers(sp_degree, target_devices, "target", max_tokens), "target")
        self.drafters = Pool(drafter.servers(1, devices[:1], "drafter", max_tokens), "drafter")

    @property
    def all(self):
        return self.targets.servers + self.drafters.servers

    def threads_for(self, algorithm: str) -> int:
        """torch threads so that the CPU servers running at once share the cores without oversubscribing them."""
        cpu = [s for s in self.all if s.device == "cpu"]
        busy = len(cpu) if algorithm == "dsi" else 1  # non-SI and SI run one server at a time
        return max(1, cpu_cores() // max(1, busy))

    def check_length(self, prompt_len: int, max_new_tokens: int) -> None:
        check_context_window(prompt_len, max_new_tokens, self.target, self.drafter)

    def generate(
        self,
        prompt: Sequence[int],
        algorithm: str,
        max_new_tokens: int,
        lookahead: int | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        stream=None,
        tree=None,
    ) -> GenerationResult:
        """One generation on these servers (thread runtime); ``result.overhead`` says how much time no forward pass ran.

        tree: a token tree configuration <k1, ..., km> for SI and DSI (see specpar.api.generate)."""

        self.check_length(len(prompt), max_new_tokens)
        marks = [len(s.forward_log) for s in self.all]
        with torch_threads(self.threads_for(algorithm)):
            t0 = time.perf_counter()
            result = generate(
                list(prompt),
                self.targets,
                self.drafters,
                algorithm=algorithm,
                max_new_tokens=max_new_tokens,
                lookahead=lookahead,
                sp_degree=len(self.targets),
                temperature=temperature,
                seed=seed,
                runtime="threads",
                stream=stream,
                tree=tree,
            )
            t1 = time.perf_counter()
        intervals = [iv for s, m in zip(self.all, marks) for iv in s.forward_log[m:]]
        result.overhead = overhead(intervals, t0, t1)
        return result


@contextmanager
def torch_threads(n: int):
    """torch's intra-op thread count set to ``n`` (process-wide) for the block, then restored."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def overhead(intervals: list[tuple[float, float]], t0: float, t1: float) -> dict:
    """Time in [t0, t1] during which no forward pass ran, in ms and as a fraction of the wall time."""
    busy, end = 0.0, t0
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, t1)
        if b > a:
            busy += b - a
            end = b
    wall = t1 - t0
    outside = max(0.0, wall - busy)
    return {
        "wall_ms": wall * 1e3,
        "outside_forward_ms": outside * 1e3,
        "outside_forward_fraction": outside / wall if wall else 0.0,
    }
