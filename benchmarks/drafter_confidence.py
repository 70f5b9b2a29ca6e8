"""Where a drafter is unsure, and whether it is right there: the signal best-first token trees grow on.

Reads the non-SI rows of a ``specpar bench -o`` file (each prompt's greedy target output), runs the drafter once
over each prompt and its output (teacher-forced: the drafter's row at every position of the target's text), and
reports how often the drafter's top token is the target's, its confidence q(top) where it is right and where it is
wrong, the rank and probability of the target's token where it is wrong (a second candidate pays only there), and
the hit rate by confidence (calibration). A best-first tree of B nodes adds a sibling at depth d only when the path
probability to it times q(sibling) beats the chain's deepest nodes, so it branches only where q(top) is low.

    python -m benchmarks drafter_confidence benchmarks/results/trees_best_first_default_pair.jsonl \\
        --drafter ~/.cache/specpar/qwen2.5-coder-0.5b-instruct-q4_k_m/float32
"""

from __future__ import annotations

import json
import statistics

import numpy as np

from benchmarks.runner import Arm, Benchmark

BINS = [0.0, 0.5, 0.8, 0.95, 0.99, 1.0001]


def options(p) -> None:
    p.add_argument("bench_output", help="a `specpar bench -o` JSONL with non-SI rows")
    p.add_argument("--drafter", required=True, help="the drafter's model directory")


def arms(args) -> list[Arm]:
    return [Arm("drafter", {"drafter": args.drafter, "bench_output": args.bench_output})]


def rows_over(model, ids: list[int]) -> np.ndarray:
    """[len(ids), V] probabilities: row i is the drafter's next-token law after ids[: i + 1]."""
    import torch

    with torch.inference_mode():
        logits = model.module_on(model.device)(input_ids=torch.tensor([ids])).logits[0]
        return torch.softmax(logits.double(), dim=-1).numpy()


def quantiles(xs) -> str:
    if not xs:
        return "-"
    q = np.quantile(xs, [0.1, 0.5, 0.9])
    return f"p10 {q[0]:.3f}, median {q[1]:.3f}, p90 {q[2]:.3f} (n = {len(xs)})"


def measure(arm: Arm, args, r: int) -> dict:
    from specpar.backends.transformers_model import TransformersModel
    from specpar.experiments import prompts

    drafter = TransformersModel(args.drafter, device="cpu")
    with open(args.bench_output) as f:
        outputs = {row["prompt_id"]: row["tokens"] for row in map(json.loads, f) if row["algorithm"] == "nonsi"}
    chosen = {x.id: x for x in prompts.load("humaneval", None) if x.id in outputs}
    right, wrong, target_q, ranks, by_bin = [], [], [], [], {}
    for pid, out in outputs.items():
        ids = chosen[pid].token_ids(drafter)
        q = rows_over(drafter, ids + out)[len(ids) - 1 : len(ids) - 1 + len(out)]
        for row, token in zip(q, out):
            top = int(row.argmax())
            hit = top == token
            (right if hit else wrong).append(float(row[top]))
            by_bin.setdefault(next(i for i in range(len(BINS) - 1) if row[top] < BINS[i + 1]), []).append(hit)
            if not hit:
                target_q.append(float(row[token]))
                ranks.append(int((row > row[token]).sum()) + 1)
    return {
        "prompts": len(outputs),
        "positions": len(right) + len(wrong),
        "top_is_target": len(right) / (len(right) + len(wrong)),
        "q_top_where_right": quantiles(right),
        "q_top_where_wrong": quantiles(wrong),
        "q_target_where_wrong": quantiles(target_q),
        "target_second_where_wrong": sum(k == 2 for k in ranks) / len(ranks) if ranks else None,
        "target_in_top8_where_wrong": sum(k <= 8 for k in ranks) / len(ranks) if ranks else None,
        "hit_rate_by_q_top": {
            f"[{BINS[b]:.2f}, {min(BINS[b + 1], 1.0):.2f})": [len(h), statistics.fmean(h)]
            for b, h in sorted(by_bin.items())
        },  # fmt: skip
    }


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "prompts": "prompts read",
        "positions": "positions of the target's greedy output",
        "top_is_target": "share of positions where the drafter's top token is the target's",
        "q_top_where_right": "the drafter's confidence q(top) where it is right",
        "q_top_where_wrong": "q(top) where it is wrong",
        "q_target_where_wrong": "q(the target's token) where it is wrong",
        "target_second_where_wrong": "share of the wrong positions where the target's token is the 2nd",
        "target_in_top8_where_wrong": "share where it is within the top 8",
        "hit_rate_by_q_top": "by q(top) bin: [positions, hit rate]",
    },
    arms=arms,
    measure=measure,
    options=options,
)
