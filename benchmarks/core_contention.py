"""Does one model's decode step slow down while another model decodes on the other core? (Issue 10 item 4.)

The virtual clock prices each server's pass at what it costs alone on its core (`specpar profile` under
`taskset -c 0`). DSI overlaps the drafter with the target, so if the two passes contend for something the
cores share (memory bandwidth: a float32 1.5B model reads about 6 GB of weights per decode step), every
overlapped pass costs more than the profile says and DSI falls short of the prediction.

    python benchmarks/core_contention.py TARGET_DIR DRAFTER_DIR

Runs each model alone pinned to its core (one torch thread), then both at once, and prints the ms per decode
step in each case.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


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


def run(jobs: list[tuple[str, int, int]]) -> list[float]:
    """Start every (model_dir, core, steps) worker, all timing from the same moment; their median ms/step."""
    start_at = time.time() + 45  # after both have loaded (about 15 s each here)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", d, str(c), str(n), str(start_at)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for d, c, n in jobs
    ]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target")
    p.add_argument("drafter")
    p.add_argument("--steps", type=int, default=12, help="target decode steps timed (the drafter times 2.5x)")
    args = p.parse_args()
    n_t, n_d = args.steps, int(2.5 * args.steps)  # about the same wall time for both
    (t_alone,) = run([(args.target, 0, n_t)])
    (d_alone,) = run([(args.drafter, 1, n_d)])
    t_both, d_both = run([(args.target, 0, n_t), (args.drafter, 1, n_d)])
    print(f"target decode step, core 0: alone {t_alone:.0f} ms, drafter decoding on core 1 {t_both:.0f} ms "
          f"({t_both / t_alone:.2f}x)")  # fmt: skip
    print(f"drafter decode step, core 1: alone {d_alone:.0f} ms, target decoding on core 0 {d_both:.0f} ms "
          f"({d_both / d_alone:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
