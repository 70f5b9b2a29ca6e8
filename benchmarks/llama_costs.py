"""What each part of a speculative step costs on the llama backend, and what that lets DSI do on this machine.

Per-component costs of the default pair on llama.cpp, measured in one process, greedy, one thread per model:

* a one-token pass (decode) of the target (t) and of the drafter (d), their ratio c = d / t;
* a pass over k + 1 tokens (a verification of k drafts) for k = 1, 2, 4, 8: its time over t;
* the prompt's prefill in the exact mode's canonical passes (1 and 2 batch threads) and in the fast mode's;
* the same decode, verification and prefill in the fast mode (llama.cpp's default, inexact settings: passes of
  512, weights repacked for its gemm kernels except on an AMX CPU, where they fault): what exactness costs;
* the target's decode while the drafter decodes on the other core (two threads at once: what memory bandwidth
  leaves of the second core);
* a Ray actor call's round trip with a Score call's payload (the context's ids in, k + 1 ids out), no forward;
* specpar's non-SI per generated token on the threads runtime against t (Python, sampling and bookkeeping).

From them, the bounds of the last lines (a step of k drafts accepted whole costs the drafter k d and a verifier
v(k); a core that verifies yields at most k + 1 tokens per v(k)): DSI's best time per token with the cores this
machine has, and the target servers and cores Eq. 1 asks for. Each measurement is an arm (the models loaded once).
Wrap it in ``flock /tmp/specpar-measure.lock``.

    python -m benchmarks llama_costs [--prompt 0] [-N 32] [--repeats 5]
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark

KS = (1, 2, 4, 8)


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def component_costs(model, ids: list[int], n: int, repeats: int) -> dict:
    """Prefill, decode and verification costs (ms) of one server of ``model`` on the prompt ``ids``."""
    server = model.server(n_ctx=1024)
    from specpar.core.decoding import Decoding

    prompt = Decoding(prompt_len=len(ids))  # the prompt in its canonical passes (exact mode), as the engine feeds it
    prefill = median_ms(lambda: (server.reset(), server._sync(ids, len(ids) - 1, prompt)), max(1, repeats // 2))
    before = server.set_batch_threads(2)  # the engine's batch threads for non-SI on 2 cores (exact at any count)
    prefill2 = median_ms(lambda: (server.reset(), server._sync(ids, len(ids) - 1, prompt)), max(1, repeats // 2))
    server.set_batch_threads(before)
    server.reset()
    row = server._sync(ids, len(ids) - 1, prompt)
    seq = list(ids)
    t0 = time.perf_counter()
    for _ in range(n):  # greedy decode: one-token passes
        seq.append(int(row[-1].argmax()))
        row = server._forward(seq[-1:], 0)
    decode = (time.perf_counter() - t0) * 1000 / n
    held = len(seq)
    verify = {}
    for k in KS:  # k + 1 tokens after the cache (drafts: the greedy tokens already decoded, as when all accepted)

        def one(k=k):
            server._crop(held - k - 1)
            server._forward(seq[held - k - 1 : held], 0)

        verify[k] = median_ms(one, repeats)
    server.close()
    return {
        "prefill_ms": prefill,
        "prefill_2_threads_ms": prefill2,
        "prompt_tokens": len(ids),
        "decode_ms": decode,
        "verify_ms": verify,
    }


def decode_while(model, other, ids: list[int], n: int) -> float:
    """The target's decode (ms per token) while ``other`` decodes in a second thread the whole time."""
    stop = threading.Event()

    def busy():
        s = other.server(n_ctx=1024)
        s._forward(ids, len(ids) - 1)
        while not stop.is_set():
            s._crop(len(ids))
            for _ in range(8):
                s._forward([ids[-1]], 0)
        s.close()

    th = threading.Thread(target=busy)
    th.start()
    time.sleep(1.0)
    try:
        server = model.server(n_ctx=1024)
        row = server._forward(ids, len(ids) - 1)
        seq = list(ids)
        t0 = time.perf_counter()
        for _ in range(n):
            seq.append(int(row[-1].argmax()))
            row = server._forward(seq[-1:], 0)
        ms = (time.perf_counter() - t0) * 1000 / n
        server.close()
    finally:
        stop.set()
        th.join()
    return ms


def ray_round_trip_ms(context_len: int, k: int, calls: int) -> float:
    """A Ray actor call's round trip with a Score call's payload (ids in, k + 1 ids out), no computation."""
    import ray

    from specpar.runtimes.ray_cluster import connect, shutdown

    connect(cpus=1)
    try:

        @ray.remote(num_cpus=1)
        class Echo:
            def score(self, context, k):
                return list(context[-k - 1 :])

        actor = Echo.remote()
        context = list(range(context_len))
        ray.get(actor.score.remote(context, k))
        t0 = time.perf_counter()
        for _ in range(calls):
            ray.get(actor.score.remote(context, k))
        ms = (time.perf_counter() - t0) * 1000 / calls
        ray.kill(actor)
        return ms
    finally:
        shutdown()  # the local Ray this started


def nonsi_ms_per_token(target, drafter, ids: list[int], n: int) -> tuple[float, float, float]:
    """specpar's non-SI on the threads runtime: (ms per generated token after the prefill pass, forward ms per token
    of its one-token passes, the prefill pass's ms: it runs on the engine's batch threads, cores / busy servers)."""
    from specpar.core.params import SamplingParams
    from specpar.entrypoints.engine import Engine

    with Engine(target, drafter, sp_degree=1, runtime="threads", units=1, max_model_len=1024) as engine:
        server = engine.targets.servers[0]
        engine.reset()
        mark = len(server.forward_log)
        res = engine.generate(ids, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), algorithm="nonsi")
        passes = [(b - a) * 1000 for a, b in server.forward_log[mark:]]
        prefill, decodes = passes[0], passes[1:]
        return (res.time_ms - prefill) / len(decodes), statistics.mean(decodes), prefill


