"""The price of each exact setting on the llama backend (each switched to llama.cpp's default alone), and the modes.

For the default pair's target and one HumanEval prompt, every arm runs in a process of its own (ggml reads
``GGML_CPU_TILED_MM`` once per process) and measures:

* prefill_ms: the prompt's prefill (median of --repeats), in the arm's passes; first_token_ms: the same plus the
  row of its last token (the time to the first output token);
* decode_ms: a decode step (the median of the one-token passes below); verify4_ms: a pass over 5 tokens after a
  cut cache (SI's verification of k = 4 drafts; median);
* exact: whether its rows stay exact, compared bitwise (float32 logits) as tests/backends/test_llama_exactness.py
  does. The reference is the arm's own one-token decoding of --reference tokens after the prompt (prefilled as
  the arm prefills it); against it, verifications of k = 1 .. 16 drafts after a cut cache, at the prompt's end and
  past 256 cached tokens (where a one-token pass on several threads splits attention), and a catch-up of 70
  tokens and 4 drafts in one call on a second server that prefilled the prompt. "yes" = every row equal;
  crashed: the process died (llama.cpp's AMX kernels, which repacking takes on an AMX CPU, fault on some machines).

Arms: "exact before" is issue 22's exact mode (the prompt in exact passes of 63 tokens, the tiled matmul off); each
of flash attention off, repacked weights, passes of 512, the tiled matmul on, 2 threads per one-token pass and 2 per
batched pass changes one setting of it to llama.cpp's default. "exact mode" is this version's (the tiled matmul on,
the prompt in its canonical passes of up to 512, passes of 7 after it), on 1 and 2 batch threads; "fast mode" is
``exact=False`` (1 and 2 threads); "llama.cpp defaults" adds repacked weights to the fast mode, as llama.cpp's
tools run. llama.cpp's own default for flash attention is ``auto``, which turns it on for a model on the CPU: not a
price. Wrap it in ``flock /tmp/specpar-measure.lock`` where others measure on the same machine.

    python -m benchmarks llama_settings_price [--prompt 0] [--repeats 3] [--reference 200] [--arms A,B]
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.llama_costs import median_ms
from benchmarks.runner import Arm, Benchmark

HERE = Path(__file__).resolve().parent

# name: (LlamaSettings keywords, GGML_CPU_TILED_MM, prompt given to the servers, what the arm changes)
OLD = {"ubatch": 63, "batch_threads": 1}
ARMS = {
    "exact before": (OLD, "0", False, "issue 22: every pass <= 63 tokens, the tiled matmul off, 1 thread"),
    "flash attention off": ({**OLD, "flash_attn": False}, "0", False, "attention as two matmuls"),
    "repacked weights": ({**OLD, "repack": True}, "0", False, "use_extra_bufts: AMX or repacked gemm/gemv"),
    "passes of 512": ({**OLD, "ubatch": 512}, "0", False, "n_ubatch 512: 64+ query rows take tiled flash attn"),
    "tiled matmul on": (OLD, "1", False, "GGML_CPU_TILED_MM=1: the tiled K-quant matmul from 8 rows"),
    "2 threads per one-token pass": ({**OLD, "threads": 2}, "0", False, "n_threads 2"),
    "2 threads per batched pass": ({**OLD, "batch_threads": 2}, "0", False, "n_threads_batch 2"),
    "exact mode": ({"batch_threads": 1}, None, True, "the prompt in canonical passes of <= 512, then passes of 7"),
    "exact mode (2 batch threads)": ({"batch_threads": 2}, None, True, "the same, 2 threads per batched pass"),
    "fast mode (1 thread)": ({"exact": False, "threads": 1, "batch_threads": 1}, None, True, "exact=False"),
    "fast mode (2 threads)": ({"exact": False, "threads": 2, "batch_threads": 2}, None, True, "exact=False"),
    "llama.cpp defaults (1 thread)": (
        {"exact": False, "threads": 1, "batch_threads": 1, "repack": True},
        None,
        True,
        "the fast mode with repacked weights",
    ),
}
KS = range(1, 17)
CATCH_UP = 70


def measure_here(name: str, prompt: int, repeats: int, reference: int) -> dict:
    """One arm, in this process (its GGML_CPU_TILED_MM set by the parent)."""
    import warnings

    from specpar.backends import weights
    from specpar.backends.llama.model import LlamaModel
    from specpar.backends.llama.settings import LlamaSettings
    from specpar.core.decoding import Decoding
    from specpar.core.errors import SpecparWarning
    from specpar.experiments import prompts

    kwargs, _tiled, canonical, _what = ARMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecparWarning)
        model = LlamaModel(weights.joined_path(weights.TARGET), settings=LlamaSettings(**kwargs))
    ids = prompts.load("humaneval", prompt + 1)[prompt].token_ids(model)
    p = len(ids)
    dec = Decoding(prompt_len=p if canonical else 0)
    server = model.server("a", n_ctx=1024)
    prefill_ms = median_ms(lambda: _prefill(server, ids, p, dec), repeats)  # the prompt's tokens (none of their rows)
    first_ms = median_ms(lambda: _prefill(server, ids, p - 1, dec), repeats)
    seq, rows, steps = _one_token_decoding(server, ids, dec, reference)
    bad = _checks(model, server, seq, rows, dec, p, reference)
    server._sync(tuple(seq[: p + 40]), p + 39, dec)
    verify_ms = median_ms(lambda: server._sync(tuple(seq[: p + 40]), p + 35, dec), 5)  # cut 5 back, a pass over them
    return {
        "prompt_tokens": p,
        "prefill_ms": prefill_ms,
        "first_token_ms": first_ms,
        "decode_ms": statistics.median(steps),
        "verify4_ms": verify_ms,
        "exact": "yes" if not bad else f"no ({len(bad)} checks; first: {bad[0]})",
        "settings": model.settings.describe(),
        "load": os.getloadavg()[0],
    }


def _prefill(server, ids: list[int], upto: int, dec):
    """A cold prefill of the prompt ``ids``; the logits of its inputs from ``upto`` on."""
    server.reset()
    return server._sync(tuple(ids), upto, dec)


def _one_token_decoding(server, ids: list[int], dec, n: int) -> tuple[list[int], dict, list[float]]:
    """The arm's reference: the prompt prefilled, then ``n`` greedy tokens one pass each; (the sequence, {position:
    the float32 row after it}, each step's ms)."""
    p = len(ids)
    rows = {p: _prefill(server, ids, p - 1, dec)[-1].copy()}  # the row after position p - 1: the first output's
    seq, steps = list(ids), []
    for _ in range(n):
        seq.append(int(rows[len(seq)].argmax()))
        t0 = time.perf_counter()
        rows[len(seq)] = server._sync(tuple(seq), len(seq) - 1, dec)[-1].copy()
        steps.append((time.perf_counter() - t0) * 1000)
    return seq, rows, steps


