"""One request under load, from arrival to its last token: one configuration after another, each on the units
the scheduler gives it, each going on from the tokens the previous one verified.

A request's ``spec`` is its ceiling (DSI may run with fewer replicas, then as SI, then as non-SI: its
:class:`~specpar.planning.load.ShareCurve` says which option each share gets); its own settings hold in every
configuration. Sampling and stopping are the query's throughout (draws keyed by position; one detokenizer).
"""

from __future__ import annotations

import dataclasses

from specpar.algorithms.registry import run_generation
from specpar.core.calls import Context
from specpar.core.config import RuntimeConfig, SpeculativeConfig
from specpar.core.query import Query
from specpar.core.results import GenerationResult
from specpar.planning.load import Option, ShareCurve
from specpar.scheduling.pausing import Pausable
from specpar.scheduling.scheduler import Scheduler, Ticket


def configure(spec: SpeculativeConfig, option: Option) -> SpeculativeConfig:
    """``spec`` as it runs with ``option``: its algorithm and SP degree, the request's own lookahead if it set an
    integer (or "adaptive", for SI and DSI; else the option's), its tree and proposer for SI and DSI only, HSD's
    buffers for HSD only, DSI's modes for DSI."""
    algorithm = option.algorithm
    drafts = algorithm in ("si", "dsi")
    own = isinstance(spec.lookahead, int) or (spec.lookahead == "adaptive" and drafts)
    lookahead = spec.lookahead if own else option.lookahead
    if algorithm == spec.algorithm and option.sp_degree == spec.sp_degree and lookahead == spec.lookahead:
        return spec  # its own configuration (a fixed share)
    return dataclasses.replace(
        spec,
        algorithm=algorithm,
        sp_degree=option.sp_degree,
        lookahead=lookahead,
        tree=spec.tree if drafts else None,
        proposer=spec.proposer if drafts else None,
        buffers=spec.buffers if algorithm in ("hsd", "hsd-sp") else None,
        prefill_replicas=spec.prefill_replicas if algorithm in ("dsi", "hsd-sp") else None,
        dedicated_cursor=spec.dedicated_cursor if algorithm in ("dsi", "hsd-sp") else None,
    )


class Request:
    """One request's configuration on a :class:`Scheduler`: ``spec`` (its ceiling), ``curve`` (its options per
    share), ``runtime``; :meth:`run` serves a query. ready_made: the servers outlive each configuration (Ray)."""

    def __init__(
        self, scheduler: Scheduler, spec: SpeculativeConfig, curve: ShareCurve, runtime: RuntimeConfig, ready_made=True
    ):
        self.scheduler, self.spec, self.curve, self.runtime, self.ready_made = (
            scheduler,
            spec,
            curve,
            runtime,
            ready_made,
        )
        self.ticket: Ticket | None = None
        self.segments: list[tuple[Option, int, GenerationResult]] = []  # (option, units, result) per configuration
        self.end_ms = None
        self.stopped = False  # its own stopping ended the output (not a pause)
        self.choice = None  # what algorithm="auto" chose for it (a prediction.auto.Choice), set by the engine

    def run(self, query: Query) -> GenerationResult:
        """``query`` served (its prompt is not changed, nor copied: the caller's list must stay as it is until the
        request ends): each configuration goes on from the tokens the previous one verified."""
        scheduler, curve, prompt, result = self.scheduler, self.curve, query.prompt, None
        pausable, pauses = Pausable(query.stopping), curve.min_units < curve.max_units
        # a share that can change needs the pause; a fixed one's stopping goes as it is (None keeps the fast path)
        stopping = pausable if pauses else query.stopping
        out = prompt  # the verified sequence (copied before the first continuation: run_generation copies its own)
        self.ticket = ticket = scheduler.arrive(curve, pausable, Context(out, len(out)))
        try:
            while True:
                option, units = scheduler.take(ticket, Context(out, len(out)))
                placement = scheduler.placement(option, units)
                left = query.max_tokens - (len(out) - len(prompt))
                now = Query(out, left, query.decoding, stopping, query.stream)
                spec = configure(self.spec, option)
                result = run_generation(now, placement.target, placement.drafter, spec, self.runtime, self.ready_made)
                self.segments.append((option, len(units), result))
                if not pauses or pausable.stopped or not pausable.paused or len(result.tokens) >= left:
                    break
                out = [*out, *result.tokens]  # paused: the next configuration goes on from here
                scheduler.record(len(result.tokens))
                result = None
        finally:  # the last configuration's tokens recorded as it leaves
            self.end_ms = scheduler.leave(ticket, len(result.tokens) if result is not None else 0)
        self.stopped = pausable.stopped
        return self.result(pauses)

    @property
    def arrival_ms(self) -> float | None:
        """The scheduler clock's time when it arrived."""
        return self.ticket.arrival_ms if self.ticket else None

    @property
    def started_ms(self) -> float | None:
        """When its first configuration started (it had waited for units since its arrival)."""
        return self.ticket.started_ms if self.ticket else None

    @property
    def servers(self) -> list:
        """Every server the request ran on."""
        return [s for u in dict.fromkeys(self.ticket.used if self.ticket else ()) for s in u.servers]

    @property
    def queue_ms(self) -> float:
        """Time from arrival to its first configuration's start (waiting for units)."""
        return self.started_ms - self.arrival_ms

    def result(self, paused: bool) -> GenerationResult:
        """The request's result: its one configuration's as it is, or the configurations' joined (tokens in order,
        counts summed, time from the first one's start to the end; ``details["segments"]`` lists them). paused: it
        ran with the pause, which may have said "stop" (the request's own stop decides)."""
        finish = "stop" if self.stopped else "length"
        if len(self.segments) == 1:
            result = self.segments[0][2]
            if paused:
                result.finish_reason = finish
            return result
        return join(self.segments, finish, self.end_ms - self.started_ms)


SUMMED = ("target_forwards", "drafter_forwards", "drafted", "accepted", "verifications", "time_lost_ms")


def join(segments: list[tuple[Option, int, GenerationResult]], finish: str, time_ms: float) -> GenerationResult:
    """Several configurations' results as one (see :meth:`Request.result`)."""
    results = [r for _, _, r in segments]
    first = results[0]
    at: dict[str, list[int]] = {"position_drafted": [], "position_accepted": []}
    for r in results:
        for name, into in at.items():
            counts = getattr(r, name)
            into.extend([0] * (len(counts) - len(into)))
            for i, n in enumerate(counts):
                into[i] += n
    details = [
        {
            "algorithm": r.algorithm,
            "units": u,
            "sp_degree": r.sp_degree,
            "lookahead": r.lookahead,
            "tokens": len(r.tokens),
            "time_ms": r.time_ms,
        }
        for _, u, r in segments
    ]
    return GenerationResult(
        algorithm="+".join(dict.fromkeys(r.algorithm for r in results)),
        runtime=first.runtime,
        tokens=[t for r in results for t in r.tokens],
        time_ms=time_ms,
        ttft_ms=first.ttft_ms,
        accepted_per_round=[n for r in results for n in r.accepted_per_round],
        lookahead=first.lookahead,
        sp_degree=max(r.sp_degree for r in results),
        finish_reason=finish,
        details={"segments": details},
        logprobs=None if any(r.logprobs is None for r in results) else [x for r in results for x in r.logprobs],
        left_running=tuple(x for r in results for x in r.left_running),
        replicas_lost=tuple(x for r in results for x in r.replicas_lost),
        **{name: sum(getattr(r, name) for r in results) for name in SUMMED},
        **at,
    )
