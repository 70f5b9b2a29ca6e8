"""Answering a completions or chat request: its jobs generated on the engine (on worker threads), whole or streamed.

A whole answer's choices run in one engine call; a stream's one after the other, each choice's text in one chunk
when it asks for logprobs. A client gone closes its engine stream, which ends the generation at its next verified
tokens. A request still running when the shutdown timeout ends (:mod:`.shutdown`) ends as an OpenAI error: a 503
body, or a stream's error event and ``[DONE]``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import anyio

from specpar.core.errors import ConfigError, SpecparError
from specpar.entrypoints.server.admission import Admission, Ticket, TicketedStream
from specpar.entrypoints.server.jobs import Job, Plan
from specpar.entrypoints.server.metrics import Metrics
from specpar.entrypoints.server.responses import Shape
from specpar.entrypoints.server.schemas import RequestError, error_body
from specpar.entrypoints.server.served import Served
from specpar.entrypoints.server.shutdown import Shutdown, ShuttingDown


@dataclass
class Context:
    """What every request of one app shares."""

    engine: object
    served: Served
    metrics: Metrics
    admission: Admission
    model_name: str
    created: int
    shutdown: Shutdown = field(default_factory=Shutdown)


async def answer(ctx: Context, request, plan: Plan, endpoint: str, arrival: float):
    """The response to ``plan``: a JSON body, or a TicketedStream of events."""
    ticket = ctx.admission.admit(arrival)
    rid = ("chatcmpl-" if plan.chat else "cmpl-") + uuid.uuid4().hex
    shape = Shape(rid, ctx.model_name, plan.chat, int(time.time()), ctx.served)
    if plan.stream:
        return TicketedStream(events(ctx, request, plan, shape, ticket, endpoint), ticket)
    try:
        results = await ctx.shutdown.race(generate_all, ctx.engine, plan, ticket.timing, ctx.shutdown)
    except ShuttingDown as exc:
        raise RequestError(str(exc), status=503, code="server_shutting_down") from None
    except SpecparError as exc:
        raise RequestError(str(exc), status=400 if isinstance(exc, ConfigError) else 500) from None
    finally:
        ticket.release()
    ticket.timing.end = time.perf_counter()
    ctx.metrics.observe(endpoint, plan.prompt_tokens, results, ticket.timing)
    return shape.whole(plan, results)


def generate_all(engine, plan: Plan, timing, shutdown: Shutdown | None = None) -> list:
    """Every job's GenerationResult, in order (on a worker thread; the jobs at once); once ``shutdown`` aborts, the
    generations end at their next verified tokens (ShuttingDown)."""
    called, jobs = time.perf_counter(), plan.jobs

    def on_tokens(_):
        timing.token()
        if shutdown is not None:
            shutdown.check()

    if len(jobs) == 1:
        results = [engine.generate(jobs[0].prompt_ids, jobs[0].params, stream=on_tokens, **plan.speculative)]
    else:
        results = engine.generate([j.prompt_ids for j in jobs], [j.params for j in jobs], stream=on_tokens,
                                  **plan.speculative)  # fmt: skip
    timing.engine_started(called, results)
    for r in results:
        _ = r.timeline  # built here, not on the event loop (the metrics read it)
    return results


async def events(ctx: Context, request, plan: Plan, shape: Shape, ticket: Ticket, endpoint: str):
    """Server-sent events: each choice's chunks and finish reason, usage if asked, [DONE]."""
    results = []
    try:
        for job in plan.jobs:
            async for event in job_events(ctx, request, plan, shape, job, ticket.timing, results):
                yield event
            if len(results) <= job.index:  # the client left
                ctx.metrics.aborted(endpoint)
                return
    except Exception as exc:  # after the 200 went out: an error event, then the end
        status = 400 if isinstance(exc, ConfigError) else 503 if isinstance(exc, ShuttingDown) else 500
        ctx.metrics.error(endpoint, status)
        kind = "invalid_request_error" if status == 400 else "server_error"
        yield shape.event(error_body(str(exc), kind, code="server_shutting_down" if status == 503 else None))
        yield "data: [DONE]\n\n"
        return
    ticket.timing.end = time.perf_counter()
    ctx.metrics.observe(endpoint, plan.prompt_tokens, results, ticket.timing)
    if plan.include_usage:
        yield shape.usage_chunk(plan, results)
    yield "data: [DONE]\n\n"


async def job_events(ctx: Context, request, plan: Plan, shape: Shape, job: Job, timing, results: list):
    """One choice's events; its GenerationResult is appended to ``results`` unless the client left."""
    if shape.chat:
        yield shape.chunk(job.index, {"role": "assistant", "content": ""})
    if job.echo:
        yield shape.chunk(job.index, job.echo)
    if plan.logprobs is not None:  # the whole text in one chunk, with its logprobs
        result = (await ctx.shutdown.race(generate_all, ctx.engine, _one(plan, job), timing, ctx.shutdown))[0]
        text = shape.text(job, result)[len(job.echo or "") :]
        yield shape.chunk(job.index, text, logprobs=shape.logprobs(result, len(job.echo or "")))
    else:
        result, called, aborted = None, time.perf_counter(), False
        pieces = ctx.engine.stream(job.prompt_ids, job.params, cancel=ctx.shutdown.flag, **plan.speculative)
        try:
            while True:
                try:
                    done, value = await ctx.shutdown.race(_next, pieces)
                except ShuttingDown:  # its thread may still be inside the stream: it ends on its own
                    aborted = True
                    raise
                if done:
                    result = value
                    if result is None:  # the stream ended by the shutdown's cancel
                        aborted = True
                        ctx.shutdown.check()
                    timing.engine_started(called, [result])
                    break
                timing.token()
                yield shape.chunk(job.index, ctx.served.text(value))
                if await request.is_disconnected():
                    return
        finally:
            if not aborted:
                with anyio.CancelScope(shield=True):  # a client gone cancels us: still end the generation
                    await anyio.to_thread.run_sync(pieces.close)
    results.append(result)
    yield shape.chunk(job.index, None, result.finish_reason)


def _one(plan: Plan, job: Job) -> Plan:
    return Plan(plan.chat, [job], plan.n, speculative=plan.speculative)


def _next(iterator):
    """(False, the next item) or (True, the generator's return value)."""
    try:
        return False, next(iterator)
    except StopIteration as stop:
        if stop.value is not None:
            _ = stop.value.timeline  # built on this worker thread, not on the event loop (the metrics read it)
        return True, stop.value
