"""Virtual-clock speed: simulated DSI output tokens per second on one core (goal >= 100,000).

Runs DSI on the discrete-event virtual clock for a few settings and prints the
output tokens per second of CPU time, and how many tasks and drafted tokens the
simulation processed per output token (DSI drafts far ahead; a rejection
discards what was drafted after it, so the work per output token grows as
c falls and SP rises).

    .venv/bin/python benchmarks/virtual_throughput.py
"""

from __future__ import annotations

import time

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.algorithms.dsi import dsi
from specpar.algorithms.generation import Generation
from specpar.core.calls import Draft, Proposal, Scores
from specpar.core.config import SpeculativeConfig
from specpar.core.query import Query
from specpar.runtimes import Pool, VirtualRuntime

K5 = SpeculativeConfig(lookahead=5)


def run_dsi(rt, target: Pool, drafter: Pool, prompt: list[int], n: int):
    """DSI with lookahead 5 on ``rt``, called as the runner calls it."""
    return dsi(Generation(Query(prompt, n), rt), {"drafter": drafter, "target": target}, K5)


SETTINGS = [
    # (label, target ms, drafter ms, a, lookahead, SP, N)
    ("issue bench: 20 ms / 1 ms, a=0.8, k=5, SP=4", 20.0, 1.0, 0.8, 5, 4, 200),
    ("paper grid cell: c=0.1, a=0.8, Eq.1 k=2, SP=7", 1.0, 0.1, 0.8, 2, 7, 200),
    ("high acceptance: c=0.1, a=0.95, k=2, SP=7", 1.0, 0.1, 0.95, 2, 7, 200),
    ("fast drafter: c=0.05, a=0.8, k=3, SP=7, N=1000", 1.0, 0.05, 0.8, 3, 7, 1000),
]


def main() -> None:
    print(f"{'setting':<50} {'tokens/s':>10} {'tasks/token':>12} {'drafted/token':>14}")
    for label, t_ms, d_ms, a, k, sp, n in SETTINGS:
        tokens = tasks = drafted = 0
        cpu, seed = 0.0, 0
        while cpu < 3.0:
            target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(t_ms))
            drafter = target.drafter(a, LatencyProfile.uniform(d_ms), seed=seed + 1)
            t0 = time.process_time()
            out = generate([seed % 32], target, drafter, algorithm="dsi", max_tokens=n, lookahead=k, sp_degree=sp)
            cpu += time.process_time() - t0  # generate() alone: building the timeline below is not counted
            tokens += len(out.tokens)
            tasks += len(out.timeline)
            drafted += out.drafter_forwards
            seed += 1
        print(f"{label:<50} {tokens / cpu:>10,.0f} {tasks / tokens:>12.2f} {drafted / tokens:>14.2f}")


class IdleServer:
    """Same durations as the issue setting's servers, drafts right 80% of the time by position, no model work."""

    def __init__(self, name: str, ms: float):
        self.name, self.ms = name, ms

    def cached_len(self, context) -> int:
        return 0  # no cache: every replica is as good as another

    def duration_ms(self, call) -> float:
        return self.ms * (call.k if type(call) is Draft else 1)

    def compute(self, call):
        n = len(call.context)
        if type(call) is Draft:
            return Proposal([0 if hash((n + i, 1)) % 1000 < 800 else 1 for i in range(call.k)])
        return Scores(call.start, [0] * (call.n_drafts + 1))


def engine_floor() -> None:
    """The runtime and DSI scheduler alone: the most any simulated model could reach."""
    tokens, seed, t0 = 0, 0, time.process_time()
    while time.process_time() - t0 < 2.0:
        target = Pool([IdleServer(f"target{i}", 20.0) for i in range(4)], "target")
        drafter = Pool([IdleServer("drafter0", 1.0)], "drafter")
        with VirtualRuntime([drafter, target]) as rt:  # as generate() runs it
            tokens += len(run_dsi(rt, target, drafter, [seed % 32], 200).tokens)
        seed += 1
    print(f"{'engine alone (servers doing no work), issue setting':<50} {tokens / (time.process_time() - t0):>10,.0f}")


def collector_share() -> None:
    """What pausing the cyclic GC during a run (VirtualRuntime.__enter__) is worth: the same runs, side by side."""
    for n in (200, 1000):
        cpu = {True: 0.0, False: 0.0}
        for seed in range(30 if n == 200 else 8):
            for paused in (True, False):
                target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(20.0))
                drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=seed + 1)
                pools = [
                    Pool([drafter.server("drafter0")], "drafter"),
                    Pool([target.server(f"target{i}") for i in range(4)], "target"),
                ]
                t0 = time.process_time()
                rt = VirtualRuntime(pools)
                if paused:
                    with rt:
                        run_dsi(rt, pools[1], pools[0], [seed % 32], n)
                else:  # not entered: the collector keeps running
                    run_dsi(rt, pools[1], pools[0], [seed % 32], n)
                cpu[paused] += time.process_time() - t0
        print(f"{f'issue setting, N={n}: collector paused / running':<50} {cpu[False] / cpu[True]:>9.2f}x")


if __name__ == "__main__":
    main()
    engine_floor()
    collector_share()
