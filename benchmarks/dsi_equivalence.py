"""Same tokens, same times, same forward counts: SI, DSI and HSD(-SP) in two checkouts, over a fixed random set
of configurations on the virtual clock.

A refactor of an algorithm (issue 20: DSI as an explicit state machine, the proposer seam) must not change what
it does. This draws ``--configs`` configurations from a fixed seed (vocabulary, acceptance rate, latencies with
TTFT and per-token costs, lookahead, SP degree, prefill_all / dedicated_cursor, cancel modes and link latency,
chains, uniform and best-first token trees, merged drafters, greedy and sampled decoding with both couplings,
logits processors, stop ids, HSD levels), runs every one in each checkout (a subprocess per checkout, with that
checkout's ``src`` first on the path), and compares the results field by field: tokens, finish reason, time
and TTFT (exactly: floats compared by their repr), target and drafter forward counts, verifications, drafted and
accepted counts per position and per round, HSD's per-level details, and the whole timeline (every task's
server, kind, start, end, cancelled flag, tokens and drafts). A configuration that raises must raise the same
error in both.

    git worktree add /tmp/dsi_before 460d16d
    .venv/bin/python -m benchmarks dsi_equivalence --src /tmp/dsi_before --src .

Each checkout is an arm (its time, and how many configurations raise in it); the summary says how many differ.

The algorithms are called directly, not through ``generate``, so that the script measures the algorithms and not
the option plumbing above them: since issue 31 as ``dsi(g, pools, spec)`` (the Generation, the pools by name, a
SpeculativeConfig) and the others alike; before, ``dsi(runtime, target_pool, drafter, ...)`` with the drafter a
``ModelDrafter`` where the checkout has proposers, else the drafter pool and ``tree=`` as at 460d16d. Exit status 1 when any configuration differs.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.runner import Arm, Benchmark

RUNNER = r"""
import json, sys, traceback
sys.path.insert(0, SRC)
import specpar
assert specpar.__file__.startswith(SRC), f"specpar imported from {specpar.__file__}, not from {SRC}"
from specpar.backends.merged import MergedDrafters
from specpar.backends.simulated import SimulatedModel
from specpar.backends.stack import SimulatedStack
from specpar.core.decoding import Decoding
from specpar.core.latency import LatencyProfile
from specpar.core.logits_processors import LogitsProcessors
from specpar.core.stopping import Stopping
from specpar.core.trees import BestFirst
from specpar.runtimes.base import Pool
from specpar.runtimes.virtual import VirtualRuntime
from specpar.algorithms.dsi import dsi
from specpar.algorithms.hsd import hsd
from specpar.algorithms.hsd_sp import LevelsServer, hsd_sp
from specpar.algorithms.si import si

try:  # since issue 20: a proposer carries the tree (before, the algorithms took tree= beside a drafter pool)
    from specpar.algorithms.proposers import ModelDrafter
except ImportError:
    ModelDrafter = None
try:  # since issue 31: the algorithms take (g, pools, spec)
    from specpar.core.query import Query
    from specpar.algorithms.generation import Generation
    from specpar.core.config import SpeculativeConfig
    NEW_API = True
except ImportError:
    NEW_API = False


def run_new(c, rt, target_pool, drafter, pools, decoding, stopping, tree):
    # the algorithm called as the runner calls it: a Generation, the pools by name, the spec
    algorithm = c["algorithm"]
    g = Generation(Query(c["prompt"], c["max_new_tokens"], decoding, stopping), rt)
    if algorithm == "hsd":
        named = {f"level{i}": p for i, p in enumerate(pools)}
        spec = SpeculativeConfig(algorithm="hsd", buffers=c["buffers"])
        return hsd(g, named, spec)
    if algorithm == "hsd-sp":  # HSD-SP ran DSI without its modes before issue 31
        spec = SpeculativeConfig(algorithm="hsd-sp", buffers=c["buffers"], prefill_replicas=False,
                                 dedicated_cursor=False)
        return hsd_sp(g, {"levels": drafter, "target": target_pool}, spec)
    modes = {"prefill_replicas": c["prefill_all"], "dedicated_cursor": c["dedicated_cursor"]}
    spec = SpeculativeConfig(algorithm=algorithm, lookahead=c["lookahead"], tree=tree,
                             **(modes if algorithm == "dsi" else {}))
    pools = {"drafter": drafter, "target": target_pool}
    return (dsi if algorithm == "dsi" else si)(g, pools, spec)


def latency(spec):
    return LatencyProfile(*spec)


