"""A live ``specpar serve`` app for the tests (shared by the server tests and the proposers'): in this process on a
port the OS chose (found from the server's own socket, never a port picked first and bound later, which another
process may take meanwhile), or as a `specpar serve` subprocess on ``--port 0`` (its port read from the line it
prints); the official OpenAI client and raw HTTP against it, and its Prometheus text read back."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest

from specpar import Engine, LatencyProfile, SimulatedModel

KEY = "sk-test"
TASK_MS = 2.0  # the simulated target's forward pass


@contextmanager
def running(app):
    """``app`` served by uvicorn on a free loopback port in a thread: yields its base URL; stops it after."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"  # the port it bound
    finally:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive()


def simulated_engine(runtime: str = "threads", **options) -> Engine:
    target = SimulatedModel(32, seed=0, latency=LatencyProfile.uniform(TASK_MS))
    drafter = target.drafter(0.8, LatencyProfile.uniform(TASK_MS / 10))
    return Engine(target, drafter, sp_degree=2, runtime=runtime, lookahead=3, **options)


def client(url: str, key: str = KEY):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=20)


def post(url: str, path: str, body, key: str | None = KEY) -> tuple[int, dict]:
    """(status, JSON body) of a raw POST; ``body`` is sent as is when it is bytes."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    conn.request("POST", path, body if isinstance(body, bytes) else json.dumps(body).encode(), headers)
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def stream_socket(url: str, body: dict):
    """A raw streaming request: (socket file, socket) after the response headers."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    data = json.dumps(body).encode()
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Connection: close\r\nAuthorization: Bearer {KEY}\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    f = sock.makefile("rb")
    while f.readline() not in (b"\r\n", b""):
        pass
    return f, sock


def wait_listening(port: int, timeout_s: float = 10) -> None:
    """Until a server listens on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def next_event(f) -> bytes:
    """The next server-sent event's line of a raw chunked response (chunk sizes and blank lines skipped)."""
    while line := f.readline():
        if line.startswith(b"data: "):
            return line
    raise AssertionError("the stream ended")


def gauge(url: str, name: str) -> float:
    return parse_prometheus(metrics_text(url))[f"specpar:{name}", frozenset({("model_name", "sim")})]


def metrics_text(url: str) -> str:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()  # (left open, each call's socket was a ResourceWarning)


def parse_prometheus(text: str) -> dict:
    """{(name, frozenset of label pairs): value} of a Prometheus text exposition; asserts its grammar."""
    import re

    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_]\w*="[^"]*"(,[a-zA-Z_]\w*="[^"]*")*)?\})? (\S+)$')
    types, out = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
        elif line.startswith("# HELP ") or not line:
            continue
        else:
            m = sample.match(line)
            assert m, line
            name, labels = m.group(1), frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
            assert name in types or name.rsplit("_", 1)[0] in types, f"{name} has no TYPE"
            out[name, labels] = float(m.group(5))
    return out


def serve_process(processes, *args: str, env=None) -> tuple[subprocess.Popen, str]:
    """`specpar serve --port 0 ARGS` started with ``processes`` (stdout and stderr piped as text): (the process, its
    base URL), once it listens; the port is the one the server says it bound."""
    cmd = [sys.executable, "-m", "specpar", "serve", "--port", "0", *args]
    proc = processes.start(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "specpar serve" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    url = line.split(" on ", 1)[1].split("/v1", 1)[0]
    wait_listening(int(url.rsplit(":", 1)[1]))
    return proc, url
