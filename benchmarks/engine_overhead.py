"""The Engine's overhead per request over the bare algorithm call on the same servers (simulated models).

Each request: DSI (or SI / non-SI) on the virtual clock, simulated target (V = 32) and drafter (a = 0.8),
lookahead 5, SP = 4, N tokens. The same request runs, interleaved, as

* bare: :func:`specpar.algorithms.registry.run_generation` on the engine's own pools (the algorithm on a runtime, nothing else);
* engine: ``Engine.generate`` (parameters checked, prompt and stop conditions, the lock, logging checks);
* generate(): the one-call convenience (a one-off Engine: fresh servers each call);

and must return the same tokens. The virtual clock makes every request pure CPU work (no sleeps), the
harshest case for a fixed per-request cost. The overhead is the median of paired differences (each engine
call minus the bare call just before it), over the median bare time. Goal: < 2%.

    .venv/bin/python benchmarks/engine_overhead.py [--requests 300] [-N 200] [--algo dsi]

``--instructions`` counts instead of timing, with valgrind's callgrind (the same on every run, so two checkouts
compare exactly, whatever the machine's load): per checkout (``--src``, repeatable: side by side), the
instructions per request of the engine arm and of the bare arm, each the steady-state slope (a process making
2R requests minus one making R, after the same warm-up, over R), and their difference, the engine's own cost:

    git worktree add /tmp/base 3b7a143
    .venv/bin/python benchmarks/engine_overhead.py --instructions --src /tmp/base --src . -N 20
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel, generate
from specpar.algorithms.registry import run_generation
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.query import Query
from virtual_instructions import callgrind_instructions


def timed(fn):
    """(CPU seconds of this thread, result) of one call: time the process spends descheduled on a busy
    machine is not counted (everything runs on this thread on the virtual clock)."""
    t0 = time.thread_time()
    out = fn()
    return time.thread_time() - t0, out


# One process of the --instructions mode: the arm's requests after a warm-up, the checkout's code first on the path.
WORKLOAD = """
import gc, sys
sys.path.insert(0, {src!r})
gc.disable()
from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.algorithms.registry import run_generation
target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(20.0))
drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=2)
params = SamplingParams(temperature=0, max_tokens={n})
engine = Engine(target, drafter, sp_degree=4)
spec, virtual = SpeculativeConfig(algorithm={algo!r}, lookahead=5, sp_degree=4), RuntimeConfig(name="virtual")
want = target.greedy_tokens([1, 2, 3], {n})
def engine_arm():
    return engine.generate([1, 2, 3], params, algorithm={algo!r}, lookahead=5)
try:  # since issue 31 the runner takes a Query
    from specpar.core.query import Query
    def bare_arm():
        return run_generation(Query([1, 2, 3], {n}, params.decoding()), engine.targets, engine.drafters, spec, virtual)
except ImportError:
    def bare_arm():
        return run_generation([1, 2, 3], engine.targets, engine.drafters, spec, virtual, params.decoding(), {n})
arm = {arm}_arm
for _ in range({warmup} + {requests}):
    assert arm().tokens == want
"""


def instructions(src: Path, arm: str, requests: int, args) -> int:
    """Instructions callgrind counts for one process making ``requests`` requests of ``arm`` after the warm-up."""
    code = WORKLOAD.format(src=str(src / "src"), n=args.N, algo=args.algo, arm=arm, warmup=args.warmup,
                           requests=requests)  # fmt: skip
    return callgrind_instructions(code, src)


def count_instructions(args) -> None:
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    trees = [p.resolve() for p in (args.src or [Path(__file__).resolve().parent.parent])]
    r = args.requests
    print(f"{args.algo}, N = {args.N}, virtual clock, gc off: instructions per request (slope over {r} requests "
          f"after {args.warmup})")  # fmt: skip
    rows = []
    for tree in trees:
        per = {arm: (instructions(tree, arm, 2 * r, args) - instructions(tree, arm, r, args)) / r
               for arm in ("engine", "bare")}  # fmt: skip
        rows.append(per)
        print(f"{str(tree):<40} engine {per['engine']:>12,.0f}  bare {per['bare']:>12,.0f}  "
              f"engine - bare {per['engine'] - per['bare']:>10,.0f}", flush=True)  # fmt: skip
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(f"last / first: engine {last['engine'] / first['engine']:.4f}, bare {last['bare'] / first['bare']:.4f}, "
              f"engine - bare {(last['engine'] - last['bare']) / (first['engine'] - first['bare']):.4f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=None, help="requests per arm (default 300; --instructions 50)")
    ap.add_argument("-N", type=int, default=200)
    ap.add_argument("--algo", default="dsi", choices=("nonsi", "si", "dsi"))
    ap.add_argument("--instructions", action="store_true", help="count instructions with callgrind (see above)")
    ap.add_argument("--src", action="append", type=Path, help="--instructions: a checkout (repeat: side by side)")
    ap.add_argument("--warmup", type=int, default=20, help="--instructions: requests before those counted")
    args = ap.parse_args()
    if args.instructions:
        args.requests = args.requests or 50
        return count_instructions(args)
    args.requests = args.requests or 300
    target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(20.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=2)
    params = SamplingParams(temperature=0, max_tokens=args.N)
    prompt = [1, 2, 3]
    engine = Engine(target, drafter, sp_degree=4)

    spec, virtual = SpeculativeConfig(algorithm=args.algo, lookahead=5, sp_degree=4), RuntimeConfig(name="virtual")

    def bare():
        return run_generation(Query(prompt, args.N, params.decoding()), engine.targets, engine.drafters, spec, virtual)

    def via_engine():
        return engine.generate(prompt, params, algorithm=args.algo, lookahead=5)

    def one_off():
        return generate(prompt, target, drafter, algorithm=args.algo, max_tokens=args.N, lookahead=5, sp_degree=4)

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
