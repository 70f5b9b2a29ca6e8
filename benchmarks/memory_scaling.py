"""Memory against generation length: peak RSS of one virtual-clock DSI run at N = 1k, 10k, 100k, 1M.

Each N runs in its own fresh Python process (peak RSS is a per-process high-water mark), with the
simulated pair of `specpar simulate`'s defaults (target 30 ms, drafter c = 0.1, a = 0.8, SP = 7,
lookahead 2). Printed: peak RSS, the growth over the process that only imports specpar, per output
token, and the CPU time. Goal (issue 14): N = 100k under 1 GB, growth about linear in N.

    .venv/bin/python benchmarks/memory_scaling.py [--sizes 1000,10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

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


def measure(n: int) -> dict:
    """One run in a fresh process: its peak and import-only RSS (KiB, Linux ru_maxrss) and CPU seconds."""
    done = subprocess.run([sys.executable, "-c", RUN, str(n)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="comma-separated output lengths N")
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    print(f"{'N':>9} {'tasks':>9} {'peak RSS MB':>12} {'growth MB':>10} {'bytes/token':>12} {'CPU s':>7}")
    for n in sizes:
        r = measure(n)
        growth_kb = r["peak_kb"] - r["base_kb"]
        print(
            f"{n:>9,} {r['tasks']:>9,} {r['peak_kb'] / 1024:>12.1f} {growth_kb / 1024:>10.1f} "
            f"{growth_kb * 1024 / r['tokens']:>12,.0f} {r['cpu_s']:>7.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