def run(c):
    target = SimulatedModel(c["vocab"], seed=c["seed"], latency=latency(c["target_latency"]))
    drafters = [target.drafter(a, latency(lat), seed=s) for a, lat, s in c["drafters"]]
    processors = LogitsProcessors(**c["processors"]) if c["processors"] else None
    decoding = Decoding(c["temperature"], c["decoding_seed"], processors, c["coupling"])
    stopping = Stopping(stop_ids=c["stop_ids"]) if c["stop_ids"] else None
    tree = c["tree"]
    if isinstance(tree, list) and tree and tree[0] == "best":
        tree = BestFirst(*tree[1:])
    elif tree is not None:
        tree = tuple(tree)
    algorithm, n, k, sp = c["algorithm"], c["max_new_tokens"], c["lookahead"], c["sp_degree"]
    if algorithm in ("si", "dsi"):
        if len(drafters) > 1:
            drafter = Pool([MergedDrafters([d.server(f"drafter{i}") for i, d in enumerate(drafters)])], "drafter")
        else:
            drafter = Pool([drafters[0].server("drafter0")], "drafter")
        target_pool = Pool([target.server(f"target{i}") for i in range(sp if algorithm == "dsi" else 1)], "target")
        pools = [drafter, target_pool]
    elif algorithm == "hsd-sp":
        drafter = Pool([LevelsServer([d.server(f"level{i}") for i, d in enumerate(drafters)], c["buffers"][:-1])], "levels")
        target_pool = Pool([target.server(f"target{i}") for i in range(sp)], "target")
        pools = [drafter, target_pool]
    else:
        pools = [Pool([m.server(f"level{i}")], f"level{i}") for i, m in enumerate(drafters + [target])]
        drafter = target_pool = None
    rt = VirtualRuntime(pools, cancel_frees=c["cancel_frees"], link_ms=c["link_ms"])
    prompt = c["prompt"]
    trees = {}
    if algorithm in ("si", "dsi") and not NEW_API:
        if ModelDrafter is not None:
            drafter = ModelDrafter(rt, drafter, tree)
        else:
            trees["tree"] = tree
    with rt:
        if NEW_API:  # since issue 31: the runner makes the Generation; each algorithm takes (g, pools, spec)
            r = run_new(c, rt, target_pool, drafter, pools, decoding, stopping, tree)
        elif algorithm == "dsi":
            r = dsi(rt, target_pool, drafter, prompt, n, k, decoding, None, stopping,
                    prefill_all=c["prefill_all"], dedicated_cursor=c["dedicated_cursor"], **trees)
        elif algorithm == "si":
            r = si(rt, target_pool, drafter, prompt, n, k, decoding, None, stopping, **trees)
        elif algorithm == "hsd-sp":
            r = hsd_sp(rt, target_pool, drafter, prompt, n, c["buffers"][-1], decoding, None, stopping)
        else:
            r = hsd(rt, pools, prompt, n, c["buffers"], decoding, None, stopping)
    return {
        "tokens": r.tokens,
        "finish_reason": r.finish_reason,
        "time_ms": repr(r.time_ms),
        "ttft_ms": repr(r.ttft_ms),
        "target_forwards": r.target_forwards,
        "drafter_forwards": r.drafter_forwards,
        "verifications": r.verifications,
        "drafted": r.drafted,
        "accepted": r.accepted,
        "accepted_per_round": r.accepted_per_round,
        "position_drafted": r.position_drafted,
        "position_accepted": r.position_accepted,
        "lookahead": r.lookahead,
        "sp_degree": r.sp_degree,
        "details": r.details,
        "timeline": [
            [x.server, x.kind, repr(x.start_ms), repr(x.end_ms), x.cancelled, x.tokens, x.drafts] for x in r.timeline
        ],
    }


