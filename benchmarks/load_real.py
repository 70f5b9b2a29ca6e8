"""Real models under load on this machine: 1, 2 and 4 concurrent clients, beside the simulator's prediction.

The default pair (or --target/--drafter) on ``--backend`` (llama, or transformers), an Engine of ``--units``
processing units (default: the cores), each unit's passes on its share of the cores. Steps, in one run:

1. profile: the pair's machine profile (``specpar profile``'s measurement, from specpar's cache, or with --measure
   measured first on three prompts the clients never send), given to the engine so that its scheduler predicts each
   share's option from it;
2. load: C closed-loop clients (threads) each send ``--requests`` greedy requests of N tokens (HumanEval prompts),
   back to back; throughput = output tokens / wall time, per C, and its ratio to C = 1 (goal: >= 1.6 at 2 and 4);
3. prediction: the same closed loop on the virtual clock (:class:`specpar.experiments.load.LoadSimulation`) with
   the machine profile's costs at the threads each unit's passes get, its per-call round trip and its contention
   (goal: each measured throughput within 15% of its prediction);
4. single client vs today's engine: the same requests one at a time, on this Engine with its defaults and on the
   Engine of ``--baseline-src`` (a checkout before the scheduler) in a subprocess, alternated (goal: within 5%).

Each number of clients is an arm (2 and 3), and the single-client comparison (4) the last one (--single 0: none;
it frees the load engine's weights first). The machine is shared: compare ratios taken in one run.

    python -m benchmarks load_real [--backend llama] [--clients 1,2,4] [--requests 3] [-N 32] [--measure]
        [--baseline-src /work/main]
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark
from specpar import Engine, SamplingParams


def prompts(n: int) -> list[str]:
    from specpar.experiments.prompts import humaneval

    return [p.text for p in humaneval()[:n]]


def load_engine(args, **kw) -> Engine:
    return Engine(args.target, args.drafter, runtime="threads", backend=args.backend, **kw)


def profile(args, texts: list[str]):
    """The pair's machine profile (``specpar profile``'s measurement, from specpar's cache or measured now on
    ``texts``), and the models, loaded once."""
    from specpar.backends.loading import load_pair
    from specpar.prediction.machine import load_or_build

    target, drafter = load_pair(args.target, args.drafter, backend=args.backend, progress=False)
    ids = [target.encode(t) for t in texts]
    return load_or_build(target=target, drafter=drafter, prompts=ids, refresh=args.measure), target, drafter


def closed_loop(engine: Engine, texts: list[str], clients: int, requests: int, n: int) -> dict:
    """``clients`` threads, each sending ``requests`` greedy requests back to back: tokens/s and latencies."""
    latencies, tokens, errors = [], [], []
    lock = threading.Lock()

    def client(c: int) -> None:
        try:
            for r in range(requests):
                text = texts[(c * requests + r) % len(texts)]
                t0 = time.perf_counter()
                result = engine.generate(text, SamplingParams(max_tokens=n, temperature=0, ignore_eos=True))
                with lock:
                    latencies.append(time.perf_counter() - t0)
                    tokens.append(len(result.tokens))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return {"clients": clients, "tokens_per_s": sum(tokens) / wall, "wall_s": wall,
            "latency_mean_s": statistics.fmean(latencies), "requests": len(latencies)}  # fmt: skip


def predicted(machine, units: int, clients: int, requests: int, n: int, prompt_length: int) -> float:
    """The closed loop's throughput on the virtual clock with the machine profile's costs: each pass at the threads
    an engine of ``units`` units gives it, the runtime's round trip per call, the machine's contention."""
    from specpar.backends.cpu_threads import pass_threads
    from specpar.experiments.load import LoadSetting, LoadSimulation

    threads, over = pass_threads(machine.cores, units, 1), machine.overhead_ms["threads"]
    setting = LoadSetting(units=units, target=machine.target.costs(threads, over),
                          drafter=machine.drafter.costs(threads, over), max_tokens=n, prompt_length=prompt_length,
                          acceptance_rate=machine.acceptance_rate, lookahead=None,
                          contention=machine.contention)  # fmt: skip
    return LoadSimulation(setting).run("adaptive", clients=clients, requests=clients * requests).throughput


BASELINE = """
import json, sys, time
sys.path.insert(0, {src!r})
from specpar import Engine, SamplingParams
texts = {texts!r}
engine = Engine(runtime="threads")
engine.generate(texts[0], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
for line in sys.stdin:
    t0 = time.perf_counter()
    engine.generate(texts[int(line)], SamplingParams(max_tokens={n}, temperature=0, ignore_eos=True))
    print(json.dumps(time.perf_counter() - t0), flush=True)
"""


def single_client(args, texts: list[str]) -> dict:
    """The same requests alternated between this Engine (defaults) and the baseline checkout's, one at a time."""
    ours = load_engine(args)
    ours.generate(texts[0], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))
    code = BASELINE.format(src=os.path.join(args.baseline_src, "src"), texts=texts, n=args.N)
    base = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    mine, theirs = [], []
    try:
        for i in range(args.single):
            t0 = time.perf_counter()
            ours.generate(texts[i % len(texts)], SamplingParams(max_tokens=args.N, temperature=0, ignore_eos=True))
            mine.append(time.perf_counter() - t0)
            base.stdin.write(f"{i % len(texts)}\n")
            base.stdin.flush()
            theirs.append(json.loads(base.stdout.readline()))
    finally:
        base.stdin.close()
        base.wait(60)
        ours.close()
    return {"ours_s": statistics.median(mine), "baseline_s": statistics.median(theirs),
            "ratio": statistics.median(mine) / statistics.median(theirs)}  # fmt: skip


