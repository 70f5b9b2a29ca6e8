"""The README's chain-vs-tree table from a ``specpar bench --arm ... --out FILE`` JSONL (one row per prompt and arm).

Per arm, over the prompts every arm completed (a run cut short keeps its rows): tokens per target pass per prompt
and overall (output tokens / target forward passes, load-independent), drafter passes, wall time and its ratio to
the first SI arm's, and whether every output equals non-SI's, token for token.

    .venv/bin/python benchmarks/bench_arms_table.py benchmarks/results/trees_best_first_default_pair.jsonl
"""

from __future__ import annotations

import argparse
import json


def table(path: str) -> str:
    rows = [json.loads(line) for line in open(path)]
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    by = {(r["arm"], r["prompt_id"]): r for r in rows}
    prompts = [p for p in dict.fromkeys(r["prompt_id"] for r in rows) if all((a, p) in by for a in arms)]
    first_si = next((a for a in arms if a != "nonsi"), None)
    base_s = sum(by[first_si, p]["time_ms"] for p in prompts) / 1000 if first_si else None
    lines = [
        f"{len(prompts)} prompts complete for every arm ({', '.join(p.split('/')[-1] for p in prompts)})",
        f"{'arm':<18} {'tokens/target pass per prompt':<{7 * len(prompts)}} {'overall':>7} {'target':>6} "
        f"{'drafter':>7} {'wall s':>7} {'vs ' + str(first_si):>10} {'same tokens':>11}",
    ]
    for arm in arms:
        rs = [by[arm, p] for p in prompts]
        tokens = sum(len(r["tokens"]) for r in rs)
        target = sum(r["target_forwards"] for r in rs)
        wall = sum(r["time_ms"] for r in rs) / 1000
        per = " ".join(f"{len(r['tokens']) / r['target_forwards']:6.2f}" for r in rs)
        same = "-" if arm == "nonsi" else ("yes" if all(r["same_tokens_as_nonsi"] for r in rs) else "NO")
        ratio = f"{base_s / wall:.2f}x" if base_s and arm != "nonsi" else "-"
        lines.append(
            f"{arm:<18} {per:<{7 * len(prompts)}} {tokens / target:>7.2f} {target:>6} "
            f"{sum(r['drafter_forwards'] for r in rs):>7} {wall:>7.1f} {ratio:>10} {same:>11}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jsonl", help="a specpar bench --out file written with --arm")
    print(table(p.parse_args().jsonl))


if __name__ == "__main__":
    main()