with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        c = json.loads(line)
        try:
            result = run(c)
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(result) + "\n")
"""


def latency(rng: random.Random, scale: float = 1.0) -> list[float]:
    """[ttft, tpot, per_token] in ms: uniform (the paper's time unit), a costly prefill, or a cost per token."""
    tpot = round(rng.uniform(0.05, 20.0) * scale, 3)
    kind = rng.random()
    if kind < 0.4:
        return [tpot, tpot, 0.0]
    ttft = round(tpot * rng.uniform(1.0, 30.0), 3)
    per_token = round(tpot * rng.uniform(0.0, 0.5), 3) if kind > 0.7 else 0.0
    return [ttft, tpot, per_token]


def configuration(rng: random.Random) -> dict:
    """One configuration, as JSON, drawn from ``rng``."""
    algorithm = rng.choices(["dsi", "si", "hsd-sp", "hsd"], weights=[70, 20, 6, 4])[0]
    vocab = rng.choice([2, 3, 5, 8, 16, 32, 100])
    target = latency(rng)
    n_drafters = 1
    tree = None
    if algorithm in ("si", "dsi") and rng.random() < 0.4:
        if rng.random() < 0.6:
            tree = [rng.randint(1, 3) for _ in range(rng.randint(1, 4))]
        else:
            tree = ["best", rng.randint(1, 10), rng.randint(1, 3)]
        n_drafters = rng.choices([1, 2, 3], weights=[6, 3, 1])[0]
    elif algorithm in ("hsd", "hsd-sp"):
        n_drafters = rng.randint(1, 3)
    c = [rng.uniform(0.01, 0.9) for _ in range(n_drafters)]
    if algorithm in ("hsd", "hsd-sp"):
        c.sort()  # smaller (faster) levels first
    drafters = [
        [rng.choice([0.0, 0.3, 0.5, 0.8, 0.9, 1.0, round(rng.random(), 3)]), latency(rng, ci * target[1] / 10), i + 1]
        for i, ci in enumerate(c)
    ]
    sampled = rng.random() < 0.5
    processors = {}
    if tree is None and rng.random() < 0.15:
        processors = rng.choice(
            [{"top_k": rng.randint(1, 4)}, {"top_p": 0.8}, {"min_p": 0.1}, {"repetition_penalty": 1.3}]
        )
    return {
        "algorithm": algorithm,
        "vocab": vocab,
        "seed": rng.randrange(1 << 30),
        "target_latency": target,
        "drafters": drafters,
        "temperature": rng.choice([0.5, 1.0, 1.5]) if sampled else 0.0,
        "decoding_seed": rng.randrange(1 << 30),
        "coupling": rng.choice(["rejection", "gumbel"]) if sampled else "rejection",
        "processors": processors,
        "stop_ids": rng.sample(range(vocab), min(vocab - 1, rng.randint(1, 2))) if rng.random() < 0.25 else [],
        "tree": tree,
        "max_new_tokens": rng.choice([1, 2, 3, rng.randint(1, 40), rng.randint(20, 80)]),
        "lookahead": rng.randint(1, 8),
        "sp_degree": rng.randint(1, 8),
        "prefill_all": rng.random() < 0.4,
        "dedicated_cursor": rng.random() < 0.4,
        "buffers": [rng.randint(1, 5) for _ in range(n_drafters)],
        "cancel_frees": rng.choice(["now", "now", "end", {"target": "end"}]),
        "link_ms": rng.choice([0.0, 0.0, 0.0, 0.3, {"target": 1.5}]),
        "prompt": [rng.randrange(vocab) for _ in range(rng.randint(1, 6))],
    }


def options(p) -> None:
    p.add_argument("--src", action="append", type=Path, required=True, help="a checkout (give two)")
    p.add_argument("--configs", type=int, default=10_000, help="configurations (default 10,000)")
    p.add_argument("--seed", type=int, default=20, help="of the configurations' draw (default 20)")
    p.add_argument("--show", type=int, default=3, help="differing configurations to show (default 3)")


def arms(args) -> list[Arm]:
    if len(args.src) != 2:
        raise SystemExit("give --src twice: the checkout before and the one after")
    for src in args.src:
        if not (src / "src" / "specpar").is_dir():
            raise SystemExit(f"{src} is not a specpar checkout (no src/specpar)")
    return [Arm(f"{which}: {src}", {"src": str(src.resolve())}) for which, src in zip(("before", "after"), args.src)]


@contextlib.contextmanager
def session(args):
    """The configurations, drawn once, in a file each checkout reads; each checkout's results as it writes them."""
    rng = random.Random(args.seed)
    configs = [configuration(rng) for _ in range(args.configs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "configs.jsonl"
        path.write_text("".join(json.dumps(c) + "\n" for c in configs))
        yield {"configs": configs, "path": path, "tmp": Path(tmp), "results": {}}


def measure(arm: Arm, args, r: int) -> dict:
    """Every configuration in the checkout's own process (its src first on the path)."""
    s = args.session
    out = s["tmp"] / f"out-{len(s['results'])}.jsonl"
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    code = f"SRC = {str(Path(arm.settings['src']) / 'src')!r}\n" + RUNNER
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(s["path"]), str(out)], env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the run in {arm.settings['src']} failed (exit {done.returncode})")
    results = [json.loads(line) for line in out.read_text().splitlines()]
    s["results"][arm.name] = results
    errors = [x["error"] for x in results if "error" in x]
    if len(errors) > len(results) // 10:  # configurations are drawn valid but for a few (e.g. a tree too wide)
        raise RuntimeError(f"{len(errors)} of {len(results)} configurations raise in {arm.settings['src']}: the "
                           "runner is broken there, nothing was compared")  # fmt: skip
    return {"seconds": time.perf_counter() - t0, "configurations": len(results), "raise": len(errors),
            "errors": sorted({e.split(":")[0] for e in errors})}  # fmt: skip


def summarize(results, args) -> dict:
    s = args.session
    before, after = (s["results"][a.arm.name] for a in results)
    differ = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
    counts: dict = {}
    for c in s["configs"]:
        counts[c["algorithm"]] = counts.get(c["algorithm"], 0) + 1
    shown = []
    for i in differ[: args.show]:
        fields = sorted(k for k in set(before[i]) | set(after[i]) if before[i].get(k) != after[i].get(k))
        shown.append({"configuration": s["configs"][i], "fields": fields,
                      "first": {k: [str(before[i].get(k))[:300], str(after[i].get(k))[:300]] for k in fields[:3]}})  # fmt: skip
    return {"configurations by algorithm": counts, "differ": len(differ), "differing (first ones)": shown}


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "seconds": "wall time of the checkout's run, s",
        "configurations": "configurations run",
        "raise": "configurations that raise (the same error in both is equal)",
    },
    arms=arms,
    measure=measure,
    options=options,
    summarize=summarize,
    session=session,
    passed=lambda summary: summary["differ"] == 0,
)
