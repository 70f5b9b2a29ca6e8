"""The README's chain-vs-tree table from a ``specpar bench --arm ... -o FILE`` JSONL (one row per prompt and arm).

Each arm of the bench is an arm here. Over the prompts every arm completed (a run cut short keeps its rows): tokens
per target pass per prompt and overall (output tokens / target forward passes, load-independent), target and
drafter passes, wall time and its ratio to the first SI arm's, and whether every output equals non-SI's, token for
token.

    python -m benchmarks bench_arms_table benchmarks/results/trees_best_first_default_pair.jsonl
"""

from __future__ import annotations

import functools
import json

from benchmarks.runner import Arm, Benchmark


def options(p) -> None:
    p.add_argument("jsonl", help="a `specpar bench --arm ... -o` file")


@functools.cache
def read(path: str) -> tuple[dict, tuple[str, ...], tuple[str, ...]]:
    """(rows by (arm, prompt), the arms in order, the prompts every arm completed)."""
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    arms = tuple(dict.fromkeys(r["arm"] for r in rows))
    by = {(r["arm"], r["prompt_id"]): r for r in rows}
    prompts = tuple(p for p in dict.fromkeys(r["prompt_id"] for r in rows) if all((a, p) in by for a in arms))
    return by, arms, prompts


def arms(args) -> list[Arm]:
    _, names, prompts = read(args.jsonl)
    return [Arm(name, {"prompts": len(prompts)}) for name in names]


def measure(arm: Arm, args, r: int) -> dict:
    by, names, prompts = read(args.jsonl)
    rs = [by[arm.name, p] for p in prompts]
    first_si = next((a for a in names if a != "nonsi"), None)
    base_s = sum(by[first_si, p]["time_ms"] for p in prompts) / 1000 if first_si else None
    tokens, target = sum(len(x["tokens"]) for x in rs), sum(x["target_forwards"] for x in rs)
    wall = sum(x["time_ms"] for x in rs) / 1000
    return {
        "tokens_per_pass_per_prompt": " ".join(f"{len(x['tokens']) / x['target_forwards']:.2f}" for x in rs),
        "tokens_per_pass": tokens / target,
        "target_passes": target,
        "drafter_passes": sum(x["drafter_forwards"] for x in rs),
        "wall_s": wall,
        "vs_first_si": base_s / wall if base_s and arm.name != "nonsi" else None,
        "same_tokens": None if arm.name == "nonsi" else all(x["same_tokens_as_nonsi"] for x in rs),
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "tokens_per_pass_per_prompt": "output tokens / target forward passes, per prompt",
        "tokens_per_pass": "the same over every prompt",
        "target_passes": "target forward passes",
        "drafter_passes": "drafter forward passes",
        "wall_s": "wall time over the prompts, s",
        "vs_first_si": "the first SI arm's wall time / this arm's",
        "same_tokens": "every output equals non-SI's, token for token",
    },
    arms=arms,
    measure=measure,
    options=options,
)
