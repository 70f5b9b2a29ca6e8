"""The interfaces' view of an :class:`~specpar.entrypoints.engine.Engine` over real models (kept for the commands that
load the pair once and compare algorithms on the same servers); the engine owns loading, placement and
requests.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpar.core.params import SamplingParams
from specpar.core.results import GenerationResult
from specpar.entrypoints.engine import Engine, cpu_cores, load_pair, overhead, torch_threads

__all__ = ["Servers", "cpu_cores", "load_pair", "overhead", "torch_threads"]


class Servers(Engine):
    """An Engine on sp_degree target servers and one drafter server; ``generate`` takes the commands'
    positional arguments. ``result.overhead`` says how much time no forward pass ran (None on Ray, whose forward
    passes run in the actors).

    runtime: "threads" (servers in this process) or "ray" (each server an actor that builds its own copy of its
        model, kept for every generation; runtime_options: RayRuntime's, e.g. cpus_per_server).
    """

    def __init__(
        self,
        target,
        drafter,
        sp_degree: int = 1,
        devices: Sequence[str] = ("cpu",),
        max_tokens: int = 2048,
        runtime: str = "threads",
        runtime_options: dict | None = None,
    ):
        super().__init__(
            target,
            drafter,
            sp_degree=sp_degree,
            devices=devices,
            max_tokens=max_tokens,
            runtime=runtime,
            runtime_options=runtime_options,
        )

    def reset(self) -> None:
        """Empty every server's cache (the next generation starts with a prefill), the Ray actors' too."""
        for s in self.all:
            s.reset()
        if self.runtime == "ray":
            from specpar.runtimes.ray_actors import reset_kept

            reset_kept(self.all)

    @property
    def target(self):
        return self.target_model

    @property
    def drafter(self):
        return self.drafter_model

    def generate(
        self,
        prompt: Sequence[int],
        algorithm: str,
        max_new_tokens: int = 64,
        lookahead: int | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        stream=None,
        params: SamplingParams | None = None,
        tree=None,
    ) -> GenerationResult:
        """One generation; ``params`` when given replaces max_new_tokens, temperature and seed; tree: a token tree
        configuration <k1, ..., km> for SI and DSI (see specpar.entrypoints.api.generate)."""
        params = params or SamplingParams(temperature=temperature, seed=seed, max_tokens=max_new_tokens)
        return super().generate(
            list(prompt), params, algorithm=algorithm, lookahead=lookahead, stream=stream, tree=tree
        )
