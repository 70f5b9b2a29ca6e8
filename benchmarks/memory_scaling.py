"""Memory against generation length: peak RSS of one virtual-clock DSI run at N = 1k, 10k, 100k, 1M.

Each N (an arm) runs in its own fresh Python process (peak RSS is a per-process high-water mark), with the
simulated pair of `specpar simulate`'s defaults (target 30 ms, drafter c = 0.1, a = 0.8, SP = 7, lookahead 2).
Reported: peak RSS, the growth over the process that only imports specpar, per output token, and the CPU time.
Goal (issue 14): N = 100k under 1 GB, growth about linear in N.

    python -m benchmarks memory_scaling [--sizes 1000,10000,100000,1000000]
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.runner import Arm, Benchmark

RUN = """
import json, resource, sys, time
from specpar import LatencyProfile, SimulatedModel, generate
n = int(sys.argv[1])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
target = SimulatedModel(32, seed=0, latency=LatencyProfile.uniform(30.0))
drafter = target.drafter(0.8, LatencyProfile.uniform(3.0), seed=1)
t0 = time.process_time()
out = generate([1, 2, 3], target, drafter, algorithm="dsi", max_tokens=n, lookahead=2, sp_degree=7)
cpu = time.process_time() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"n": n, "tokens": len(out.tokens), "tasks": len(out.timeline), "base_kb": base,
                  "peak_kb": peak, "cpu_s": cpu}))
"""


def options(p) -> None:
    p.add_argument("--sizes", default="1000,10000,100000,1000000", help="comma-separated output lengths N")


def arms(args) -> list[Arm]:
    return [Arm(f"N={int(n):,}", {"max_tokens": int(n)}) for n in args.sizes.split(",")]


def measure(arm: Arm, args, r: int) -> dict:
    """One run in a fresh process (it inherits PYTHONPATH): its peak and import-only RSS (KiB, Linux ru_maxrss)."""
    done = subprocess.run([sys.executable, "-c", RUN, str(arm.settings["max_tokens"])], capture_output=True,
                          text=True, check=True)  # fmt: skip
    run = json.loads(done.stdout.strip().splitlines()[-1])
    growth_kb = run["peak_kb"] - run["base_kb"]
    return {
        "tasks": run["tasks"],
        "peak_rss_mb": run["peak_kb"] / 1024,
        "growth_mb": growth_kb / 1024,
        "bytes_per_token": growth_kb * 1024 / run["tokens"],
        "cpu_s": run["cpu_s"],
    }


def summarize(results, args) -> dict:
    at = {a.arm.settings["max_tokens"]: a.figures for a in results}
    if 100_000 not in at:
        return {}
    return {"goal": f"N = 100k under 1 GB: {'met' if at[100_000]['peak_rss_mb'] < 1024 else 'not met'}"}


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "tasks": "server calls of the run",
        "peak_rss_mb": "peak resident memory of the process, MB",
        "growth_mb": "peak over the process that only imports specpar, MB",
        "bytes_per_token": "growth per output token, bytes",
        "cpu_s": "CPU seconds of generate()",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
)
