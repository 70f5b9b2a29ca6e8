"""specpar's plain decoding (non-SI) on llama.cpp, exact and fast modes, beside llama.cpp's own ``llama-completion``.

Round r runs HumanEval prompt r in every arm, the arms' order rotated from round to round, each from a cold cache:
specpar's non-SI in the exact mode and in the fast mode (``exact=False``) on the threads runtime, and
``llama-completion`` (llama.cpp's plain greedy decoding, its default settings, built from the llama-cpp-python
sdist's source by benchmarks/llama_cpp_tools.py). Equal resources: every arm runs on the cores of ``--cores``
(this process's affinity, llama.cpp's ``taskset``) with as many threads as there are cores (llama.cpp's -t and -tb;
specpar's engine gives its server the cores it may use; the exact mode keeps one thread per one-token pass). On a
CPU with AMX, llama-completion runs with ``--no-repack``: its repacked AMX matmul faults (ggml-org/llama.cpp#20824),
and the fast mode leaves repacking off there too (--repack-llama-cpp runs llama.cpp's default anyway).

Figures per run: time_ms (specpar: the generation's wall time, prefill included; llama.cpp: its prompt eval + eval
times, model load excluded), ttft_ms (the first token: specpar's, llama.cpp's prompt eval), and the tokens or text.
The summary gives each specpar arm's speed against llama-completion (its time over theirs: > 1 is faster; ratio of
the means and the per-prompt median), the goals (exact >= 0.8x, fast >= 0.95x), and how often the fast mode's
greedy tokens differ from the exact mode's (prompts, tokens from the first difference on). The exact mode's tokens
against one-token decoding: benchmarks/llama_exactness.py. Wrap it in ``flock /tmp/specpar-measure.lock``.

    python -m benchmarks llama_plain [--rounds 10] [-N 64] [--cores 0]
"""

from __future__ import annotations

import contextlib
import os
import statistics
from types import SimpleNamespace

from benchmarks.llama_cpp_tools import completion, cpu_range, same_text, tools
from benchmarks.runner import Arm, Benchmark

ARMS = ("non-SI, exact mode", "non-SI, fast mode", "llama-completion")
GOALS = {"non-SI, exact mode": 0.8, "non-SI, fast mode": 0.95}


def options(p) -> None:
    p.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("--cores", default="0", help="the CPUs every arm runs on, one thread each (default 0)")
    p.add_argument(
        "--repack-llama-cpp", action="store_true", help="run llama-completion with repacking on, even on AMX"
    )


def arms(args) -> list[Arm]:
    cores = sorted({int(c) for part in args.cores.split(",") for c in cpu_range(part)})
    os.sched_setaffinity(0, cores)  # specpar's arms: this process (the engine's threads follow its affinity)
    args.threads = len(cores)
    return [Arm(a, {"threads": args.threads, "cores": args.cores}) for a in ARMS]


@contextlib.contextmanager
def session(args):
    """llama.cpp's tools built; a non-SI engine per mode (the two share the weights where neither repacks)."""
    from specpar.backends.loading import load_pair
    from specpar.entrypoints.engine import Engine

    engines = {}
    try:
        for exact in (True, False):
            target, _ = load_pair(backend="llama", progress=False, exact=exact, with_drafter=False)
            engines[exact] = Engine(target, None, algorithm="nonsi", sp_degree=1, units=1, runtime="threads",
                                    max_tokens=2048)  # fmt: skip
        yield SimpleNamespace(bindir=tools(), engines=engines)
    finally:
        for e in engines.values():
            e.close()


def measure(arm: Arm, args, r: int) -> dict:
    from specpar.core.params import SamplingParams
    from specpar.experiments import prompts

    prompt = prompts.load("humaneval", r + 1)[r]
    if arm.name == "llama-completion":
        from specpar.backends import weights
        from specpar.backends.llama.library import build_has

        extra = () if args.repack_llama_cpp or not build_has("AMX_INT8") else ("--no-repack",)
        run = completion(args.session.bindir, weights.joined_path(weights.TARGET), prompt.text, args.N, args.threads,
                         args.cores, extra)  # fmt: skip
        return {"time_ms": run["time_ms"], "ttft_ms": run["prompt_ms"], "text": run["text"], "flags": " ".join(extra)}
    e = args.session.engines[arm.name.endswith("exact mode")]
    e.reset()
    res = e.generate(prompt.token_ids(e.target_model), SamplingParams(temperature=0, max_tokens=args.N))
    return {"time_ms": res.time_ms, "ttft_ms": res.ttft_ms, "tokens": res.tokens, "text": res.text,
            "load": os.getloadavg()[0]}  # fmt: skip


def summarize(results, args) -> dict:
    by = {a.arm.name: a for a in results}
    base = by["llama-completion"].values("time_ms")
    out = {}
    for name, goal in GOALS.items():
        times = by[name].values("time_ms")
        per = [b / t for b, t in zip(base, times)]
        mean = statistics.mean(base) / statistics.mean(times)
        out[f"{name}: speed vs llama-completion"] = (
            f"{mean:.2f}x (ratio of means), per prompt {min(per):.2f}-{max(per):.2f} (median "
            f"{statistics.median(per):.2f}); goal >= {goal}x: {'met' if mean >= goal else 'not met'}"
        )
        ttft = [b / t for b, t in zip(by["llama-completion"].values("ttft_ms"), by[name].values("ttft_ms"))]
        out[f"{name}: first token vs llama-completion's"] = f"median {statistics.median(ttft):.2f}x"
    exact, fast = by["non-SI, exact mode"].values("tokens"), by["non-SI, fast mode"].values("tokens")
    parted = [next((i for i, (a, b) in enumerate(zip(e, f)) if a != b), None) for e, f in zip(exact, fast)]
    differ = [p for p in parted if p is not None]
    tokens = sum(len(e) - p for e, p in zip(exact, parted) if p is not None)
    out["fast mode's greedy tokens against the exact mode's"] = (
        f"{len(differ)}/{len(exact)} prompts differ (first difference at output tokens {differ}); "
        f"{tokens}/{sum(map(len, exact))} tokens from the first difference on"
    )
    texts = by["llama-completion"].values("text")
    same = sum(same_text(a, b) for a, b in zip(by["non-SI, fast mode"].values("text"), texts))
    out["llama-completion's text = the fast mode's"] = f"{same}/{len(texts)} prompts"
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "time_ms": "-N tokens with the prefill, ms (median over prompts)",
        "ttft_ms": "the first token, ms",
        "load": "1-min load average",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    rounds=10,
    session=session,
)
