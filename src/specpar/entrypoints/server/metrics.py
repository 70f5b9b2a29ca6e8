"""The server's Prometheus metrics (prometheus_client, a registry per app), named like vLLM's, each labelled with
``model_name``; docs/serve.md lists them. Latency histograms are the server's wall time; DSI's own series (target
busy time, cancelled tasks) come from each result's timeline, on the runtime's clock; the engine's load
(:meth:`~specpar.entrypoints.engine.Engine.load_metrics`) is read at each scrape (:class:`LoadCollector`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

COUNTERS = (  # attribute of Metrics, series (specpar:NAME_total), help, labels beside model_name
    ("success", "request_success", "Choices finished, by endpoint and finish reason.", ("endpoint", "finished_reason")),
    ("errors", "request_errors", "Requests refused or failed, by endpoint and status.", ("endpoint", "status")),
    ("prompt_tokens", "prompt_tokens", "Prompt tokens processed.", ()),
    ("generation_tokens", "generation_tokens", "Tokens generated.", ()),
    ("drafts", "spec_decode_num_drafts", "Verification tasks that tested drafts.", ()),
    ("draft_tokens", "spec_decode_num_draft_tokens", "Draft tokens tested.", ()),
    ("accepted", "spec_decode_num_accepted_tokens", "Draft tokens accepted.", ()),
    ("accepted_per_pos", "spec_decode_num_accepted_tokens_per_pos",
     "Draft tokens accepted, by their index in the lookahead window.", ("position",)),
    ("busy_s", "target_busy_seconds", "Target server time, summed over the servers (runtime clock).", ()),
    ("generation_s", "request_generation_seconds", "Generation time of the requests (runtime clock).", ()),
    ("cancelled", "cancelled_tasks", "Server tasks cancelled (work following a rejected draft).", ("pool",)),
    ("wasted_s", "target_time_wasted_seconds", "Target server time spent in tasks then cancelled (runtime clock).", ()),
    ("auto", "auto_choices", "Requests algorithm 'auto' ran each method for.", ("method",)),
    ("auto_predicted_s", "auto_predicted_seconds", "Predicted generation time of auto's requests.", ()),
    ("auto_measured_s", "auto_measured_seconds", "Measured generation time of auto's requests (runtime clock).", ()),
)  # fmt: skip
HISTOGRAMS = (  # attribute of Metrics, series, help, buckets
    ("latency", "e2e_request_latency_seconds", "Request latency (wall), arrival to last token.", LATENCY_BUCKETS),
    ("ttft", "time_to_first_token_seconds", "Time to first token (wall), from arrival.", LATENCY_BUCKETS),
    ("tpot", "time_per_output_token_seconds", "Time per output token after the first (wall).", TOKEN_BUCKETS),
    ("queue", "request_queue_time_seconds", "Time a request waited for processing units (wall).", LATENCY_BUCKETS),
)


class Metrics:
    """Every metric of one served model, in a registry of its own (several apps in one process stay apart)."""

    def __init__(self, model_name: str, target_servers: set[str], sp_degree: int, load=None):
        """load: a function returning the engine's LoadMetrics (Engine.load_metrics), read at each scrape."""
        self.model_name, self.target_servers = model_name, target_servers
        self.registry = r = CollectorRegistry()
        if load is not None:
            r.register(LoadCollector(model_name, load))
        m = ["model_name"]
        for attr, name, help, labels in COUNTERS:
            setattr(self, attr, Counter(f"specpar:{name}", help, [*m, *labels], registry=r))
        for attr, name, help, buckets in HISTOGRAMS:
            setattr(self, attr, Histogram(f"specpar:{name}", help, m, registry=r, buckets=buckets).labels(model_name))
        Gauge("specpar:target_servers", "Target servers (sp_degree).", m, registry=r).labels(model_name).set(sp_degree)
        self.busy = Gauge("specpar:target_servers_busy", "Mean target servers busy over the last request.", m,
                          registry=r)  # fmt: skip
        for pool in ("target", "drafter"):
            self.cancelled.labels(model_name, pool)

    def error(self, endpoint: str, status) -> None:
        self.errors.labels(self.model_name, endpoint, str(status)).inc()

    def aborted(self, endpoint: str) -> None:
        self.success.labels(self.model_name, endpoint, "abort").inc()

    def observe(self, endpoint: str, prompt_tokens: int, results, times) -> None:
        """A finished request: its GenerationResults (one per choice), and ``times`` (a Timing, seconds)."""
        name = self.model_name
        self.prompt_tokens.labels(name).inc(prompt_tokens)
        tokens = sum(len(r.tokens) for r in results)
        for r in results:
            self.success.labels(name, endpoint, r.finish_reason).inc()
            self._speculation(r)
        self.generation_tokens.labels(name).inc(tokens)
        self.latency.observe(times.end - times.arrival)
        if times.started is not None:
            self.queue.observe(times.started - times.arrival)
        if times.first_token is not None:
            self.ttft.observe(times.first_token - times.arrival)
            if tokens > 1:
                self.tpot.observe((times.end - times.first_token) / (tokens - 1))

    def _speculation(self, result) -> None:
        name, busy, wasted = self.model_name, 0.0, 0.0
        cancelled = {"target": 0, "drafter": 0}
        for t in result.timeline:
            pool = "target" if t.server in self.target_servers else "drafter"
            if pool == "target":
                busy += t.end_ms - t.start_ms
            if t.cancelled:
                cancelled[pool] += 1
                if pool == "target":
                    wasted += t.end_ms - t.start_ms
        self.drafts.labels(name).inc(result.verifications if result.drafted else 0)
        self.draft_tokens.labels(name).inc(result.drafted)
        self.accepted.labels(name).inc(result.accepted)
        for j, a in enumerate(result.position_accepted):
            self.accepted_per_pos.labels(name, str(j)).inc(a)
        self.busy_s.labels(name).inc(busy / 1e3)
        self.wasted_s.labels(name).inc(wasted / 1e3)
        self.generation_s.labels(name).inc(result.time_ms / 1e3)
        self.busy.labels(name).set(busy / result.time_ms if result.time_ms > 0 else 0.0)
        for pool, n in cancelled.items():
            self.cancelled.labels(name, pool).inc(n)
        if result.auto is not None:
            self.auto.labels(name, result.auto["method"]).inc()
            self.auto_predicted_s.labels(name).inc(result.auto["predicted_ms"] / 1e3)
            self.auto_measured_s.labels(name).inc(result.time_ms / 1e3)

    def text(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


class LoadCollector(Collector):
    """The engine's LoadMetrics as Prometheus series, read when the registry is collected (a scrape)."""

    # (LoadMetrics field, series name, help, counter?)
    SERIES = (
        ("requests_running", "num_requests_running", "Requests generating now.", False),
        ("requests_waiting", "num_requests_waiting", "Requests queued for processing units.", False),
        ("units", "num_units", "Processing units the engine schedules.", False),
        ("units_in_use", "num_units_in_use", "Processing units held by requests.", False),
        ("units_per_request", "units_per_request", "Mean processing units held per running request.", False),
        ("goodput_tokens_per_s", "goodput_tokens_per_second", "Output tokens per second over the last 10 s.",
         False),
        ("output_tokens", "output_tokens", "Output tokens verified.", True),
        ("switches", "share_switches", "Configuration changes at safe points as requests' shares changed.", True),
    )  # fmt: skip

    def __init__(self, model_name: str, load):
        self.model_name, self.load = model_name, load

    def collect(self):
        m = self.load()
        for field, name, help, counter in self.SERIES:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            family = kind(f"specpar:{name}", help, labels=["model_name"])
            family.add_metric([self.model_name], getattr(m, field))
            yield family
