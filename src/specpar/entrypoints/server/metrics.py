"""The server's metrics in Prometheus text form (exposition format 0.0.4), named like vLLM's.

vLLM's speculative-decoding counters, from each request's GenerationResult:

* ``specpar:spec_decode_num_drafts_total``: verification tasks that tested drafts (vLLM's draft steps);
* ``specpar:spec_decode_num_draft_tokens_total``: draft tokens tested;
* ``specpar:spec_decode_num_accepted_tokens_total``: draft tokens accepted;
* ``specpar:spec_decode_num_accepted_tokens_per_pos_total{position="j"}``: accepted at index j of their window.

DSI's own, from each result's timeline (ms of the runtime's clock: wall time on threads, virtual time on the
virtual clock, reported in seconds):

* ``specpar:target_busy_seconds_total``: target server time, summed over the servers (its rate over the rate
  of ``specpar:request_generation_seconds_total`` is the mean number of target servers busy);
* ``specpar:target_servers_busy``: that mean over the last request (gauge), out of ``specpar:target_servers``;
* ``specpar:cancelled_tasks_total{pool="target"|"drafter"}``: tasks cancelled (DSI cancels the work that
  follows a rejected draft);
* ``specpar:target_time_wasted_seconds_total``: target server time spent in tasks then cancelled.

And the request counters, gauges and histograms (wall time, measured by the server).
"""

from __future__ import annotations

import math
import threading

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """A cumulative Prometheus histogram over fixed bucket bounds (seconds)."""

    def __init__(self, bounds=LATENCY_BUCKETS):
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)
        self.sum, self.count = 0.0, 0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.bounds):
            if value <= b:
                self.counts[i] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{_number(b)}"}} {c}' for b, c in zip(self.bounds, self.counts)]
        out += [
            f'{name}_bucket{{le="+Inf"}} {self.count}',
            f"{name}_sum {_number(self.sum)}",
            f"{name}_count {self.count}",
        ]
        return out


class Metrics:
    """Counters, gauges and histograms of one server; updated from any thread, rendered by :meth:`text`."""

    def __init__(self, target_servers: set[str], sp_degree: int):
        self.target_servers, self.sp_degree = target_servers, sp_degree
        self._lock = threading.Lock()
        self.requests = {}  # (endpoint, finish reason or error code) -> count
        self.prompt_tokens = self.generation_tokens = 0
        self.drafts = self.draft_tokens = self.accepted_tokens = 0
        self.accepted_per_pos: list[int] = []
        self.target_busy_s = self.wasted_s = self.generation_s = 0.0
        self.last_busy = 0.0
        self.cancelled = {"target": 0, "drafter": 0}
        self.running = self.waiting = 0
        self.latency, self.ttft = Histogram(), Histogram()

    def count(self, endpoint: str, outcome: str) -> None:
        with self._lock:
            self.requests[endpoint, outcome] = self.requests.get((endpoint, outcome), 0) + 1

    def observe(self, endpoint: str, prompt_len: int, result, latency_s: float, ttft_s: float | None) -> None:
        """One finished request: its GenerationResult and its wall latency and time to first token (s)."""
        busy = wasted = 0.0
        cancelled = {"target": 0, "drafter": 0}
        for r in result.timeline:
            pool = "target" if r.server in self.target_servers else "drafter"
            if pool == "target":
                busy += r.end_ms - r.start_ms
            if r.cancelled:
                cancelled[pool] += 1
                if pool == "target":
                    wasted += r.end_ms - r.start_ms
        with self._lock:
            self.requests[endpoint, result.finish_reason] = self.requests.get((endpoint, result.finish_reason), 0) + 1
            self.prompt_tokens += prompt_len
            self.generation_tokens += len(result.tokens)
            self.drafts += result.verifications if result.drafted else 0
            self.draft_tokens += result.drafted
            self.accepted_tokens += result.accepted
            per_pos = result.position_accepted
            if len(per_pos) > len(self.accepted_per_pos):
                self.accepted_per_pos += [0] * (len(per_pos) - len(self.accepted_per_pos))
            for j, a in enumerate(per_pos):
                self.accepted_per_pos[j] += a
            self.target_busy_s += busy / 1e3
            self.wasted_s += wasted / 1e3
            self.generation_s += result.time_ms / 1e3
            self.last_busy = busy / result.time_ms if result.time_ms > 0 else 0.0
            for pool, n in cancelled.items():
                self.cancelled[pool] += n
            self.latency.observe(latency_s)
            if ttft_s is not None:
                self.ttft.observe(ttft_s)

    def text(self) -> str:
        """The Prometheus text exposition of every metric."""
        out: list[str] = []

        def metric(name, kind, help, samples):
            out.append(f"# HELP {name} {help}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                label = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
                out.append(f"{name}{label} {_number(value)}")

        with self._lock:
            metric("specpar:num_requests_running", "gauge", "Requests generating now.", [({}, self.running)])
            metric("specpar:num_requests_waiting", "gauge", "Requests queued for the engine.", [({}, self.waiting)])
            metric(
                "specpar:request_success_total",
                "counter",
                "Requests answered, by endpoint and finish reason (or error code).",
                [({"endpoint": e, "finished_reason": o}, n) for (e, o), n in sorted(self.requests.items())],
            )
            metric("specpar:prompt_tokens_total", "counter", "Prompt tokens processed.", [({}, self.prompt_tokens)])
            metric("specpar:generation_tokens_total", "counter", "Tokens generated.", [({}, self.generation_tokens)])
            metric("specpar:spec_decode_num_drafts_total", "counter", "Verification tasks that tested drafts.",
                   [({}, self.drafts)])  # fmt: skip
            metric("specpar:spec_decode_num_draft_tokens_total", "counter", "Draft tokens tested.",
                   [({}, self.draft_tokens)])  # fmt: skip
            metric("specpar:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
                   [({}, self.accepted_tokens)])  # fmt: skip
            metric(
                "specpar:spec_decode_num_accepted_tokens_per_pos_total",
                "counter",
                "Draft tokens accepted, by their index in the lookahead window.",
                [({"position": j}, a) for j, a in enumerate(self.accepted_per_pos)],
            )
            metric("specpar:target_servers", "gauge", "Target servers (sp_degree).", [({}, self.sp_degree)])
            metric("specpar:target_servers_busy", "gauge", "Mean target servers busy over the last request.",
                   [({}, self.last_busy)])  # fmt: skip
            metric("specpar:target_busy_seconds_total", "counter", "Target server time, summed over the servers "
                   "(runtime clock).", [({}, self.target_busy_s)])  # fmt: skip
            metric("specpar:request_generation_seconds_total", "counter", "Generation time of the requests "
                   "(runtime clock).", [({}, self.generation_s)])  # fmt: skip
            metric(
                "specpar:cancelled_tasks_total",
                "counter",
                "Server tasks cancelled (work following a rejected draft).",
                [({"pool": p}, n) for p, n in self.cancelled.items()],
            )
            metric("specpar:target_time_wasted_seconds_total", "counter", "Target server time spent in tasks "
                   "then cancelled (runtime clock).", [({}, self.wasted_s)])  # fmt: skip
            for name, hist, help in (
                ("specpar:e2e_request_latency_seconds", self.latency, "Request latency (wall), arrival to last token."),
                ("specpar:time_to_first_token_seconds", self.ttft, "Time to first token (wall), from arrival."),
            ):
                out += [f"# HELP {name} {help}", f"# TYPE {name} histogram", *hist.lines(name)]
        return "\n".join(out) + "\n"


def _number(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))
