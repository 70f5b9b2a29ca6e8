"""The default pair on llama.cpp (its Q4_K_M GGUF files, exact settings) against float32 transformers (the same
files dequantized), side by side in one run: load time, per-token decode latency and peak memory of each model.

Each arm (a backend and a model) runs in a fresh process (its peak resident memory is its own): it loads the model,
prefills a HumanEval prompt, then decodes ``-N`` tokens one forward pass at a time (greedy), and reports the median
ms per token. Arms are interleaved over the rounds (a slow drift of a shared machine does not bias the ratios); the
ratios are taken round by round. Needs ``pip install 'specpar[models]'`` (the transformers arm converts the pair
to float32 once, minutes, if it has not been).

    python -m benchmarks llama_vs_transformers [-N 32] [--rounds 3]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from benchmarks.runner import Arm, Benchmark

CHILD = r"""
import json, resource, statistics, sys, time
backend, role, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
from specpar.backends import weights
from specpar.core.calls import Score
from specpar.core.decoding import Decoding
from specpar.experiments import prompts
spec = weights.TARGET if role == "target" else weights.DRAFTER
if backend == "llama":
    from specpar.backends.llama.model import LlamaModel
    model = LlamaModel(weights.ensure_joined(spec, progress=False))
else:
    import torch
    torch.set_num_threads(1)
    from specpar.backends.transformers_model import TransformersModel
    model = TransformersModel(str(weights.ensure_converted(spec, progress=False)))
server = model.server("s")
load_s = time.perf_counter() - t0
ids = prompts.load("humaneval", 1)[0].token_ids(model)
def run():
    import contextlib
    ctx = contextlib.nullcontext()
    if backend == "transformers":
        import torch
        ctx = torch.inference_mode()
    with ctx:
        t = time.perf_counter()
        seq = list(ids)
        seq.append(server.run(Score(tuple(seq), 0, Decoding())).rows[0])
        prefill = time.perf_counter() - t
        times = []
        for _ in range(n):
            t = time.perf_counter()
            seq.append(server.run(Score(tuple(seq), 0, Decoding())).rows[0])
            times.append(time.perf_counter() - t)
    return prefill, times, seq[len(ids):]
prefill, times, tokens = run()
print(json.dumps({
    "backend": backend, "role": role, "load_s": load_s, "prefill_s": prefill, "prompt_tokens": len(ids),
    "ms_per_token": 1000 * statistics.median(times), "tokens": tokens,
    "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
}))
"""


def options(p) -> None:
    p.add_argument("-N", type=int, default=32, help="tokens decoded one at a time (default 32)")


def arms(args) -> list[Arm]:
    return [Arm(f"{role}, {backend}", {"backend": backend, "role": role}) for role in ("target", "drafter")
            for backend in ("llama", "transformers")]  # fmt: skip


def measure(arm: Arm, args, r: int) -> dict:
    """One fresh process (it inherits PYTHONPATH): load, prefill, decode -N tokens."""
    argv = [sys.executable, "-c", CHILD, arm.settings["backend"], arm.settings["role"], str(args.N)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{arm.name} failed:\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    return {k: row[k] for k in ("load_s", "prefill_s", "prompt_tokens", "ms_per_token", "peak_rss_gb", "tokens")}


def summarize(results, args) -> dict:
    out = {}
    for role in ("target", "drafter"):
        llama, torch = (next(a for a in results if a.arm.name == f"{role}, {b}") for b in ("llama", "transformers"))
        ratios = [t / ll for ll, t in zip(llama.values("ms_per_token"), torch.values("ms_per_token"))]
        out[f"{role}: decode on llama.cpp, times faster (median of the rounds')"] = statistics.median(ratios)
        out[f"{role}: the rounds' ratios"] = [round(x, 2) for x in ratios]
        out[f"{role}: memory, times smaller"] = max(torch.values("peak_rss_gb")) / max(llama.values("peak_rss_gb"))
        out[f"{role}: same greedy tokens"] = llama.values("tokens") == torch.values("tokens")
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "load_s": "model load, s",
        "prefill_s": "the prompt's prefill, s",
        "ms_per_token": "decode, ms per token (median over the -N steps)",
        "peak_rss_gb": "peak resident memory of the process, GB",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    rounds=3,
)
