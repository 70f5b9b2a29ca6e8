"""Where a drafter is unsure, and whether it is right there: the signal best-first token trees grow on.

Reads the non-SI rows of a ``specpar bench --out`` file (each prompt's greedy target output), runs the drafter once
over each prompt and its output (teacher-forced: the drafter's row at every position of the target's text), and
reports how often the drafter's top token is the target's, its confidence q(top) where it is right and where it is
wrong, the rank and probability of the target's token where it is wrong (a second candidate pays only there), and
the hit rate by confidence (calibration). A best-first tree of B nodes adds a sibling at depth d only when the
path probability to it times q(sibling) beats the chain's deepest nodes, so it branches only where q(top) is low.

    .venv/bin/python benchmarks/drafter_confidence.py benchmarks/results/trees_best_first_default_pair.jsonl \\
        --drafter ~/.cache/specpar/qwen2.5-coder-0.5b-instruct-q4_k_m/float32
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench_out", help="a specpar bench --out JSONL with non-SI rows")
    p.add_argument("--drafter", required=True, help="the drafter's model directory")
    args = p.parse_args()

    from specpar.backends.transformers_model import TransformersModel
    from specpar.experiments import prompts

    drafter = TransformersModel(args.drafter, device="cpu")
    rows = [json.loads(line) for line in open(args.bench_out)]
    outputs = {r["prompt_id"]: r["tokens"] for r in rows if r["algorithm"] == "nonsi"}
    chosen = {x.id: x for x in prompts.load("humaneval", None) if x.id in outputs}
    right, wrong, target_q, ranks, by_bin = [], [], [], [], {}
    bins = [0.0, 0.5, 0.8, 0.95, 0.99, 1.0001]
    for pid, out in outputs.items():
        ids = chosen[pid].token_ids(drafter)
        q = rows_over(drafter, ids + out)[len(ids) - 1 : len(ids) - 1 + len(out)]
        for row, token in zip(q, out):
            top = int(row.argmax())
            conf = float(row[top])
            hit = top == token
            (right if hit else wrong).append(conf)
            b = next(i for i in range(len(bins) - 1) if conf < bins[i + 1])
            by_bin.setdefault(b, []).append(hit)
            if not hit:
                target_q.append(float(row[token]))
                ranks.append(int((row > row[token]).sum()) + 1)
    n = len(right) + len(wrong)
    print(f"{len(outputs)} prompts, {n} positions of the target's greedy output; drafter {drafter.name}")
    print(f"drafter's top token is the target's: {len(right) / n:.3f}")
    print(f"q(top) where right: {quantiles(right)}")
    print(f"q(top) where wrong: {quantiles(wrong)}")
    print(f"q(target's token) where wrong: {quantiles(target_q)}")
    if ranks:
        second = sum(r == 2 for r in ranks) / len(ranks)
        top8 = sum(r <= 8 for r in ranks) / len(ranks)
        print(f"rank of the target's token where wrong: 2nd {second:.2f}, within top 8 {top8:.2f}")
    print("hit rate by confidence q(top):")
    for b in sorted(by_bin):
        hits = by_bin[b]
        print(
            f"  [{bins[b]:.2f}, {min(bins[b + 1], 1.0):.2f}): {len(hits):4d} positions, hit {statistics.fmean(hits):.3f}"
        )


if __name__ == "__main__":
    main()
