"""Measuring a model pair on this machine, through the servers' own calls: the figures of a machine profile.

Every figure is the time of a call (Score, Draft) on a server, read on a runtime's clock, with the thread counts the
engine gives passes: the wall time of a worker thread's call on the threads runtime (real models; the hand-off is
measured apart, :func:`call_overhead_ms`), the latency model's time on the virtual one (simulated models: measuring
one recovers its known costs exactly, the tests' check that each figure measures what it names). Every call carries
its request's prompt length (:func:`request`), as an engine's do: a backend may prefill a prompt in passes of its
own (llama.cpp's exact mode: canonical passes of 512 tokens), so a prefill is timed in the shape requests make.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager

from specpar.algorithms.generation import Generation
from specpar.algorithms.ngram import NgramMatcher
from specpar.algorithms.nonsi import non_si
from specpar.backends.cpu_threads import SharedThreads, cpu_cores, model_uses_torch
from specpar.core.calls import Draft, Score
from specpar.core.config import NGRAM_SIZES, RuntimeConfig, SpeculativeConfig
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.errors import ConfigError
from specpar.core.prefix import common_prefix_len
from specpar.core.query import Query
from specpar.runtimes import Pool, Runtime, make_runtime

NONSI = SpeculativeConfig(algorithm="nonsi")


def request(prompt_len: int) -> Decoding:
    """The decoding of a greedy request whose prompt is ``prompt_len`` tokens (what an engine gives its calls)."""
    return Decoding(prompt_len=prompt_len)


@contextmanager
def runtime_over(servers: Sequence, runtime: str) -> Iterator[tuple[Runtime, list[Pool]]]:
    """A runtime named ``runtime`` over one pool per server (closed at the block's end), and the pools."""
    pools = [Pool([s], s.name) for s in servers]
    rt = make_runtime(RuntimeConfig(name=runtime), pools, ready_made=True)
    try:
        yield rt, pools
    finally:
        rt.close()


def timed(runtime: Runtime, pool: Pool, call) -> tuple[float, object]:
    """(ms the call took on its server, on the runtime's clock; its result), with nothing else in flight."""
    runtime.submit(pool, call)
    task = runtime.wait()
    return task.end - task.start, task.result


def threads(model, servers: Sequence, n: int):
    """Passes of ``servers`` (of ``model``) given ``n`` threads for the block, as the engine sets them."""
    return SharedThreads(model_uses_torch(model), servers)(n)


@contextmanager
def one_server(model, name: str, runtime: str, n_threads: int) -> Iterator[tuple[object, Runtime, Pool]]:
    """A fresh server of ``model`` on a runtime named ``runtime``, its passes given ``n_threads`` threads: (server,
    runtime, its pool), closed at the block's end."""
    with closing(model.server(name)) as server:
        with runtime_over([server], runtime) as (rt, pools), threads(model, [server], n_threads):
            yield server, rt, pools[0]


def thread_counts(cores: int | None = None) -> tuple[int, ...]:
    """The thread counts the engine gives passes on this machine: 1 (a server beside others) and all cores."""
    return tuple(sorted({1, cores or cpu_cores()}))


SPREAD = 0.1
"""A pass length is timed once more (up to ``repeats``) while its timings spread by more than this share."""


def pass_costs(runtime: Runtime, pool: Pool, seq: Sequence[int], held: int, max_pass: int, repeats: int = 3,
               prompt_len: int = 0):  # fmt: skip
    """v(1..max_pass): the median ms of one pass over k new tokens after ``seq[:held]`` (cached), the ks
    interleaved (a drift of the machine's load spreads over all of them): two rounds (one when ``repeats`` is 1),
    then more, up to ``repeats``, of the ks whose timings still spread by more than SPREAD.

    Each timed call scores all k tokens (``Score(context, k - 1)``, a verification of k - 1 drafts); consecutive
    calls alternate two continuations that differ in their first token, so each finds exactly ``seq[:held]`` cached,
    as a verification after a rejection does. prompt_len: the request's prompt (at most ``held``).
    """
    if held < 1 or max_pass < 1 or repeats < 1 or len(seq) < held + max_pass:
        raise ConfigError(f"pass_costs needs held >= 1 and {held + max_pass} tokens, got {len(seq)}")
    seq, decoding = tuple(seq), request(prompt_len)
    first = next((t for t in seq if t != seq[held]), seq[held] + 1)
    tails = (seq[held : held + max_pass], (first, *seq[held + 1 : held + max_pass]))
    timed(runtime, pool, Score(seq[:held], 0, decoding))  # the prefix, cached (not timed)
    # and one pass after it, not timed, so that no timed pass is the first after a prefill (a guard)
    timed(runtime, pool, Score(seq[:held] + tails[1][:1], 0, decoding))
    samples: dict[int, list[float]] = {k: [] for k in range(1, max_pass + 1)}
    calls = 0
    for r in range(repeats):
        todo = [k for k, ms in samples.items() if r < 2 or max(ms) > (1 + SPREAD) * min(ms)]
        for k in todo:
            ms, _ = timed(runtime, pool, Score(seq[:held] + tails[calls % 2][:k], k - 1, decoding))
            samples[k].append(ms)
            calls += 1
    return tuple(statistics.median(samples[k]) for k in samples)


def prefill_ms(model, prompts: Sequence[Sequence[int]], runtime: str, n_threads: int) -> list[float]:
    """The ms of each prompt's first pass on an empty cache (one server of ``model``, reset before each), its batch
    passes given ``n_threads`` threads, as a request of that prompt makes it (:func:`request`)."""
    out = []
    with one_server(model, "prefill", runtime, n_threads) as (server, rt, pool):
        for prompt in prompts:
            server.reset()
            out.append(timed(rt, pool, Score(tuple(prompt), 0, request(len(prompt))))[0])
    return out


def contention(model, seq: Sequence[int], held: int, most: int, runtime: str, passes: int = 8, rounds: int = 3,
               prompt_len: int = 0):  # fmt: skip
    """(f(1), ..., f(most)): how many times longer a one-token pass takes while n servers of ``model`` run such
    passes at once than one server alone, each with the threads the engine gives n busy servers (f(1) = 1.0; below
    1, the machine's other load easing, counts as 1.0). Each server holds ``seq[:held]`` and runs ``rounds`` drafts
    of ``passes`` passes, the n together; ms per pass: the median over servers and rounds.
    """
    servers = [model.server(f"busy{i}") for i in range(most)]
    context, decoding = tuple(seq[:held]), request(prompt_len)
    alone: dict[int, float] = {}  # threads -> ms per pass of one server alone
    out = [1.0]  # f(1): one server alone, by definition (not timed)
    try:
        for n in range(2, most + 1):
            n_threads = max(1, cpu_cores() // n)
            if n_threads not in alone:
                alone[n_threads] = _passes_at_once(model, servers[:1], context, decoding, runtime, n_threads, passes,
                                                   rounds)  # fmt: skip
            together = _passes_at_once(model, servers[:n], context, decoding, runtime, n_threads, passes, rounds)
            out.append(max(1.0, together / alone[n_threads]))
    finally:
        for s in servers:
            s.close()
    return tuple(out[:most])


def _passes_at_once(model, servers, context: tuple, decoding, runtime: str, n_threads: int, passes: int,
                    rounds: int) -> float:  # fmt: skip
    """ms per one-token pass (median) while ``servers`` each hold ``context`` and run ``rounds`` drafts of
    ``passes`` passes after it at once."""
    with runtime_over(servers, runtime) as (rt, pools), threads(model, servers, n_threads):
        for pool in pools:  # the context cached and one pass after it, not timed (pass_costs says why)
            timed(rt, pool, Score(context, 0, decoding))
            timed(rt, pool, Draft(context, 1, decoding))
        times = []
        for _ in range(rounds):
            for pool in pools:
                rt.submit(pool, Draft(context, passes, decoding))
            times += [rt.wait() for _ in pools]
    return statistics.median((t.end - t.start) / passes for t in times)


def call_overhead_ms(runtime: str, calls: int = 200, context_tokens: int = 256) -> float:
    """One call's round trip through ``runtime`` ("threads", "ray") beyond the server's own time, in ms: the median
    from submitting a Score call over ``context_tokens`` tokens to its result, on a simulated server of no latency."""
    from specpar.backends.simulated import SimulatedModel
    from specpar.core.latency import LatencyProfile

    model = SimulatedModel(vocab_size=32, seed=0, latency=LatencyProfile.uniform(0.0))
    context = tuple(i % 32 for i in range(context_tokens))
    out = []
    with runtime_over([model.server("overhead")], runtime) as (rt, pools):
        timed(rt, pools[0], Score(context, 0, GREEDY))  # warm: a first call starts the worker (the actor)
        for _ in range(calls):
            t0 = time.perf_counter()
            timed(rt, pools[0], Score(context, 0, GREEDY))
            out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def greedy_run(model, server, prompt: Sequence[int], tokens: int, runtime: str, n_threads: int) -> dict:
    """``server`` (of ``model``, its cache empty) decodes ``tokens`` greedy tokens after ``prompt`` by non-SI, its
    batch passes given ``n_threads`` threads: {"tokens", "prefill_ms", "steps_ms", "outside_ms" (per token)}."""
    with runtime_over([server], runtime) as (rt, pools), threads(model, [server], n_threads):
        result = non_si(Generation(Query(list(prompt), tokens, request(len(prompt))), rt), {"target": pools[0]}, NONSI)
        spans = [t.end - t.start for t in rt.tasks]
    return {
        "tokens": list(result.tokens),
        "prefill_ms": spans[0],
        "steps_ms": spans[1:],
        "outside_ms": max(0.0, result.time_ms - sum(spans)) / len(result.tokens),
    }


def drafter_hits(server, prompt: Sequence[int], target_out: Sequence[int], runtime: str) -> tuple[float, list[bool]]:
    """The drafter's ``server`` (its cache empty) prefills ``prompt`` (timed), then in one pass says for each of the
    target's output tokens whether it is its greedy token given the target's own prefix (App. F.2's direct rate is
    their mean; the first miss ends the two greedy outputs' exact-match prefix). Returns (the prefill's ms, hits)."""
    context = tuple(prompt) + tuple(target_out)
    decoding = request(len(prompt))
    with runtime_over([server], runtime) as (rt, pools):
        ms, _ = timed(rt, pools[0], Score(tuple(prompt), 0, decoding))
        _, scores = timed(rt, pools[0], Score(context, len(target_out), decoding))
    return ms, [r == t for r, t in zip(scores.rows, target_out)]


def walk(hits: Sequence[bool], lookahead: int) -> dict:
    """Greedy SI with ``lookahead`` drafts over a drafter's ``hits`` (:func:`drafter_hits`; exact: accepted drafts
    are the target's tokens). Returns {"steps", "accepted", "tested" (accepted plus one per rejection),
    "acceptance_rate": accepted / tested}."""
    j = steps = accepted = tested = 0
    while j < len(hits):
        n = 0
        while n < min(lookahead, len(hits) - j - 1) and hits[j + n]:
            n += 1
        cut = n < min(lookahead, len(hits) - j - 1)
        steps, accepted, tested = steps + 1, accepted + n, tested + n + cut
        j += n + 1
    return {"steps": steps, "accepted": accepted, "tested": tested,
            "acceptance_rate": accepted / tested if tested else 0.0}  # fmt: skip


def ngram_rates(prompt: Sequence[int], out: Sequence[int], lookahead: int, min_n: int = NGRAM_SIZES[0],
                max_n: int = NGRAM_SIZES[1]) -> dict:  # fmt: skip
    """The n-gram proposer's rates on the target's own greedy output, walked as greedy SI with it would: at j it
    looks up ``prompt + out[:j]`` for at most ``lookahead`` tokens (fewer near the end), keeps their common prefix
    with ``out[j:]``, then the target's token. Returns {"steps", "lookups" (steps with room for a draft),
    "match_rate", "drafted", "accepted", "tested" (accepted plus one per chain cut), "acceptance_rate": accepted /
    tested, "accepted_share": accepted / drafted}.
    """
    matcher = NgramMatcher(min_n, max_n)
    base = list(prompt) + list(out)
    j = steps = lookups = matched = drafted = accepted = tested = 0
    while j < len(out):
        steps += 1
        room = min(lookahead, len(out) - j - 1)
        found = matcher.continuations(base[: len(prompt) + j], room) if room > 0 else []
        drafts = found[0] if found else []
        n = common_prefix_len(drafts, out[j : j + len(drafts)])
        lookups, matched = lookups + (room > 0), matched + bool(drafts)
        drafted, accepted = drafted + len(drafts), accepted + n
        tested += n + (n < len(drafts))
        j += n + 1
    return {
        "steps": steps,
        "lookups": lookups,
        "match_rate": matched / lookups if lookups else 0.0,
        "drafted": drafted,
        "accepted": accepted,
        "tested": tested,
        "acceptance_rate": accepted / tested if tested else 0.0,
        "accepted_share": accepted / drafted if drafted else 0.0,
    }
