"""The n-gram (prompt lookup) proposer on the default pair, beside the drafter model and non-SI.

Qwen2.5-Coder 1.5B (target) and 0.5B (drafter), on llama.cpp (``--backend llama``, the GGUF files, the default)
or float32 transformers on this machine's CPU, greedy, every arm generating N tokens (ignore_eos), from a cold
cache, interleaved per prompt (round r is prompt r; the arms' order rotates from one prompt to the next). Every arm
runs on one engine
(``units=1``: the same servers, the same cores and thread settings, each request's own configuration on all of them)
after one warm-up generation of each arm on a prompt that is not measured; each arm's tokens are checked equal to
non-SI's on every prompt. Prompts: the first n HumanEval prompts, and the prompts of
benchmarks/prompts/edit_function.jsonl, which ask to edit a function they give (the answer repeats most of it).

Arms: non-SI; SI with the drafter model (k = 5); SI and DSI with the n-gram proposer alone; DSI with the n-gram
proposer in front of the drafter model. Per arm: wall time, tokens per target pass (output tokens / target forward
passes, the cursor's passes included), acceptance rate; per prompt, each arm's speedup over non-SI. Goal (issue 25):
DSI with the n-gram proposer >= 0.98x non-SI on every prompt.

    python -m benchmarks ngram_default_pair [-n 10] [-N 64] [--ngram-k 8] [--backend llama] [--arms nonsi,dsi-ngram]
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks.runner import Arm, Benchmark
from specpar.core.params import SamplingParams
from specpar.entrypoints.engine import Engine
from specpar.experiments import prompts

EDITS = Path(__file__).parent / "prompts" / "edit_function.jsonl"


def options(p) -> None:
    p.add_argument("-n", type=int, default=10, help="HumanEval prompts (default 10)")
    p.add_argument("--edits", type=int, default=5, help="edit prompts (default 5)")
    p.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("-k", type=int, default=5, help="the drafter model's lookahead (default 5)")
    p.add_argument("--ngram-k", type=int, default=8, help="the n-gram proposer's lookahead (default 8)")
    p.add_argument("--min-n", type=int, default=2, help="the n-gram proposer's shortest match (default 2)")
    p.add_argument("--max-n", type=int, default=4, help="its longest (default 4)")
    p.add_argument("--sp-degree", type=int, default=2, help="the engine's target servers (default 2)")
    p.add_argument("--backend", default="llama", choices=("llama", "transformers"), help="default llama")
    p.add_argument("--arms", default=None, help="comma-separated subset of the arms")


def settings(args) -> dict[str, dict]:
    lookup = f"ngram:{args.min_n}:{args.max_n}"
    return {
        "nonsi": dict(algorithm="nonsi"),
        "si-model": dict(algorithm="si", lookahead=args.k),
        "si-ngram": dict(algorithm="si", proposer=lookup, lookahead=args.ngram_k),
        "dsi-ngram": dict(algorithm="dsi", proposer=lookup, lookahead=args.ngram_k, sp_degree=args.sp_degree),
        "dsi-ngram+model": dict(
            algorithm="dsi", proposer=lookup + "+drafter", lookahead=args.k, sp_degree=args.sp_degree
        ),  # fmt: skip
    }


def arms(args) -> list[Arm]:
    chosen = settings(args)
    names = args.arms.split(",") if args.arms else list(chosen)
    return [Arm(name, chosen[name]) for name in names]


def interleave(first: list, second: list) -> list:
    """Both lists in one, the second's items spread evenly among the first's (a run cut short still has both)."""
    step = max(1, round(len(first) / max(1, len(second))))
    out, rest = [], list(second)
    for i, item in enumerate(first):
        out.append(item)
        if (i + 1) % step == 0 and rest:
            out.append(rest.pop(0))
    return out + rest


def todo(args) -> list:
    return interleave(prompts.load("humaneval", args.n), prompts.load(str(EDITS), args.edits))


@contextlib.contextmanager
def session(args):
    """One engine for every arm, each arm warmed up once on a prompt that is not measured."""
    t0 = time.time()
    engine = Engine(sp_degree=args.sp_degree, runtime="threads", units=1, backend=args.backend)
    try:
        load_s = time.time() - t0
        warm = prompts.load("humaneval", args.n + 1)[-1].token_ids(engine.target_model)
        for arm in arms(args):  # the same warm caches, pages and threads for every arm before any is timed
            engine.reset()
            engine.generate(warm, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), **arm.settings)
        yield SimpleNamespace(engine=engine, prompts=todo(args), load_s=load_s)
    finally:
        engine.close()


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    prompt = s.prompts[r]
    ids = prompt.token_ids(s.engine.target_model)
    s.engine.reset()
    t = time.perf_counter()
    res = s.engine.generate(ids, SamplingParams(temperature=0, max_tokens=args.N, ignore_eos=True), **arm.settings)
    wall = time.perf_counter() - t
    if res.algorithm != arm.settings["algorithm"]:
        raise AssertionError(f"{arm.name} ran {res.algorithm}")
    return {"prompt": prompt.id, "wall_s": wall, "tokens": len(res.tokens), "target_passes": res.target_forwards,
            "tokens_per_target_pass": len(res.tokens) / res.target_forwards, "drafter_passes": res.drafter_forwards,
            "drafted": res.drafted, "accepted": res.accepted, "output": res.tokens}  # fmt: skip


def summarize(results, args) -> dict:
    """Per group of prompts (HumanEval, edit) and arm: wall time, tokens per pass, acceptance, speedup over non-SI
    (of the sums, and the worst prompt), and whether the tokens equal non-SI's; the goal."""
    by = {a.arm.name: a.runs for a in results}
    out = {"models loaded in, s": args.session.load_s}
    base = by.get("nonsi")
    for group in ("HumanEval", "edit"):
        idx = [i for i, run in enumerate(results[0].runs) if run["prompt"].startswith(group)]
        for name, runs in by.items():
            rs = [runs[i] for i in idx]
            if not rs:
                continue
            drafted = sum(x["drafted"] for x in rs)
            row = {"wall_s": round(sum(x["wall_s"] for x in rs), 1),
                   "tokens_per_target_pass": round(sum(x["tokens"] for x in rs) / sum(x["target_passes"] for x in rs), 2),
                   "accepted": f"{sum(x['accepted'] for x in rs)}/{drafted}"}  # fmt: skip
            if base:
                row["vs_nonsi"] = round(sum(base[i]["wall_s"] for i in idx) / row["wall_s"], 3)
                row["worst_prompt_vs_nonsi"] = round(min(base[i]["wall_s"] / runs[i]["wall_s"] for i in idx), 3)
                row["same_tokens_as_nonsi"] = all(runs[i]["output"] == base[i]["output"] for i in idx)
            out[f"{group} ({len(idx)} prompts), {name}"] = row
    if base and "dsi-ngram" in by:
        worst = min(b["wall_s"] / d["wall_s"] for b, d in zip(base, by["dsi-ngram"]))
        out["goal"] = (
            f"DSI with the n-gram proposer >= 0.98x non-SI on every prompt: {'met' if worst >= 0.98 else 'not met'} (worst {worst:.3f}x)"
        )
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "wall_s": "wall time of one prompt's generation, s (median over the prompts)",
        "tokens_per_target_pass": "output tokens / target forward passes (the cursor's included)",
        "drafted": "drafts tested",
        "accepted": "drafts accepted",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
    rounds=lambda args: len(todo(args)),
)