def options(p) -> None:
    p.add_argument("--backend", default="llama", choices=("transformers", "llama"), help="default llama")
    p.add_argument("--target", default=None, help="the target model (default: the default pair's)")
    p.add_argument("--drafter", default=None, help="the drafter model")
    p.add_argument("--units", type=int, default=os.cpu_count(), help="processing units (default: the cores)")
    p.add_argument("--clients", default="1,2,4", help="numbers of clients, one arm each (default 1,2,4)")
    p.add_argument("--requests", type=int, default=3, help="requests per client (default 3)")
    p.add_argument("-N", type=int, default=32, help="tokens per request (default 32)")
    p.add_argument("--single", type=int, default=6, help="single-client requests per engine (0: no such arm)")
    p.add_argument("--baseline-src", default="/work/main", help="the checkout the single client compares with")
    p.add_argument("--measure", action="store_true", help="measure the pair's machine profile first (not the cache's)")


def arms(args) -> list[Arm]:
    out = [Arm(f"{c} clients", {"clients": int(c)}) for c in args.clients.split(",")]
    return out + ([Arm("single client vs the baseline's engine", {"single": args.single})] if args.single else [])


@contextlib.contextmanager
def session(args):
    """The prompts, and the load engine (made on first need, its servers given the measured profile)."""
    s = SimpleNamespace(texts=prompts(19), engine=None, profile=None, prompt_length=None)

    def engine() -> Engine:
        if s.engine is None:
            s.profile, target, drafter = profile(args, s.texts[-3:])  # the sample: prompts the clients never send
            s.engine = Engine(target, drafter, runtime="threads", units=args.units, profile=s.profile)
            s.engine.generate(s.texts[0], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))  # warm-up
            s.prompt_length = round(statistics.fmean(len(target.encode(t)) for t in s.texts[:-3]))
        return s.engine

    def release() -> None:
        if s.engine is not None:
            s.engine.close()
            s.engine = None
            gc.collect()  # its weights, before the single-client arm loads this engine's and the baseline's

    s.load_engine, s.release = engine, release
    try:
        yield s
    finally:
        release()


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    if "single" in arm.settings:
        s.release()
        return single_client(args, s.texts)
    c = arm.settings["clients"]
    row = closed_loop(s.load_engine(), s.texts[:-3], c, args.requests, args.N)
    row["predicted_tokens_per_s"] = predicted(s.profile, args.units, c, args.requests, args.N, s.prompt_length)
    row["measured_over_predicted"] = row["tokens_per_s"] / row["predicted_tokens_per_s"]
    return row


def summarize(results, args) -> dict:
    loads = [a for a in results if "clients" in a.arm.settings]
    one = loads[0].figures["tokens_per_s"]
    out = {f"{a.arm.settings['clients']} clients: tokens/s x 1 client": a.figures["tokens_per_s"] / one
           for a in loads[1:]}  # fmt: skip
    machine = args.session.profile
    if machine is not None:
        out["profile"] = {"v(1) ms": {r: getattr(machine, r).pass_cost(1, 1) for r in ("target", "drafter")},
                          "contention": list(machine.contention), "acceptance_rate": machine.acceptance_rate,
                          "measured": dict(machine.meta).get("when"), "load_average": dict(machine.meta).get("load_average")}  # fmt: skip
        errors = [abs(a.figures["measured_over_predicted"] - 1) for a in loads]
        out["goal"] = f"each within 15% of its prediction: {'met' if max(errors) <= 0.15 else 'NOT met'}"
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "tokens_per_s": "output tokens / wall time",
        "predicted_tokens_per_s": "the simulator's prediction with the measured profile",
        "measured_over_predicted": "measured / predicted",
        "latency_mean_s": "mean request latency, s",
        "ours_s": "single client: this engine, median s per request",
        "baseline_s": "the baseline checkout's engine",
        "ratio": "this / the baseline",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
