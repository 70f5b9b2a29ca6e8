"""The server's Prometheus metrics (prometheus_client, a registry per app), named like vLLM's, each labelled with
``model_name``.

Requests: ``specpar:request_success_total{endpoint, finished_reason}`` counts the choices that finished ("length",
"stop", or "abort" when the client left a stream); ``specpar:request_errors_total{endpoint, status}`` the refused or
failed requests (4xx, 5xx, or an error event inside a stream); histograms of the end-to-end latency, the time to
first token, the time per output token after the first (TPOT) and the time spent queued for processing units, all
wall time measured by the server (seconds).

The engine's load (:meth:`~specpar.entrypoints.engine.Engine.load_metrics`, read when /metrics is scraped:
:class:`LoadCollector`), named in vLLM's style: gauges ``specpar:num_requests_running`` (generations running),
``specpar:num_requests_waiting`` (queued for processing units), ``specpar:num_units``, ``specpar:num_units_in_use``,
``specpar:units_per_request`` (mean units held by a running request), ``specpar:goodput_tokens_per_second`` (output
tokens per second over the last 10 s), and counters ``specpar:output_tokens_total`` (tokens verified, as they are)
and ``specpar:share_switches_total`` (configuration changes at safe points as shares changed).

vLLM's speculative-decoding counters, from each GenerationResult:

* ``specpar:spec_decode_num_drafts_total``: verification tasks that tested drafts (vLLM's draft steps);
* ``specpar:spec_decode_num_draft_tokens_total``: draft tokens tested;
* ``specpar:spec_decode_num_accepted_tokens_total``: draft tokens accepted;
* ``specpar:spec_decode_num_accepted_tokens_per_pos_total{position="j"}``: accepted at index j of their window.

DSI's own, from each result's timeline (the runtime's clock: wall time on threads, virtual time on the virtual
clock, reported in seconds):

* ``specpar:target_busy_seconds_total``: target server time, summed over the servers (its rate over the rate
  of ``specpar:request_generation_seconds_total`` is the mean number of target servers busy);
* ``specpar:target_servers_busy``: that mean over the last request (gauge), out of ``specpar:target_servers``;
* ``specpar:cancelled_tasks_total{pool="target"|"drafter"}``: tasks cancelled (DSI cancels the work that
  follows a rejected draft);
* ``specpar:target_time_wasted_seconds_total``: target server time spent in tasks then cancelled.

``algorithm="auto"`` (:mod:`specpar.prediction.auto`): ``specpar:auto_choices_total{method}`` counts the requests
auto ran each method for; ``specpar:auto_predicted_seconds_total`` and ``specpar:auto_measured_seconds_total`` sum
their predicted and measured generation times (the runtime's clock), so that the ratio of their rates is the mean
measured / predicted.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """Every metric of one served model, in a registry of its own (several apps in one process stay apart)."""

    def __init__(self, model_name: str, target_servers: set[str], sp_degree: int, load=None):
        """load: a function returning the engine's LoadMetrics (Engine.load_metrics), read at each scrape."""
        self.model_name, self.target_servers = model_name, target_servers
        self.registry = r = CollectorRegistry()
        if load is not None:
            r.register(LoadCollector(model_name, load))
        m = ["model_name"]

        def counter(name, help, labels=()):
            return Counter(f"specpar:{name}", help, [*m, *labels], registry=r)

        self.success = counter("request_success", "Choices finished, by endpoint and finish reason.",
                               ("endpoint", "finished_reason"))  # fmt: skip
        self.errors = counter("request_errors", "Requests refused or failed, by endpoint and status.",
                              ("endpoint", "status"))  # fmt: skip
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = counter("generation_tokens", "Tokens generated.")
        self.drafts = counter("spec_decode_num_drafts", "Verification tasks that tested drafts.")
        self.draft_tokens = counter("spec_decode_num_draft_tokens", "Draft tokens tested.")
        self.accepted = counter("spec_decode_num_accepted_tokens", "Draft tokens accepted.")
        self.accepted_per_pos = counter("spec_decode_num_accepted_tokens_per_pos",
                                        "Draft tokens accepted, by their index in the lookahead window.",
                                        ("position",))  # fmt: skip
        Gauge("specpar:target_servers", "Target servers (sp_degree).", m, registry=r).labels(model_name).set(sp_degree)
        self.busy = Gauge("specpar:target_servers_busy", "Mean target servers busy over the last request.", m,
                          registry=r)  # fmt: skip
        self.busy_s = counter("target_busy_seconds", "Target server time, summed over the servers (runtime clock).")
        self.generation_s = counter("request_generation_seconds", "Generation time of the requests (runtime clock).")
        self.cancelled = counter("cancelled_tasks", "Server tasks cancelled (work following a rejected draft).",
                                 ("pool",))  # fmt: skip
        self.wasted_s = counter("target_time_wasted_seconds",
                                "Target server time spent in tasks then cancelled (runtime clock).")  # fmt: skip

        def histogram(name, help, buckets):
            return Histogram(f"specpar:{name}", help, m, registry=r, buckets=buckets).labels(model_name)

        self.latency = histogram("e2e_request_latency_seconds", "Request latency (wall), arrival to last token.",
                                 LATENCY_BUCKETS)  # fmt: skip
        self.ttft = histogram("time_to_first_token_seconds", "Time to first token (wall), from arrival.",
                              LATENCY_BUCKETS)  # fmt: skip
        self.tpot = histogram("time_per_output_token_seconds", "Time per output token after the first (wall).",
                              TOKEN_BUCKETS)  # fmt: skip
        self.queue = histogram("request_queue_time_seconds", "Time a request waited for processing units (wall).",
                               LATENCY_BUCKETS)  # fmt: skip
        for pool in ("target", "drafter"):
            self.cancelled.labels(model_name, pool)
        self.auto = counter("auto_choices", "Requests algorithm 'auto' ran each method for.", ("method",))
        self.auto_predicted_s = counter("auto_predicted_seconds", "Predicted generation time of auto's requests.")
        self.auto_measured_s = counter("auto_measured_seconds",
                                       "Measured generation time of auto's requests (runtime clock).")  # fmt: skip

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

    def describe(self):  # the series' names without reading the engine (at registration)
        for _, name, help, counter in self.SERIES:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            yield kind(f"specpar:{name}", help, labels=["model_name"])
