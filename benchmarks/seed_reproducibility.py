"""How often sampled DSI on threads gives other tokens than the virtual clock for the same seed, 8 runs at once.

The audit's tight latencies (target TTFT 6 ms / TPOT 2 ms, drafter 0.2 ms, a = 0.8, V = 8, SP = 3, k = 2, N = 24,
temperature 1). The arms are the couplings: with rejection sampling a position is decided by a draft's test or by
the target's own sample, whichever reaches it first, so threads differ; with coupling="gumbel" they must not.

    python -m benchmarks seed_reproducibility [--seeds 40]
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from benchmarks.runner import Arm, Benchmark
from specpar import LatencyProfile, SimulatedModel, generate


def options(p) -> None:
    p.add_argument("--seeds", type=int, default=40, help="runs per coupling (default 40)")


def arms(args) -> list[Arm]:
    return [Arm(coupling, {"coupling": coupling}) for coupling in ("rejection", "gumbel")]


def run(seed: int, runtime: str, coupling: str) -> list[int]:
    target = SimulatedModel(8, seed=5, latency=LatencyProfile(ttft_ms=6.0, tpot_ms=2.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(0.2), seed=6)
    kw = dict(algorithm="dsi", max_tokens=24, lookahead=2, sp_degree=3, temperature=1.0, coupling=coupling)
    return generate([1, 2], target, drafter, seed=seed, runtime=runtime, **kw).tokens


def measure(arm: Arm, args, r: int) -> dict:
    coupling = arm.settings["coupling"]
    with ThreadPoolExecutor(8) as pool:
        threads = list(pool.map(lambda s: run(s, "threads", coupling), range(args.seeds)))
    differ = sum(t != run(s, "virtual", coupling) for s, t in enumerate(threads))
    return {"seeds": args.seeds, "differ_from_virtual": differ}


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"seeds": "seeds run, 8 at once on threads", "differ_from_virtual": "seeds whose tokens differ"},
    arms=arms,
    measure=measure,
    options=options,
)
