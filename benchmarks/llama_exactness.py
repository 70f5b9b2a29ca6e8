"""The llama backend's exactness goal on the default pair: 0 differing tokens.

Greedy non-SI, SI, DSI (threads and Ray) and token trees (SpecInfer widths and best-first) on the first ``-n``
HumanEval prompts, ``-N`` tokens each (end of text ignored, so every prompt gives N tokens to compare), against
the same backend's one-token greedy decoding: the prompt prefilled in its canonical passes (as every server of a
request prefills it, specpar.backends.llama.prefill), then every token its own forward pass.
Prints one line per prompt and arm and the total of differing tokens; the goal is 0.

    .venv/bin/python benchmarks/llama_exactness.py [-n 20] [-N 64] [-k 4] [--out benchmarks/results/...]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from specpar.core.calls import Score
from specpar.core.decoding import Decoding
from specpar.core.params import SamplingParams

ARMS = (  # name, algorithm, lookahead, sp_degree, tree, runtime
    ("nonsi", "nonsi", None, 1, None, "threads"),
    ("si k=4", "si", 4, 1, None, "threads"),
    ("dsi k=4 sp=2", "dsi", 4, 2, None, "threads"),
    ("dsi k=4 sp=2 ray", "dsi", 4, 2, None, "ray"),
    ("si tree 2,2,1", "si", None, 1, (2, 2, 1), "threads"),
    ("dsi tree best:8", "dsi", None, 2, "best:8", "threads"),
)


def one_token_greedy(server, prompt: list[int], n: int) -> list[int]:
    """The target's own greedy decoding: the prompt prefilled (canonically), then one forward pass per token."""
    server.reset()
    seq, greedy = list(prompt), Decoding(prompt_len=len(prompt))
    for _ in range(n):
        seq.append(server.run(Score(tuple(seq), 0, greedy)).rows[0])
    return seq[len(prompt) :]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20, help="HumanEval prompts (default 20)")
    ap.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    ap.add_argument("--out", default="benchmarks/results/llama_exactness.jsonl")
    args = ap.parse_args()

    from specpar.backends.loading import load_pair
    from specpar.entrypoints.engine import Engine
    from specpar.experiments import prompts

    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average), {os.cpu_count()} cores", flush=True)
    target, drafter = load_pair(backend="llama", progress=False)
    print(target.describe(), flush=True)
    reference_server = target.server("reference", n_ctx=2048)
    engines = {
        runtime: Engine(target, drafter, sp_degree=2, runtime=runtime, max_tokens=2048)
        for runtime in ("threads", "ray")
    }
    params = SamplingParams(temperature=0, max_tokens=args.N, ignore_eos=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    differing = compared = 0
    with open(args.out, "w") as out:
        for i, prompt in enumerate(prompts.load("humaneval", args.n)):
            ids = prompt.token_ids(target)
            t0 = time.perf_counter()
            expected = one_token_greedy(reference_server, ids, args.N)
            line = {"prompt": i, "prompt_tokens": len(ids), "reference_s": round(time.perf_counter() - t0, 2)}
            for name, algorithm, k, _sp, tree, runtime in ARMS:
                engine = engines[runtime]
                engine.reset()
                res = engine.generate(ids, params, algorithm=algorithm, lookahead=k, tree=tree)
                diff = sum(a != b for a, b in zip(res.tokens, expected)) + abs(len(res.tokens) - len(expected))
                differing += diff
                compared += len(expected)
                line[name] = {"differing": diff, "acceptance_rate": res.acceptance_rate, "time_ms": res.time_ms}
            out.write(json.dumps(line) + "\n")
            out.flush()
            print(
                f"prompt {i:2d} ({len(ids)} tokens): "
                + ", ".join(f"{name} {line[name]['differing']}" for name, *_ in ARMS),
                flush=True,
            )
    for engine in engines.values():
        engine.close()
    print(
        f"{differing} differing tokens of {compared} compared ({len(ARMS)} arms x {args.n} prompts x {args.N} "
        f"tokens) against one-token greedy decoding: goal 0 {'MET' if differing == 0 else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
