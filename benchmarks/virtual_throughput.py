"""The virtual clock's speed: simulated DSI output tokens per CPU second (goal >= 100,000 at the issue setting).

Each setting arm runs DSI on the discrete-event virtual clock for about 3 s of CPU time and reports the output
tokens per second of CPU time spent in generate(), and the tasks and drafted tokens simulated per output token
(DSI drafts far ahead; a rejection discards what was drafted after it, so the work per output token grows as c
falls and SP rises). The "engine alone" arm runs the runtime and the DSI scheduler with servers that do no work:
the most any simulated model could reach. The "collector" arms run the issue setting with the cyclic garbage
collector paused during the run (as generate() runs it) and left running: their time ratio is what the pause is
worth.

    python -m benchmarks virtual_throughput
"""

from __future__ import annotations

import time

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate
from specpar.algorithms.dsi import dsi
from specpar.algorithms.generation import Generation
from specpar.core.calls import Draft, Proposal, Scores
from specpar.core.config import SpeculativeConfig
from specpar.core.model import Server
from specpar.core.query import Query
from specpar.runtimes import Pool, VirtualRuntime

K5 = SpeculativeConfig(lookahead=5)


def run_dsi(rt, target: Pool, drafter: Pool, prompt: list[int], n: int):
    """DSI with lookahead 5 on ``rt``, called as the runner calls it."""
    return dsi(Generation(Query(prompt, n), rt), {"drafter": drafter, "target": target}, K5)


SETTINGS = {  # label: (target ms, drafter ms, a, lookahead, SP, N)
    "issue: 20 ms / 1 ms, a=0.8, k=5, SP=4": (20.0, 1.0, 0.8, 5, 4, 200),
    "paper cell: c=0.1, a=0.8, k=2, SP=7": (1.0, 0.1, 0.8, 2, 7, 200),
    "high acceptance: c=0.1, a=0.95, k=2, SP=7": (1.0, 0.1, 0.95, 2, 7, 200),
    "fast drafter: c=0.05, a=0.8, k=3, SP=7, N=1000": (1.0, 0.05, 0.8, 3, 7, 1000),
}
CPU_SECONDS = 3.0


def arms(args) -> list[Arm]:
    keys = ("target_ms", "drafter_ms", "acceptance_rate", "lookahead", "sp_degree", "max_tokens")
    out = [Arm(label, dict(zip(keys, setting))) for label, setting in SETTINGS.items()]
    out.append(Arm("engine alone (servers doing no work), issue setting", {"kind": "engine"}))
    for n in (200, 1000):
        for paused in (True, False):
            state = "paused" if paused else "running"
            out.append(Arm(f"issue setting, N={n}, collector {state}", {"kind": "collector", "max_tokens": n,
                                                                       "paused": paused}))  # fmt: skip
    return out


def measure(arm: Arm, args, r: int) -> dict:
    kind = arm.settings.get("kind")
    if kind == "engine":
        return engine_floor()
    if kind == "collector":
        return collector(arm.settings["max_tokens"], arm.settings["paused"])
    t_ms, d_ms, a, k, sp, n = arm.settings.values()
    tokens = tasks = drafted = 0
    cpu, seed = 0.0, 0
    while cpu < CPU_SECONDS:
        target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(t_ms))
        drafter = target.drafter(a, LatencyProfile.uniform(d_ms), seed=seed + 1)
        t0 = time.process_time()
        out = generate([seed % 32], target, drafter, algorithm="dsi", max_tokens=n, lookahead=k, sp_degree=sp)
        cpu += time.process_time() - t0  # generate() alone: building the timeline below is not counted
        tokens += len(out.tokens)
        tasks += len(out.timeline)
        drafted += out.drafter_forwards
        seed += 1
    return {"tokens_per_cpu_s": tokens / cpu, "tasks_per_token": tasks / tokens, "drafted_per_token": drafted / tokens}


class IdleServer(Server):
    """The issue setting's durations, drafts right 80% of the time by position, no model work."""

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


def engine_floor() -> dict:
    """The runtime and DSI scheduler alone, for about 2 s of CPU."""
    tokens, seed, t0 = 0, 0, time.process_time()
    while time.process_time() - t0 < 2.0:
        target = Pool([IdleServer(f"target{i}", 20.0) for i in range(4)], "target")
        drafter = Pool([IdleServer("drafter0", 1.0)], "drafter")
        with VirtualRuntime([drafter, target]) as rt:  # as generate() runs it
            tokens += len(run_dsi(rt, target, drafter, [seed % 32], 200).tokens)
        seed += 1
    return {"tokens_per_cpu_s": tokens / (time.process_time() - t0)}


def collector(n: int, paused: bool) -> dict:
    """CPU seconds of a fixed set of issue-setting runs, the cyclic collector paused (VirtualRuntime.__enter__) or
    left running (the runtime not entered)."""
    cpu = 0.0
    for seed in range(30 if n == 200 else 8):
        target = SimulatedModel(32, seed=seed, latency=LatencyProfile.uniform(20.0))
        drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=seed + 1)
        pools = [Pool([drafter.server("drafter0")], "drafter"), Pool([target.server(f"target{i}") for i in range(4)],
                                                                       "target")]  # fmt: skip
        t0 = time.process_time()
        rt = VirtualRuntime(pools)
        if paused:
            with rt:
                run_dsi(rt, pools[1], pools[0], [seed % 32], n)
        else:
            run_dsi(rt, pools[1], pools[0], [seed % 32], n)
        cpu += time.process_time() - t0
    return {"cpu_s": cpu}


def summarize(results, args) -> dict:
    cpu = {(a.arm.settings["max_tokens"], a.arm.settings["paused"]): a.figures["cpu_s"] for a in results
           if a.arm.settings.get("kind") == "collector"}  # fmt: skip
    issue = results[0].figures["tokens_per_cpu_s"]
    return {
        **{f"collector running / paused, N={n}": cpu[n, False] / cpu[n, True] for n in (200, 1000)},
        "goal": f">= 100,000 tokens/s at the issue setting: {'met' if issue >= 100_000 else 'not met'} ({issue:,.0f})",
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "tokens_per_cpu_s": "DSI output tokens per CPU second",
        "tasks_per_token": "server calls simulated per output token",
        "drafted_per_token": "drafter forward passes per output token",
        "cpu_s": "CPU seconds of the collector arms' fixed set of runs",
    },
    arms=arms,
    measure=measure,
    summarize=summarize,
)
