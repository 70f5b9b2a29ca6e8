"""The Engine's overhead per request over the bare algorithm call on the same servers (simulated models).

Each request: DSI (or SI / non-SI) on the virtual clock, simulated target (V = 32) and drafter (a = 0.8),
lookahead 5, SP = 4, N tokens. The same request runs, interleaved, as

* bare: :func:`specpar.algorithms.registry.run_generation` on the engine's own pools (the algorithm on a runtime, nothing else);
* engine: ``Engine.generate`` (parameters checked, prompt and stop conditions, the lock, logging checks);
* generate(): the one-call convenience (a one-off Engine: fresh servers each call);

and must return the same tokens. The virtual clock makes every request pure CPU work (no sleeps), the
harshest case for a fixed per-request cost. Round r is request r of each arm; the overhead is the median of paired
differences (each round's engine call minus its bare call), over the median bare time. Goal: < 2%.

    python -m benchmarks engine_overhead [--rounds 300] [-N 200] [--algo dsi]

``--instructions`` counts instead of timing, with valgrind's callgrind (the same on every run, so two checkouts
compare exactly, whatever the machine's load): per checkout (``--src``, repeatable: side by side), the
instructions per request of the engine arm and of the bare arm (the arms: a checkout and an arm each), each the
steady-state slope (a process making 2R requests minus one making R, after the same warm-up, over R), and their
difference, the engine's own cost:

    git worktree add /tmp/base 3b7a143
    python -m benchmarks engine_overhead --instructions --src /tmp/base --src . -N 20
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark
from benchmarks.virtual_instructions import callgrind_instructions
from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel, generate
from specpar.algorithms.registry import run_generation
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.query import Query


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


def options(p) -> None:
    p.add_argument("-N", type=int, default=200, help="tokens per request (default 200)")
    p.add_argument("--algo", default="dsi", choices=("nonsi", "si", "dsi"), help="the algorithm (default dsi)")
    p.add_argument("--instructions", action="store_true", help="count instructions with callgrind (see above)")
    p.add_argument("--src", action="append", type=Path, help="--instructions: a checkout (repeat: side by side)")
    p.add_argument("--requests", type=int, default=50, help="--instructions: requests counted (default 50)")
    p.add_argument("--warmup", type=int, default=20, help="--instructions: requests before those counted")


def arms(args) -> list[Arm]:
    if not args.instructions:
        return [Arm(name) for name in ("bare", "engine", "generate()")]
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    trees = [p.resolve() for p in (args.src or [Path(__file__).resolve().parent.parent])]
    return [Arm(f"{arm}, {tree}", {"arm": arm, "src": str(tree)}) for tree in trees for arm in ("engine", "bare")]


@contextlib.contextmanager
def session(args):
    """The timed arms' engine, models and calls (nothing for --instructions: each count is its own process)."""
    target = SimulatedModel(32, seed=1, latency=LatencyProfile.uniform(20.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(1.0), seed=2)
    params, prompt = SamplingParams(temperature=0, max_tokens=args.N), [1, 2, 3]
    engine = Engine(target, drafter, sp_degree=4)
    spec, virtual = SpeculativeConfig(algorithm=args.algo, lookahead=5, sp_degree=4), RuntimeConfig(name="virtual")
    calls = {
        "bare": lambda: run_generation(
            Query(prompt, args.N, params.decoding()), engine.targets, engine.drafters, spec, virtual
        ),  # fmt: skip
        "engine": lambda: engine.generate(prompt, params, algorithm=args.algo, lookahead=5),
        "generate()": lambda: generate(
            prompt, target, drafter, algorithm=args.algo, max_tokens=args.N, lookahead=5, sp_degree=4
        ),  # fmt: skip
    }
    with engine:
        yield SimpleNamespace(calls=calls, want=target.greedy_tokens(prompt, args.N))


def measure(arm: Arm, args, r: int) -> dict:
    if args.instructions:
        tree, requests = Path(arm.settings["src"]), args.requests
        counts = [instructions(tree, arm.settings["arm"], n, args) for n in (2 * requests, requests)]
        return {"instructions_per_request": (counts[0] - counts[1]) / requests}
    seconds, out = timed(args.session.calls[arm.name])
    if out.tokens != args.session.want:
        raise AssertionError(f"{arm.name}: not the target's greedy tokens")
    return {"ms": seconds * 1e3}


def summarize(results, args) -> dict:
    by = {a.arm.name: a for a in results}
    if args.instructions:
        own = {a.arm.settings["src"]: by[f"engine, {a.arm.settings['src']}"].figures["instructions_per_request"]
               - a.figures["instructions_per_request"] for a in results if a.arm.settings["arm"] == "bare"}  # fmt: skip
        out = {f"engine - bare, {tree}": v for tree, v in own.items()}
        if len(own) > 1:
            out["engine - bare, last / first"] = list(own.values())[-1] / list(own.values())[0]
        return out
    # paired: each round's engine call minus its bare call (drifts in machine load cancel out)
    diff_ms = statistics.median(e - b for e, b in zip(by["engine"].values("ms"), by["bare"].values("ms")))
    over = diff_ms / by["bare"].figures["ms"]
    return {"engine overhead per request, us (median paired difference)": diff_ms * 1e3,
            "overhead / bare": over, "goal": f"< 2%: {'met' if over < 0.02 else 'not met'}"}  # fmt: skip


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "ms": "CPU ms of one request (this thread)",
        "instructions_per_request": "--instructions: instructions per request (slope over --requests)",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
    rounds=lambda args: 1 if args.instructions else 300,
)
