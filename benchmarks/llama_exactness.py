"""The llama backend's exactness goal on the default pair: 0 differing tokens.

Greedy non-SI, SI, DSI (threads and Ray) and token trees (SpecInfer widths and best-first) on the first ``-n``
HumanEval prompts, ``-N`` tokens each (end of text ignored, so every prompt gives N tokens to compare), against
the same backend's one-token greedy decoding: the prompt prefilled in its canonical passes (as every server of a
request prefills it), then every token its own forward pass.
Round r is prompt r (its reference decoded on first need); each arm reports its differing tokens per prompt, and the
summary their total; the goal is 0.

    python -m benchmarks llama_exactness [-n 20] [-N 64]
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark
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
    """The target's own greedy decoding: the prompt prefilled (in its canonical passes, as every server of a request
    prefills it: specpar.backends.llama.prefill), then one forward pass per token."""
    server.reset()
    seq, greedy = list(prompt), Decoding(prompt_len=len(prompt))
    for _ in range(n):
        seq.append(server.run(Score(tuple(seq), 0, greedy)).rows[0])
    return seq[len(prompt) :]


def options(p) -> None:
    p.add_argument("-n", type=int, default=20, help="HumanEval prompts, one round each (default 20)")
    p.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")


def arms(args) -> list[Arm]:
    return [Arm(name, {"algorithm": a, "lookahead": k, "tree": tree, "runtime": runtime})
            for name, a, k, _sp, tree, runtime in ARMS]  # fmt: skip


@contextlib.contextmanager
def session(args):
    """The default pair on llama.cpp, one engine per runtime (SP 2), the prompts and their references."""
    from specpar.backends.loading import load_pair
    from specpar.entrypoints.engine import Engine
    from specpar.experiments import prompts

    target, drafter = load_pair(backend="llama", progress=False)
    engines = {rt: Engine(target, drafter, sp_degree=2, runtime=rt, max_model_len=2048) for rt in ("threads", "ray")}
    ids = [p.token_ids(target) for p in prompts.load("humaneval", args.n)]
    reference_server = target.server("reference", n_ctx=2048)
    try:
        yield SimpleNamespace(engines=engines, ids=ids, describe=target.describe(), reference=functools.cache(
            lambda r: one_token_greedy(reference_server, ids[r], args.N)))  # fmt: skip
    finally:
        for engine in engines.values():
            engine.close()


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    expected = s.reference(r)
    engine = s.engines[arm.settings["runtime"]]
    engine.reset()
    params = SamplingParams(temperature=0, max_tokens=args.N, ignore_eos=True)
    res = engine.generate(s.ids[r], params, algorithm=arm.settings["algorithm"], lookahead=arm.settings["lookahead"],
                          tree=arm.settings["tree"])  # fmt: skip
    diff = sum(a != b for a, b in zip(res.tokens, expected)) + abs(len(res.tokens) - len(expected))
    return {"differing": diff, "compared": len(expected), "acceptance_rate": res.acceptance_rate,
            "time_ms": res.time_ms}  # fmt: skip


def summarize(results, args) -> dict:
    differing = sum(sum(a.values("differing")) for a in results)
    compared = sum(sum(a.values("compared")) for a in results)
    return {
        "settings": args.session.describe,
        "differing tokens": f"{differing} of {compared} compared",
        "goal": f"0 differing tokens against one-token greedy decoding: {'met' if differing == 0 else 'not met'}",
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "differing": "tokens that differ from one-token greedy decoding (median over the prompts; sum: summary)",
        "acceptance_rate": "accepted / drafted",
        "time_ms": "generation time, ms",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
    rounds=lambda args: args.n,
)
