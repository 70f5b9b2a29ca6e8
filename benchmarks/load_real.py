"""Real models under load on this machine: 1, 2 and 4 concurrent clients, beside the simulator's prediction.

The default pair (or --target/--drafter) on ``--backend`` (transformers; llama once the llama.cpp backend is in),
an Engine of ``--units`` processing units (default: the cores), one torch thread per server. Steps, in one run:

1. profile: each model's TTFT, TPOT and per-token cost and the pair's acceptance rate (the App. F figures of its
   machine profile, ``specpar profile``'s measurement), given to the servers so the scheduler predicts each share's
   option (:mod:`specpar.prediction.shares`);
2. load: C closed-loop clients (threads) each send ``--requests`` greedy requests of N tokens (HumanEval prompts),
   back to back; throughput = output tokens / wall time, per C, and its ratio to C = 1 (goal: >= 1.6 at 2 and 4);
3. prediction: the same closed loop on the virtual clock (:class:`specpar.experiments.load.LoadSimulation`) with
   the measured profile (goal: each measured throughput within 15% of its prediction);
4. single client vs today's engine: the same requests one at a time, on this Engine with its defaults and on the
   Engine of ``--baseline-src`` (a checkout before the scheduler) in a subprocess, alternated (goal: within 5%).

The machine is shared: the script prints ``uptime`` before and after; compare ratios taken in one run.

    .venv/bin/python benchmarks/load_real.py [--backend transformers] [--clients 1,2,4] [--requests 3] [-N 32]
        [--baseline-src /work/main]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time

from specpar import Engine, SamplingParams
from specpar.core.latency import LatencyProfile


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def prompts(n: int) -> list[str]:
    from specpar.experiments.prompts import humaneval

    return [p.text for p in humaneval()[:n]]


def load_engine(args, **kw) -> Engine:
    options = {} if args.backend == "transformers" else {"backend": args.backend}
    return Engine(args.target, args.drafter, runtime="threads", **options, **kw)


def profile(engine: Engine, texts: list[str]) -> dict:
    """The App. F figures of the engine's models' machine profile (``specpar profile``'s measurement, from specpar's
    cache or measured now on these prompts)."""
    from specpar.prediction.machine import load_or_build

    ids = [engine.prompt_ids(t) for t in texts]
    return load_or_build(target=engine.target_model, drafter=engine.drafter_model, prompts=ids).meta["app_f"]


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


def predicted(prof: dict, units: int, clients: int, requests: int, n: int) -> float:
    from specpar.experiments.load import LoadSetting, LoadSimulation

    def lat(role):
        p = prof[role]
        return LatencyProfile(p["ttft_ms"], p["tpot_ms"], p["per_token_ms"])

    setting = LoadSetting(units=units, target=lat("target"), drafter=lat("drafter"), max_new_tokens=n,
                          acceptance_rate=prof["acceptance_rate"]["geometric"], lookahead=None)  # fmt: skip
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="transformers", choices=("transformers", "llama"))
    ap.add_argument("--target", default=None)
    ap.add_argument("--drafter", default=None)
    ap.add_argument("--units", type=int, default=os.cpu_count())
    ap.add_argument("--clients", default="1,2,4")
    ap.add_argument("--requests", type=int, default=3, help="requests per client")
    ap.add_argument("-N", type=int, default=32)
    ap.add_argument("--single", type=int, default=6, help="single-client requests per engine (0: skip step 4)")
    ap.add_argument("--baseline-src", default="/work/main")
    args = ap.parse_args()
    print("before:", uptime(), flush=True)
    texts = prompts(16)
    engine = load_engine(args, units=args.units)
    prof = profile(engine, texts[:3])
    print("profile:", json.dumps({r: prof[r] for r in ("target", "drafter")}), "a =",
          round(prof["acceptance_rate"]["geometric"], 3), flush=True)  # fmt: skip
    for role, servers in (("target", engine.targets.servers), ("drafter", engine.drafters.servers)):
        p = prof[role]
        for s in servers:
            s.latency = LatencyProfile(p["ttft_ms"], p["tpot_ms"], p["per_token_ms"])
    engine.drafter_model.acceptance_rate = prof["acceptance_rate"]["geometric"]
    engine.generate(texts[0], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))  # warm-up
    rows = []
    for c in [int(x) for x in args.clients.split(",")]:
        row = closed_loop(engine, texts, c, args.requests, args.N)
        row["predicted_tokens_per_s"] = predicted(prof, args.units, c, args.requests, args.N)
        rows.append(row)
        print(json.dumps(row), flush=True)
    engine.close()
    del engine  # its weights, before step 4 loads this engine's and the baseline's
    gc.collect()
    one = rows[0]["tokens_per_s"]
    print(
        f"\n{'clients':>8} {'tokens/s':>9} {'x 1 client':>11} {'predicted':>10} {'measured/pred':>14} {'mean lat s':>11}"
    )
    for r in rows:
        print(f"{r['clients']:>8} {r['tokens_per_s']:>9.2f} {r['tokens_per_s'] / one:>11.2f} "
              f"{r['predicted_tokens_per_s']:>10.2f} {r['tokens_per_s'] / r['predicted_tokens_per_s']:>14.2f} "
              f"{r['latency_mean_s']:>11.2f}")  # fmt: skip
    if args.single:
        s = single_client(args, texts)
        print(f"\nsingle client, engine defaults, median of {args.single}: this {s['ours_s']:.2f} s, baseline "
              f"{s['baseline_s']:.2f} s ({args.baseline_src}), ratio {s['ratio']:.3f}")  # fmt: skip
    print("after:", uptime())


if __name__ == "__main__":
    main()
