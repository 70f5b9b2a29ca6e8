"""The default pair on the llama backend: non-SI, SI and DSI (Ray, a process per target server, SP 1 and 2) beside
llama.cpp's own draft-model speculative decoding and plain decoding, on the same HumanEval prompts, arms interleaved
per prompt, every arm on the same threads and cores.

Per prompt every arm runs once from a cold cache, in an order that rotates from prompt to prompt (a drift of a
shared machine does not favour one arm): specpar's arms on one Ray engine whose actors are built once (the target
servers in actors, the drafter in the driver: Ray's default here), and llama.cpp's own tools, built from the
source vendored in the llama-cpp-python sdist (benchmarks.llama_cpp_tools): ``llama-speculative-simple`` (the
draft-model speculative decoding of llama-server) and ``llama-completion`` (its plain decoding), both greedy (with
``--no-repack`` on a CPU with AMX, where their repacked AMX matmul faults: ggml-org/llama.cpp#20824); specpar's arms
in the exact mode, or with ``--no-exact`` in the fast mode.

Equal resources: every model computation of every arm runs ``--threads`` threads (default 1: specpar's exact
setting for one-token passes, one per server; llama.cpp's -t, -tb, -td, -tbd get the same number), and every arm
runs on the same cores (``--cores``, default all of the machine's, through ``taskset`` for llama.cpp's tools and
the CPU affinity of this process, which Ray's actors inherit, for specpar's). Times: specpar's generation wall time
(prefill included); llama.cpp's own encode + decode timings (model load excluded). Tokens: each specpar arm against
non-SI's; llama.cpp's texts against specpar's non-SI text (and its speculative text against its plain text).

Round r is prompt r. Each arm's runs carry their time and output; the summary: per arm the ratio of the mean times
to non-SI's, the per-prompt ratios' range, the prompts at >= 0.98x, the acceptance and whether each output equals
non-SI's. Wrap it in ``flock /tmp/specpar-measure.lock`` where others measure on the same machine.

    python -m benchmarks llama_speed [-n 10] [-N 64] [-k 4] [--threads 1] [--cores 0,1]
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

from benchmarks.llama_cpp_tools import cpu_range, same_text, tools
from benchmarks.runner import Arm, Benchmark
from specpar.core.params import SamplingParams

SPECPAR_ARMS = ("nonsi", "si", "dsi sp=1", "dsi sp=2")
LLAMA_ARMS = ("llama.cpp speculative", "llama.cpp plain")
TIMING = re.compile(r"(encoded|decoded)\s+(\d+) tokens in\s+([\d.]+) seconds")
EVAL = re.compile(r"(prompt eval|eval) time =\s+([\d.]+) ms /\s+(\d+)")


def run_llama_cpp(arm: str, bindir: Path, target: Path, drafter: Path, prompt: str, args) -> dict:
    """One llama.cpp run: its generated text and time (ms, encode + decode as it reports them)."""
    threads = str(args.threads)
    from specpar.backends.llama.library import build_has

    common = ["-p", prompt, "-n", str(args.N), "--temp", "0", "--top-k", "1", "-t", threads, "-tb", threads,
              "-c", "2048", "--seed", "0"]  # fmt: skip
    if build_has("AMX_INT8"):  # their repacked AMX matmul faults on AMX CPUs (ggml-org/llama.cpp#20824)
        common.append("--no-repack")
    if arm == "llama.cpp speculative":
        cmd = [str(bindir / "llama-speculative-simple"), "-m", str(target), "-md", str(drafter),
               "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0",
               "-td", threads, "-tbd", threads, *common]  # fmt: skip
    else:
        cmd = [str(bindir / "llama-completion"), "-m", str(target), "-no-cnv", "--no-display-prompt", *common]
    cmd = ["taskset", "-c", args.cores, *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{arm} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    text = proc.stdout
    if arm == "llama.cpp speculative":
        ms = sum(float(m[2]) * 1000 for m in TIMING.findall(proc.stderr))
        text = text[2:] if text.startswith("\n\n") else text  # the tool writes two newlines, the prompt, the output
        text = text[len(prompt) :] if text.startswith(prompt) else text
        accept = re.search(r"accept\s+=\s+([\d.]+)%", proc.stderr + proc.stdout)
        extra = {"acceptance_rate": float(accept.group(1)) / 100 if accept else None}
    else:
        ms = sum(float(m[1]) for m in EVAL.findall(proc.stderr))
        extra = {}
    return {"text": text, "time_ms": ms, "process_s": wall, **extra}


def load_models(threads: int, exact: bool = True):
    """The default pair on llama.cpp in the exact or the fast mode, every forward pass on ``threads`` threads."""
    from specpar.backends import weights
    from specpar.backends.llama.model import LlamaModel
    from specpar.backends.llama.settings import LlamaSettings
    from specpar.backends.loading import load_pair

    target, drafter = load_pair(backend="llama", progress=False, exact=exact)
    paths = weights.joined_path(weights.TARGET), weights.joined_path(weights.DRAFTER)
    if threads != 1 or not exact:  # equal threads: the same count in one-token passes (exact here: contexts < 257)
        settings = LlamaSettings(exact=exact, threads=threads, batch_threads=threads)
        target = LlamaModel(paths[0], name=target.name, settings=settings)
        drafter = LlamaModel(paths[1], name=drafter.name, settings=settings)
    return target, drafter, paths


def options(p) -> None:
    p.add_argument("-n", type=int, default=10, help="HumanEval prompts, one round each (default 10)")
    p.add_argument("-N", type=int, default=64, help="tokens per prompt (default 64)")
    p.add_argument("-k", type=int, default=4, help="lookahead, and llama.cpp's --draft-max (default 4)")
    p.add_argument("--threads", type=int, default=1, help="threads of every model computation in every arm: "
                   "llama.cpp's -t, -tb, -td, -tbd and specpar's servers' (default 1: specpar's exact setting)")  # fmt: skip
    p.add_argument("--cores", default=",".join(str(c) for c in sorted(os.sched_getaffinity(0))),
                   help="the CPUs every arm runs on (taskset list; default all this process may use)")  # fmt: skip
    p.add_argument("--no-exact", dest="exact", action="store_false", help="specpar's arms in the fast mode")


def arms(args) -> list[Arm]:
    return [Arm(a) for a in SPECPAR_ARMS + LLAMA_ARMS]


@contextlib.contextmanager
def session(args):
    """This process (and Ray's actors, which inherit it) on --cores; llama.cpp's tools built; the pair loaded; one
    Ray engine (units=1: the two target servers and the drafter one unit, each request on all of them: the default
    of sp_degree + 1 units would make a third target actor, more than 2 cores can place)."""
    from specpar.entrypoints.engine import Engine
    from specpar.experiments import prompts

    os.sched_setaffinity(0, {int(c) for part in args.cores.split(",") for c in cpu_range(part)})
    bindir = tools()
    target, drafter, paths = load_models(args.threads, args.exact)
    engine = Engine(
        target, drafter, sp_degree=2, runtime="ray", max_model_len=2048, cpus_per_server=args.threads, units=1
    )
    try:
        yield SimpleNamespace(bindir=bindir, paths=paths, engine=engine, target=target,
                              prompts=prompts.load("humaneval", args.n))  # fmt: skip
    finally:
        engine.close()


def measure(arm: Arm, args, r: int) -> dict:
    s = args.session
    prompt = s.prompts[r]
    if arm.name in LLAMA_ARMS:
        return run_llama_cpp(arm.name, s.bindir, *s.paths, prompt.text, args)
    algorithm = arm.name.split()[0]
    s.engine.reset()
    res = s.engine.generate(prompt.token_ids(s.target), SamplingParams(temperature=0, max_tokens=args.N),
                            algorithm=algorithm, lookahead=args.k, sp_degree=2 if arm.name.endswith("sp=2") else 1)  # fmt: skip
    return {"tokens": res.tokens, "text": res.text, "time_ms": res.time_ms, "algorithm": res.algorithm,
            "acceptance_rate": res.acceptance_rate if algorithm != "nonsi" else None}  # fmt: skip


def summarize(results, args) -> dict:
    """Per arm: the ratio of mean times to non-SI's, the per-prompt ratios' range, the prompts at >= 0.98x, the mean
    acceptance, and the outputs equal to non-SI's (tokens for specpar's arms, text for llama.cpp's)."""
    runs = {a.arm.name: a.runs for a in results}
    rows = [{arm: runs[arm][r] for arm in runs} for r in range(args.rounds)]
    out = {}
    base = [row["nonsi"]["time_ms"] for row in rows]
    for arm in runs:
        times = [row[arm]["time_ms"] for row in rows]
        per = [b / t for b, t in zip(base, times)]
        acc = [row[arm]["acceptance_rate"] for row in rows if row[arm].get("acceptance_rate") is not None]
        same = f"{sum(same_as_nonsi(row, arm) for row in rows)}/{len(rows)}"
        if arm == "llama.cpp speculative":
            same += f"; {sum(same_text(row[arm]['text'], row['llama.cpp plain']['text']) for row in rows)}/{len(rows)}"
            same += " = llama.cpp plain's text"
        out[arm] = {"mean_s": round(statistics.mean(times) / 1000, 2),
                    "vs_nonsi": round(statistics.mean(base) / statistics.mean(times), 2),
                    "per_prompt_vs_nonsi": f"{min(per):.2f}-{max(per):.2f}",
                    "prompts_at_0.98x": f"{sum(p >= 0.98 for p in per)}/{len(rows)}",
                    "acceptance": round(statistics.mean(acc), 2) if acc else None, "same_as_nonsi": same}  # fmt: skip
    return out


def same_as_nonsi(row: dict, arm: str) -> bool:
    """Whether an arm's output equals non-SI's: its tokens (specpar's arms) or its text (llama.cpp's tools)."""
    if arm in SPECPAR_ARMS:
        return row[arm]["tokens"] == row["nonsi"]["tokens"]
    return same_text(row[arm]["text"], row["nonsi"]["text"])


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "time_ms": "generation time, ms (specpar's: wall, prefill included; llama.cpp's: its encode + decode)",
        "acceptance_rate": "accepted / drafted",
        "process_s": "llama.cpp's tools: the process's wall time, s",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
    rounds=lambda args: args.n,
)
