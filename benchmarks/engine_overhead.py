"""The Engine's overhead per request over the bare algorithm call on the same servers (simulated models).

Each request: DSI (or SI / non-SI) on the virtual clock, simulated target (V = 32) and drafter (a = 0.8),
lookahead 5, SP = 4, N tokens. The same request runs, interleaved, as

* bare: :func:`specpar.spec.registry.run_generation` on the engine's own pools (the algorithm on a runtime, nothing else);
* engine: ``Engine.generate`` (parameters checked, prompt and stop conditions, the lock, logging checks);
* generate(): the one-call convenience (a one-off Engine: fresh servers each call);

and must return the same tokens. The virtual clock makes every request pure CPU work (no sleeps), the
harshest case for a fixed per-request cost. The overhead is the median of paired differences (each engine
call minus the bare call just before it), over the median bare time. Goal: < 2%.

    .venv/bin/python benchmarks/engine_overhead.py [--requests 300] [-N 200] [--algo dsi]
"""

from __future__ import annotations

import argparse
import statistics
import time

from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel, generate
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.spec.registry import run_generation


def timed(fn):
    """(CPU seconds of this thread, result) of one call: time the process spends descheduled on a busy
    machine is not counted (everything runs on this thread on the virtual clock)."""
    t0 = time.thread_time()
    out = fn()
    return time.thread_time() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300, help="requests per arm")
    ap.add_argument("-N", type=int, default=200)
    ap.add_argument("--algo", default="dsi", choices=("nonsi", "si", "dsi"))
    args = ap.parse_args()
    target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(20.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=2)
    params = SamplingParams(temperature=0, max_tokens=args.N)
    prompt = [1, 2, 3]
    engine = Engine(target, drafter, sp_degree=4)

    spec, virtual = SpeculativeConfig(algorithm=args.algo, lookahead=5, sp_degree=4), RuntimeConfig(name="virtual")

    def bare():
        return run_generation(prompt, engine.targets, engine.drafters, spec, virtual, params.decoding(), args.N)

    def via_engine():
        return engine.generate(prompt, params, algorithm=args.algo, lookahead=5)

    def one_off():
        return generate(prompt, target, drafter, algorithm=args.algo, max_new_tokens=args.N, lookahead=5, sp_degree=4)

    want = target.greedy_tokens(prompt, args.N)
    arms = {"bare": bare, "engine": via_engine, "generate()": one_off}
    times = {name: [] for name in arms}
    print(
        f"{args.algo}, N = {args.N}, virtual clock: {args.requests} requests per arm, the arms interleaved call by call"
    )
    for _ in range(args.requests):
        for name, fn in arms.items():
            seconds, out = timed(fn)
            assert out.tokens == want
            times[name].append(seconds)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    # paired: each engine call minus the bare call just before it (drifts in machine load cancel out)
    diff_ms = statistics.median(e - b for e, b in zip(times["engine"], times["bare"])) * 1e3
    over = diff_ms / med["bare"]
    print(
        f"median ms per request: bare {med['bare']:.3f}, engine {med['engine']:.3f}, generate() {med['generate()']:.3f}"
    )
    print(
        f"engine overhead (median paired difference) {diff_ms * 1e3:+.1f} us per request = {over:+.2%}; goal < 2%: "
        f"{'MET' if over < 0.02 else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
