"""Does one model's decode step slow down while another model decodes on the other core? (Issue 10 item 4.)

The virtual clock prices each server's pass at what it costs alone on its core (`specpar profile` under
`taskset -c 0`). DSI overlaps the drafter with the target, so if the two passes contend for something the cores
share (memory bandwidth: a float32 1.5B model reads about 6 GB of weights per decode step), every overlapped pass
costs more than the profile says and DSI falls short of the prediction. The arms: each model alone pinned to its
core (one torch thread), then both at once; each reports its models' median ms per decode step.

    python -m benchmarks core_contention TARGET_DIR DRAFTER_DIR
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.runner import Arm, Benchmark

ROOT = Path(__file__).resolve().parent.parent


def options(p) -> None:
    p.add_argument("target", help="the target's model directory")
    p.add_argument("drafter", help="the drafter's model directory")
    p.add_argument("--steps", type=int, default=12, help="target decode steps timed (the drafter times 2.5x)")


def arms(args) -> list[Arm]:
    return [Arm("target alone", {"jobs": ["target"]}), Arm("drafter alone", {"jobs": ["drafter"]}),
            Arm("both at once", {"jobs": ["target", "drafter"]})]  # fmt: skip


def measure(arm: Arm, args, r: int) -> dict:
    jobs = {"target": (args.target, 0, args.steps), "drafter": (args.drafter, 1, int(2.5 * args.steps))}
    times = run([jobs[name] for name in arm.settings["jobs"]])
    return {f"{name}_ms_per_step": ms for name, ms in zip(arm.settings["jobs"], times)}


def summarize(results, args) -> dict:
    alone = {k: v for a in results[:2] for k, v in a.figures.items()}
    both = results[2].figures
    return {f"{name} step beside the other / alone": both[f"{name}_ms_per_step"] / alone[f"{name}_ms_per_step"]
            for name in ("target", "drafter")}  # fmt: skip


def run(jobs: list[tuple[str, int, int]]) -> list[float]:
    """Start every (model_dir, core, steps) worker, all timing from the same moment; their median ms/step."""
    start_at = time.time() + 45  # after both have loaded (about 15 s each here)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.core_contention", d, str(c), str(n), str(start_at)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )  # fmt: skip
        for d, c, n in jobs
    ]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def worker(model_dir: str, core: int, steps: int, start_at: float) -> None:
    """Pinned to ``core``, one torch thread: prefill a short prompt, wait for ``start_at``, time decode steps."""
    os.sched_setaffinity(0, {core})
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.arange(100, 164).unsqueeze(0)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(2):  # warm: weights paged in
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        while time.time() < start_at:
            time.sleep(0.01)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            times.append((time.perf_counter() - t0) * 1000)
    print(f"{statistics.median(times):.1f}")


BENCHMARK = Benchmark(
    description=__doc__,
    reports={"target_ms_per_step": "the target's decode step, median, ms", "drafter_ms_per_step": "the drafter's"},
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
)

if __name__ == "__main__":  # a worker: MODEL_DIR CORE STEPS START_AT
    worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
