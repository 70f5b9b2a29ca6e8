"""``specpar serve`` under a bounded loopback load (simulated models), and its overhead per request.

Load: a server of simulated models on the threads runtime (target 2 ms a pass, drafter 0.2 ms, a = 0.8,
DSI, SP = 2, lookahead 5) in a thread of this process, on 127.0.0.1; C clients (threads, one keep-alive
connection each) send R streamed completions of N tokens each, back to back. Reported per C: requests/s,
p50 / p99 latency (send to [DONE]) and TTFT (send to the first token's event), client-side wall time.
The engine serves one request at a time (FCFS), so more clients wait longer rather than finish faster.

Overhead: the same request (non-streamed) through the server and as a direct ``Engine.generate`` on an
identical engine, interleaved, both on the virtual clock (pure CPU, no sleeps: the harshest case for a
fixed cost); the overhead is the median of paired differences (HTTP client and server, JSON, the worker
thread hop). Goal: < 5 ms.

The arms: each number of clients, and the overhead.

    python -m benchmarks server_load [--requests 20] [-N 32] [--pairs 200]
"""

from __future__ import annotations

import contextlib
import http.client
import json
import statistics
import threading
import time

from benchmarks.runner import Arm, Benchmark
from specpar import Engine, LatencyProfile, SamplingParams, SimulatedModel
from specpar.entrypoints.server.app import create_app


def engine(runtime: str) -> Engine:
    target = SimulatedModel(32, seed=0, latency=LatencyProfile.uniform(2.0))
    drafter = target.drafter(0.8, LatencyProfile.uniform(0.2))
    return Engine(target, drafter, sp_degree=2, runtime=runtime, lookahead=5)


def serving(app):
    """Start ``app`` with uvicorn on a free loopback port in a thread: (port, stop())."""
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop():
        server.should_exit = True
        thread.join()

    return port, stop


def request(conn: http.client.HTTPConnection, body: dict) -> tuple[float, float | None, str]:
    """(latency s, TTFT s or None, the output text) of one completion on a keep-alive connection."""
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    response = conn.getresponse()
    if not body.get("stream"):
        data = json.loads(response.read())
        return time.perf_counter() - t0, None, data["choices"][0]["text"]
    ttft, text, buffer = None, [], b""
    while chunk := response.read1(65536):
        buffer += chunk
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            data = event.removeprefix(b"data: ")
            if data == b"[DONE]":
                continue
            piece = json.loads(data)["choices"][0]["text"]
            if piece and ttft is None:
                ttft = time.perf_counter() - t0
            text.append(piece)
    return time.perf_counter() - t0, ttft, "".join(text)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def load(port: int, clients: int, requests: int, n: int, want: str) -> dict:
    latencies, ttfts, errors = [], [], []

    def client(c: int):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(requests):
            body = {"prompt": [1, 2, 3], "max_tokens": n, "temperature": 0, "stream": True}
            latency, ttft, text = request(conn, body)
            if text != want:
                errors.append(text)
            latencies.append(latency)
            ttfts.append(ttft)
        conn.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    assert not errors, f"{len(errors)} outputs differ from the single-call output"
    return {
        "clients": clients,
        "requests": len(latencies),
        "requests_per_s": len(latencies) / elapsed,
        "latency_p50_ms": 1e3 * pct(latencies, 0.5),
        "latency_p99_ms": 1e3 * pct(latencies, 0.99),
        "ttft_p50_ms": 1e3 * pct(ttfts, 0.5),
        "ttft_p99_ms": 1e3 * pct(ttfts, 0.99),
    }


def overhead(pairs: int, n: int) -> dict:
    """Median paired (server - direct) wall time of one non-streamed request, both on the virtual clock."""
    served, direct = engine("virtual"), engine("virtual")
    port, stop = serving(create_app(served, "sim"))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"prompt": [1, 2, 3], "max_tokens": n, "temperature": 0}
    params = SamplingParams(temperature=0, max_tokens=n)
    want = direct.generate([1, 2, 3], params).tokens
    diffs, bare = [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        assert direct.generate([1, 2, 3], params).tokens == want
        t1 = time.perf_counter()
        latency, _, text = request(conn, body)
        assert [int(t) for t in text.split()] == want
        bare.append(t1 - t0)
        diffs.append(latency - (t1 - t0))
    conn.close()
    stop()
    direct.close()
    return {"pairs": pairs, "direct_ms": 1e3 * statistics.median(bare), "overhead_ms": 1e3 * statistics.median(diffs)}


def options(p) -> None:
    p.add_argument("--requests", type=int, default=20, help="requests per client (default 20)")
    p.add_argument("-N", type=int, default=32, help="tokens per request (default 32)")
    p.add_argument("--clients", default="1,4,16", help="numbers of clients, one arm each (default 1,4,16)")
    p.add_argument("--pairs", type=int, default=200, help="paired requests for the overhead (default 200)")


def arms(args) -> list[Arm]:
    return [Arm(f"{c} clients", {"clients": int(c)}) for c in args.clients.split(",")] + [
        Arm("overhead over Engine.generate", {"pairs": args.pairs})
    ]


@contextlib.contextmanager
def session(args):
    """The threads engine's server the client arms load, and the output every request must give."""
    e = engine("threads")
    want = "".join(f" {t}" for t in e.target_model.greedy_tokens([1, 2, 3], args.N))
    port, stop = serving(create_app(e, "sim", max_queue=256))
    try:
        yield (port, want)
    finally:
        stop()
        e.close()


def measure(arm: Arm, args, r: int) -> dict:
    if "pairs" in arm.settings:
        return overhead(arm.settings["pairs"], args.N)
    port, want = args.session
    return load(port, arm.settings["clients"], args.requests, args.N, want)


BENCHMARK = Benchmark(
    description=__doc__,
    reports={
        "requests_per_s": "requests completed per second (client-side wall time)",
        "latency_p50_ms": "send to [DONE], median, ms",
        "latency_p99_ms": "p99, ms",
        "ttft_p50_ms": "send to the first token's event, median, ms",
        "ttft_p99_ms": "p99, ms",
        "direct_ms": "overhead arm: a direct Engine.generate, median, ms (virtual clock)",
        "overhead_ms": "overhead arm: served - direct, median of the paired differences, ms (goal < 5)",
    },
    arms=arms,
    measure=measure,
    options=options,
    session=session,
)