def _checks(model, server, seq: list[int], rows: dict, dec, p: int, reference: int) -> list[str]:
    """The checks whose rows differ from the reference's (bitwise): verifications of k = 1 .. 16 drafts after a cut
    cache at the prompt's end and past 256 cached tokens, and a catch-up with drafts on a second server."""
    import numpy as np

    bad = []

    def check(s, end: int, k: int, what: str):
        got = s._sync(tuple(seq[:end]), end - k - 1, dec)
        if not all(np.array_equal(row, rows[end - k + i]) for i, row in enumerate(got)):
            bad.append(what)

    for base in (p + 3, p + reference - 40):
        for k in KS:
            check(server, base + (7 * k) % 20 + k, k, f"verify k={k} from {base}")
    second = model.server("b", n_ctx=1024)
    _prefill(second, seq[:p], p - 1, dec)
    check(second, p + CATCH_UP + 4, CATCH_UP + 3, f"catch-up of {CATCH_UP} + 4 drafts")
    return bad


def options(p) -> None:
    p.add_argument("--prompt", type=int, default=0, help="HumanEval prompt index (default 0: 118 tokens)")
    p.add_argument("--repeats", type=int, default=3, help="prefills per arm (median; default 3)")
    p.add_argument("--reference", type=int, default=200, help="one-token decoded tokens per arm (default 200)")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated arm names (default: all)")


def arms(args) -> list:
    names = [a for a in args.arms.split(",") if a]
    unknown = [a for a in names if a not in ARMS]
    if unknown:
        raise SystemExit(f"llama_settings_price: no arm {unknown}; arms: {', '.join(ARMS)}")
    return [Arm(a, {"settings": ARMS[a][0], "GGML_CPU_TILED_MM": ARMS[a][1] or "(unset)",
                    "canonical prefill": ARMS[a][2], "what": ARMS[a][3]}) for a in names]  # fmt: skip


def measure(arm, args, r: int) -> dict:
    """The arm in a child process (its own GGML_CPU_TILED_MM); a crash is a figure, not an error."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    if ARMS[arm.name][1] is not None:
        env["GGML_CPU_TILED_MM"] = ARMS[arm.name][1]
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", __name__, arm.name, str(args.prompt), str(args.repeats), str(args.reference)]
    out = subprocess.run(cmd, env=env, cwd=HERE.parent, capture_output=True, text=True, check=False)
    if out.returncode < 0:
        return {"exact": f"crashed ({signal.Signals(-out.returncode).name})", "load": os.getloadavg()[0]}
    if out.returncode:
        raise SystemExit(f"arm {arm.name!r} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(results, args) -> dict:
    """Each arm's prefill, first-token, decode and verification speed against "exact before" (>1: faster)."""
    base = {a.arm.name: a.figures for a in results}.get("exact before")
    out = {}
    for a in results:
        f = a.figures
        if base is None or "prefill_ms" not in f:
            continue
        out[a.arm.name] = (
            ", ".join(
                f"{key.removesuffix('_ms')} {base[key] / f[key]:.2f}x"
                for key in ("prefill_ms", "first_token_ms", "decode_ms", "verify4_ms")
            )
            + f"; exact: {f['exact']}"
        )
    return out


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "prefill_ms": "the prompt's prefill, ms",
        "first_token_ms": "prefill with the first output token's row, ms",
        "decode_ms": "a decode step, ms",
        "verify4_ms": "a pass over 5 tokens after a cut cache, ms",
        "exact": "rows bitwise those of one-token decoding",
        "load": "1-min load average at the arm's end",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    rounds=1,
)


if __name__ == "__main__":  # a child: one arm, its figures as JSON
    name, prompt, repeats, reference = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(measure_here(name, prompt, repeats, reference)))
