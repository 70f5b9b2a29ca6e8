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
machine has, and the target servers and cores Eq. 1 asks for. Wrap it in ``flock /tmp/specpar-measure.lock``.

    .venv/bin/python benchmarks/llama_costs.py [--prompt 0] [-N 32] [--repeats 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

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
    before = server.set_threads(2)  # the engine's batch threads for non-SI on 2 cores (exact at any count)
    prefill2 = median_ms(lambda: (server.reset(), server._sync(ids, len(ids) - 1, prompt)), max(1, repeats // 2))
    server.set_threads(before)
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

    from specpar.runtimes.ray_cluster import connect

    connect(cpus=1)

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


def nonsi_ms_per_token(target, drafter, ids: list[int], n: int) -> tuple[float, float, float]:
    """specpar's non-SI on the threads runtime: (ms per generated token after the prefill pass, forward ms per token
    of its one-token passes, the prefill pass's ms: it runs on the engine's batch threads, cores / busy servers)."""
    from specpar.core.params import SamplingParams
    from specpar.entrypoints.engine import Engine

    with Engine(target, drafter, sp_degree=1, runtime="threads", units=1, max_tokens=1024) as engine:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=0, help="HumanEval prompt index (default 0)")
    ap.add_argument("-N", type=int, default=32, help="tokens decoded per decode measurement (default 32)")
    ap.add_argument("--repeats", type=int, default=5, help="repeats of each verification (median; default 5)")
    ap.add_argument("--out", default="benchmarks/results/llama_costs.json")
    args = ap.parse_args()

    from specpar.backends import weights
    from specpar.backends.cpu_threads import cpu_cores
    from specpar.backends.llama.model import LlamaModel
    from specpar.backends.llama.settings import LlamaSettings
    from specpar.backends.loading import load_pair
    from specpar.experiments import prompts

    lines = [f"command: {' '.join(sys.argv)}", f"uptime before: {_uptime()}"]
    print("\n".join(lines), flush=True)
    target, drafter = load_pair(backend="llama", progress=False)
    ids = prompts.load("humaneval", args.prompt + 1)[args.prompt].token_ids(target)
    paths = weights.joined_path(weights.TARGET), weights.joined_path(weights.DRAFTER)
    default = LlamaSettings.fast(threads=1, batch_threads=1)  # llama.cpp's fastest settings (repacking off on AMX)
    out: dict = {"prompt": args.prompt, "prompt_tokens": len(ids), "cores": cpu_cores()}
    out["target"] = component_costs(target, ids, args.N, args.repeats)
    out["drafter"] = component_costs(drafter, ids, args.N, args.repeats)
    out["target llama.cpp defaults"] = component_costs(
        LlamaModel(paths[0], name="target-defaults", settings=default), ids, args.N, args.repeats
    )
    out["target decode beside drafter decode"] = decode_while(target, drafter, ids, args.N)
    out["target decode beside target decode"] = decode_while(target, target, ids, args.N)
    out["ray round trip ms"] = ray_round_trip_ms(len(ids) + 64, 4, 200)
    nonsi = nonsi_ms_per_token(target, drafter, ids, args.N)
    out["nonsi ms per token"], out["nonsi forward ms per token"], out["nonsi prefill ms"] = nonsi
    out["uptime after"] = _uptime()
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")

    t, d = out["target"]["decode_ms"], out["drafter"]["decode_ms"]
    dt = out["target llama.cpp defaults"]
    lines += [
        f"default pair on llama.cpp, 1 thread per model, {len(ids)}-token HumanEval prompt {args.prompt}, "
        f"{cpu_cores()} cores (shared)",
        f"target decode t = {t:.1f} ms/token; drafter decode d = {d:.1f} ms/token; c = d / t = {d / t:.2f}",
        "verification of k drafts (a pass over k + 1 tokens), exact settings: "
        + ", ".join(f"k={k} {v:.1f} ms ({v / t:.2f} t)" for k, v in out["target"]["verify_ms"].items()),
        "the same in the fast mode (llama.cpp's default settings, inexact): decode "
        f"{dt['decode_ms']:.1f} ms/token; "
        + ", ".join(f"k={k} {v:.1f} ms ({v / dt['decode_ms']:.2f} t)" for k, v in dt["verify_ms"].items()),
        f"prefill of {len(ids)} tokens: exact mode (canonical passes) {out['target']['prefill_ms']:.0f} ms; fast mode "
        f"{dt['prefill_ms']:.0f} ms ({out['target']['prefill_ms'] / dt['prefill_ms']:.2f}x); "
        f"exact on 2 batch threads {out['target']['prefill_2_threads_ms']:.0f} ms",
        f"target decode while the drafter decodes on the other core: {out['target decode beside drafter decode']:.1f}"
        f" ms/token ({t / out['target decode beside drafter decode']:.2f}x its speed alone); while another target "
        f"decodes: {out['target decode beside target decode']:.1f} ms/token",
        f"Ray actor call round trip (Score payload, no forward): {out['ray round trip ms']:.2f} ms",
        f"specpar non-SI (threads runtime): {out['nonsi ms per token']:.1f} ms per token after the first, "
        f"{out['nonsi forward ms per token']:.1f} ms of it in forward passes (overhead "
        f"{out['nonsi ms per token'] - out['nonsi forward ms per token']:.1f} ms/token); its prefill pass "
        f"{out['nonsi prefill ms']:.0f} ms on the engine's {cpu_cores()} batch threads",
        "",
        f"bounds on {cpu_cores()} cores (non-SI: t per token on one core):",
        *bounds(t, d, out["target"]["verify_ms"], cpu_cores()),
        f"uptime after: {out['uptime after']}",
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).with_suffix(".txt").write_text(text)
    print(text)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main()