def bounds(t: float, d: float, verify: dict, cores: int) -> list[str]:
    """What the costs allow: DSI's best time per token on ``cores`` cores, and Eq. 1's servers and cores."""
    lines = []
    for k, v in sorted(verify.items()):
        # a verifier core yields at most k + 1 tokens per v(k) (all k drafts accepted, plus the target's own token);
        # the drafter needs k d for the same tokens and a core of its own while it drafts
        per_token_verifier_core = v / (k + 1)
        best = max(per_token_verifier_core / max(1, cores - 1), k * d / (k + 1))
        servers = math.ceil(v / (k * d))  # Eq. 1: target servers so that a verification ends before k new drafts
        lines.append(
            f"k = {k}: v(k) = {v:.1f} ms = {v / t:.2f} t; one verifying core: >= {per_token_verifier_core:.1f} ms per "
            f"token ({per_token_verifier_core / t:.2f}x t) even if every draft is accepted; with {cores - 1} core(s) "
            f"beside the drafter's: >= {best:.1f} ms per token ({t / best:.2f}x non-SI's speed at best); Eq. 1 asks "
            f"for {servers} target servers, {servers + 1} cores with the drafter's"
        )
    return lines


def options(p) -> None:
    p.add_argument("--prompt", type=int, default=0, help="HumanEval prompt index (default 0)")
    p.add_argument("-N", type=int, default=32, help="tokens decoded per decode measurement (default 32)")
    p.add_argument("--repeats", type=int, default=5, help="repeats of each verification (median; default 5)")


ARMS = (
    "target",
    "drafter",
    "target, fast mode",
    "target decode beside a drafter decode",
    "target decode beside a target decode",
    "Ray actor round trip",
    "specpar non-SI",
)


def arms(args) -> list[Arm]:
    return [Arm(name) for name in ARMS]


@contextlib.contextmanager
def session(args):
    """The default pair on llama.cpp (exact settings), the prompt, and the target in the fast mode."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from specpar.backends import weights
    from specpar.backends.cpu_threads import cpu_cores
    from specpar.backends.llama.model import LlamaModel
    from specpar.backends.llama.settings import LlamaSettings
    from specpar.backends.loading import load_pair
    from specpar.experiments import prompts

    target, drafter = load_pair(backend="llama", progress=False)
    ids = prompts.load("humaneval", args.prompt + 1)[args.prompt].token_ids(target)
    default = LlamaSettings.fast(threads=1, batch_threads=1)  # the fast mode: llama.cpp's (no repacking on AMX)
    defaults = LlamaModel(weights.joined_path(weights.TARGET), name="target-defaults", settings=default)
    yield SimpleNamespace(target=target, drafter=drafter, defaults=defaults, ids=ids, cores=cpu_cores())


def measure(arm: Arm, args, r: int) -> dict:
    s, n = args.session, args.N
    if arm.name in ARMS[:3]:
        model = {"target": s.target, "drafter": s.drafter}.get(arm.name, s.defaults)
        return component_costs(model, s.ids, n, args.repeats)
    if arm.name.startswith("target decode beside"):
        return {"decode_ms": decode_while(s.target, s.drafter if "drafter" in arm.name else s.target, s.ids, n)}
    if arm.name == "Ray actor round trip":
        return {"round_trip_ms": ray_round_trip_ms(len(s.ids) + 64, 4, 200)}
    per_token, forward, prefill = nonsi_ms_per_token(s.target, s.drafter, s.ids, n)
    return {"ms_per_token": per_token, "forward_ms_per_token": forward, "prefill_ms": prefill}


def summarize(results, args) -> dict:
    by = {a.arm.name: a.figures for a in results}
    t, d, dt = by["target"]["decode_ms"], by["drafter"]["decode_ms"], by["target, fast mode"]
    s = args.session
    return {
        "c = d / t": d / t,
        "verification of k drafts / t, exact": {k: v / t for k, v in by["target"]["verify_ms"].items()},
        "the same, fast mode": {k: v / dt["decode_ms"] for k, v in dt["verify_ms"].items()},
        "prefill, exact / fast mode": by["target"]["prefill_ms"] / dt["prefill_ms"],
        "target decode speed beside a drafter decode / alone": t
        / by["target decode beside a drafter decode"]["decode_ms"],
        "specpar non-SI: ms per token outside forward passes": by["specpar non-SI"]["ms_per_token"]
        - by["specpar non-SI"]["forward_ms_per_token"],
        f"bounds on {s.cores} cores (non-SI: t per token on one core)": bounds(
            t, d, by["target"]["verify_ms"], s.cores
        ),
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "prefill_ms": "the prompt's prefill, ms (exact mode: its canonical passes)",
        "prefill_2_threads_ms": "the same on 2 batch threads",
        "decode_ms": "a one-token pass, ms per token",
        "verify_ms": "a pass over k + 1 tokens (k drafts), ms, by k",
        "round_trip_ms": "a Ray actor call with a Score call's payload, no forward, ms",
        "ms_per_token": "specpar's non-SI on threads, ms per generated token after the prefill",
        "forward_ms_per_token": "of which in its one-token forward passes",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
)
