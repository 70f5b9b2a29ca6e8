"""specpar serve: a live server on 127.0.0.1 (simulated models on the threads runtime, and tiny transformers
models with a tokenizer), driven by the official OpenAI client and by raw HTTP."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from served import (  # noqa: E402
    KEY,
    client,
    gauge,
    metrics_text,
    next_event,
    parse_prometheus,
    post,
    running,
    serve_process,
    simulated_engine,
    stream_socket,
)
from specpar import Engine, SamplingParams  # noqa: E402
from specpar.entrypoints.server.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def sim():
    """(base URL, engine) of a server of simulated models that asks for the API key."""
    before = set(threading.enumerate())
    engine = simulated_engine()
    with running(create_app(engine, "sim", api_key=KEY, max_model_len=2048)) as url:
        yield url, engine
    assert engine.closed  # the app's shutdown closed the engine
    assert not [t for t in threading.enumerate() if t.name == "specpar-stream" and t not in before]


def greedy(engine, prompt, n):
    return engine.generate(prompt, SamplingParams(temperature=0, max_tokens=n)).tokens


def test_completions_streamed_or_not_equal_engine_generate(sim):
    url, engine = sim
    c = client(url)
    prompt = [1, 2, 3]
    want = greedy(engine, prompt, 12)
    r = c.completions.create(model="sim", prompt=prompt, max_tokens=12, temperature=0)
    assert r.choices[0].text == "".join(f" {t}" for t in want)  # id text: no tokenizer
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 12, 15)
    chunks = list(c.completions.create(model="sim", prompt="1 2 3", max_tokens=12, temperature=0, stream=True))
    assert [int(t) for t in "".join(ch.choices[0].text for ch in chunks).split()] == want
    assert chunks[-1].choices[0].finish_reason == "length"
    assert [m.id for m in c.models.list()] == ["sim"]
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200


def test_chat_streamed_or_not_equal_engine_generate(sim):
    url, engine = sim
    c = client(url)
    messages = [{"role": "system", "content": "4 5"}, {"role": "user", "content": "6"}]
    want = greedy(engine, [4, 5, 6], 10)
    r = c.chat.completions.create(model="sim", messages=messages, max_tokens=10, temperature=0)
    assert [int(t) for t in r.choices[0].message.content.split()] == want
    stream = c.chat.completions.create(model="sim", messages=messages, max_tokens=10, temperature=0, stream=True,
                                       stream_options={"include_usage": True})  # fmt: skip
    chunks = list(stream)
    assert [int(t) for t in "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices).split()] == want
    assert chunks[-1].usage.completion_tokens == 10 and chunks[-2].choices[0].finish_reason == "length"


def test_text_and_chat_template_of_a_tokenizer():
    """A target with a tokenizer: text in, text out (the engine's result text), chat through its template."""
    pytest.importorskip("torch")
    from specpar.backends.transformers_model import TransformersModel
    from tiny_transformers import perturbed, tiny_module, tiny_tokenizer

    tok = tiny_tokenizer(48)
    tok.chat_template = "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}w1"
    module = tiny_module(48, seed=5, context=128, arch="llama")
    target = TransformersModel(module, name="tiny", tokenizer=tok)
    drafter = TransformersModel(perturbed(module, 0.1, 6), name="tiny-drafter", tokenizer=tok)
    with Engine(target, drafter, sp_degree=2, lookahead=3) as engine:
        with running(create_app(engine, "tiny")) as url:
            c = client(url, "unused")
            want = engine.generate("w3 w4 w5", SamplingParams(temperature=0, max_tokens=8))
            r = c.completions.create(model="tiny", prompt="w3 w4 w5", max_tokens=8, temperature=0)
            assert r.choices[0].text == want.text and want.text
            chunks = c.completions.create(model="tiny", prompt="w3 w4 w5", max_tokens=8, temperature=0, stream=True)
            assert "".join(ch.choices[0].text for ch in chunks) == want.text
            ids = target.encode("user w7 w8 w1")
            chat = engine.generate(ids, SamplingParams(temperature=0, max_tokens=6))
            messages = [{"role": "user", "content": "w7 w8"}]
            r = c.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0)
            assert r.choices[0].message.content == chat.text and r.usage.prompt_tokens == len(ids)
            status, body = post(url, "/v1/completions", {"prompt": "w1", "max_tokens": 200})
            assert status == 400 and body["error"]["param"] == "max_tokens"  # past the 128-token context window


@pytest.mark.slow
def test_eight_concurrent_clients_get_their_single_call_outputs(sim):
    url, engine = sim
    prompts = [[1], [2, 3], [4, 5, 6], [7, 7], [9]]
    single = [greedy(engine, p, 6 + i) for i, p in enumerate(prompts)]
    outputs, errors = {}, []

    def one(t):
        try:
            c = client(url)
            for i, p in enumerate(prompts):
                kw = dict(model="sim", prompt=p, max_tokens=6 + i, temperature=0)
                if (t + i) % 2:  # half of them streamed
                    text = "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))
                else:
                    text = c.completions.create(**kw).choices[0].text
                outputs[t, i] = [int(x) for x in text.split()]
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(outputs) == 40 and all(outputs[t, i] == single[i] for t, i in outputs)


def test_a_client_leaving_mid_stream_frees_the_servers(sim):
    url, engine = sim
    t0 = time.perf_counter()
    greedy(engine, [2], 400)
    whole_ms = (time.perf_counter() - t0) * 1e3
    f, sock = stream_socket(url, {"prompt": [2], "max_tokens": 1900, "temperature": 0, "stream": True})
    next_event(f)
    f.close(), sock.close()  # gone mid-stream (the socket closes with its last file): 1900 tokens cancelled
    t0 = time.perf_counter()
    r = client(url).completions.create(model="sim", prompt=[3], max_tokens=2, temperature=0)
    waited_ms = (time.perf_counter() - t0) * 1e3
    assert r.choices[0].finish_reason == "length"
    # the next request started within a task or so, not after the ~4.75 x whole_ms the cancelled one had left
    assert waited_ms < whole_ms, (waited_ms, whole_ms)


BAD = [
    (b'{"prompt": [1, 2', 400, None),  # malformed JSON
    ({"prompt": [1], "max_tokens": "8"}, 400, "max_tokens"),  # wrong type
    ({"prompt": [1], "temperature": -1}, 400, "temperature"),
    ({"prompt": [1], "temperature": 1e-310}, 400, "temperature"),  # subnormal: logits / T cannot be computed
    ({"prompt": [1], "max_tokens": 5000}, 400, "max_tokens"),  # past the context window (2048)
    ({"prompt": [1], "model": "gpt-4"}, 404, "model"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": ""}, 400, "prompt"),
    ({"prompt": {"a": 1}}, 400, "prompt"),
    ({"prompt": [1.5, 2]}, 400, "prompt"),
    ({"prompt": "hello"}, 400, "prompt"),  # not id text, and no tokenizer
    ({"prompt": [99]}, 400, "prompt"),  # outside the vocabulary
    ({"prompt": [1], "n": 100}, 400, "n"),
    ({"prompt": [1], "logit_bias": {"99": 5}}, 400, "logit_bias"),  # outside the vocabulary
    ({"prompt": [1], "logit_bias": {"x": 5}}, 400, "logit_bias"),
    ({"prompt": [1], "seed": -1}, 400, "seed"),  # as the CLI's --seed
    ({"prompt": [1], "suffix": "x"}, 400, "suffix"),
    ({"prompt": [1], "best_of": 3}, 400, None),  # best_of must equal n
    ({"prompt": [1], "stream_options": {"include_usage": True}}, 400, "stream_options"),  # without stream
    ({"prompt": [1], "speculative": {"lookahead": 0}}, 400, "speculative"),
    ({"prompt": [1], "speculative": {"sp_degree": 3}}, 400, "speculative"),  # past the server's 2
    ({"prompt": [1], "min_tokens": 20, "max_tokens": 4}, 400, "min_tokens"),
    ({"prompt": [1], "frobnicate": True}, 400, "frobnicate"),
    ({"prompt": [1], "stop": ["x"]}, 400, "stop"),  # stop strings need a tokenizer
    ([1, 2], 400, None),
]


def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(sim):
    url, _ = sim
    for body, status, param in BAD:
        got, data = post(url, "/v1/completions", body)
        assert (got, data["error"]["param"]) == (status, param), (body, data)
        assert set(data["error"]) == {"message", "type", "param", "code"} and data["error"]["message"]
    for body, param in [
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "1"}]}, "messages"),  # an unknown role: 400, as OpenAI's
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages"),
        ({"messages": [{"role": "user", "content": "1"}], "tools": [{"type": "function"}]}, "tools"),
        (
            {"messages": [{"role": "user", "content": "1"}], "response_format": {"type": "json_object"}},
            "response_format",
        ),
        ({"messages": [{"role": "user", "content": "1"}], "top_logprobs": 2}, None),  # without logprobs
    ]:
        got, data = post(url, "/v1/chat/completions", body)
        assert (got, data["error"]["param"]) == (400, param), (body, data)
    got, data = post(url, "/v1/completions", {"prompt": [1], "max_tokens": 1, "temperature": 0})
    assert got == 200 and data["choices"][0]["finish_reason"] == "length"


def test_a_request_without_the_key_gets_401(sim):
    url, _ = sim
    for key in (None, "wrong"):
        got, data = post(url, "/v1/completions", {"prompt": [1]}, key=key)
        assert got == 401 and data["error"]["type"] == "authentication_error"
    with pytest.raises(openai.AuthenticationError):
        client(url, "wrong").completions.create(model="sim", prompt=[1], max_tokens=2)


def test_past_the_queue_bound_429():
    # one processing unit: the stream holds it, the next request waits in the engine's scheduler
    with simulated_engine(units=1) as engine, running(create_app(engine, "sim", max_queue=2)) as url:
        f, sock = stream_socket(url, {"prompt": [2], "max_tokens": 300, "temperature": 0, "stream": True})
        next_event(f)  # running
        waiting = threading.Thread(target=post, args=(url, "/v1/completions", {"prompt": [1], "max_tokens": 2}))
        waiting.start()
        deadline = time.monotonic() + 5
        while gauge(url, "num_requests_waiting") != 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        got, data = post(url, "/v1/completions", {"prompt": [1], "max_tokens": 2})
        assert got == 429 and data["error"]["code"] == "queue_full"
        f.close(), sock.close()
        waiting.join(10)


def test_metrics_parse_and_count_the_requests_sent():
    # the virtual clock: each request's drafts, acceptances and timeline are those of its direct call
    with simulated_engine("virtual") as engine, running(create_app(engine, "sim")) as url:
        c = client(url)
        results = [engine.generate([i + 1], SamplingParams(temperature=0, max_tokens=5 + 4 * i)) for i in range(3)]
        for i in range(3):
            out = c.completions.create(model="sim", prompt=[i + 1], max_tokens=5 + 4 * i, temperature=0, stream=i == 1)
            if i == 1:
                list(out)  # the stream read to its end (requests no longer wait for each other)
        post(url, "/v1/completions", {"prompt": []})
        m = parse_prometheus(metrics_text(url))

    def one(name, **labels):
        return m[f"specpar:{name}", frozenset({"model_name": "sim", **labels}.items())]

    assert one("request_success_total", endpoint="/v1/completions", finished_reason="length") == 3
    assert ("specpar:request_success_total", frozenset({"model_name": "sim", "endpoint": "/v1/completions",
            "finished_reason": "400"}.items())) not in m  # fmt: skip
    assert one("request_errors_total", endpoint="/v1/completions", status="400") == 1
    assert one("generation_tokens_total") == 5 + 9 + 13
    assert one("prompt_tokens_total") == 3
    assert one("e2e_request_latency_seconds_count") == 3 and one("time_to_first_token_seconds_count") == 3
    assert one("time_per_output_token_seconds_count") == 3 and one("request_queue_time_seconds_count") == 3
    assert one("e2e_request_latency_seconds_bucket", le="+Inf") == 3
    assert one("spec_decode_num_drafts_total") == sum(r.verifications for r in results)
    assert one("spec_decode_num_draft_tokens_total") == sum(r.drafted for r in results) > 0
    assert one("spec_decode_num_accepted_tokens_total") == sum(r.accepted for r in results) > 0
    for j in range(3):
        want = sum(r.position_accepted[j] for r in results if j < len(r.position_accepted))
        assert one("spec_decode_num_accepted_tokens_per_pos_total", position=str(j)) == want
    timeline = [t for r in results for t in r.timeline]
    target = [t for t in timeline if t.server.startswith("target")]
    assert one("target_busy_seconds_total") == pytest.approx(sum(t.end_ms - t.start_ms for t in target) / 1e3)
    assert one("cancelled_tasks_total", pool="target") == sum(t.cancelled for t in target)
    assert one("cancelled_tasks_total", pool="drafter") == sum(t.cancelled for t in timeline) - sum(
        t.cancelled for t in target
    )
    wasted = sum(t.end_ms - t.start_ms for t in target if t.cancelled) / 1e3
    assert one("target_time_wasted_seconds_total") == pytest.approx(wasted)
    assert one("target_servers") == 2


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["threads", "ray"])
def test_sigterm_finishes_the_stream_in_flight_then_exits(processes, runtime):
    """On Ray too: Ray, started by the first request's worker thread, put its own SIGTERM handler (a native stack
    dump, then death) over uvicorn's, so the stream was cut, the engine never closed and Ray's agents were left
    running in the server's process group."""
    if runtime == "ray":
        pytest.importorskip("ray")
    env = dict(os.environ, SPECPAR_API_KEY=KEY)
    proc, url = serve_process(processes, "--simulated", "--target-ms", "2", "-v", "--runtime", runtime,
                              "--sp-degree", "1", env=env)  # fmt: skip
    try:
        f, sock = stream_socket(url, {"prompt": [2], "max_tokens": 300, "temperature": 0, "stream": True})
        next_event(f)
        proc.send_signal(signal.SIGTERM)
        rest = f.read().decode()  # the stream goes on to its end
        f.close(), sock.close()
        assert "data: [DONE]" in rest and '"finish_reason": "length"' in rest
        # uvicorn re-raises the signal once it has shut down (Ray's Python handler then exits with status 15)
        assert proc.wait(60) in (0, -signal.SIGTERM, signal.SIGTERM)
        assert "engine closed" in proc.stderr.read()
        # a local Ray's processes stop with it (and the server's socket with the server) within 2 s: polled, not slept
        deadline = time.monotonic() + 2
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_sigterm_past_the_shutdown_timeout_ends_requests_as_openai_errors(processes):
    """The audit's repro (issue 32, 4a): target 50 ms a pass, --shutdown-timeout 1, one 100-token stream and one
    whole request of 100 tokens, then SIGTERM. Before: the stream cut mid-body (no error event, no [DONE]), the whole
    request a plain-text 500, a CancelledError traceback per request in the log. Now: the stream ends with an error
    event and [DONE], the whole request gets a 503 with OpenAI's error body, no traceback; and a short request in
    flight at the signal (the control) still finishes normally within the timeout."""
    proc, url = serve_process(processes, "--simulated", "--target-tpot", "50", "--drafter-tpot", "5",
                              "--shutdown-timeout", "1", "--units", "3", "--sp-degree", "1",
                              env=dict(os.environ, SPECPAR_API_KEY=KEY))  # fmt: skip
    try:
        f, sock = stream_socket(url, {"prompt": [2], "max_tokens": 100, "temperature": 0, "stream": True})
        next_event(f)
        answers = {}

        def whole(name, max_tokens):
            answers[name] = post(url, "/v1/completions", {"prompt": [3], "max_tokens": max_tokens, "temperature": 0})

        threads = [threading.Thread(target=whole, args=a) for a in (("long", 100), ("short", 3))]
        for t in threads:
            t.start()
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        rest = f.read().decode()
        f.close(), sock.close()
        for t in threads:
            t.join(30)
        events = [line.removeprefix("data: ") for line in rest.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]", rest
        error = json.loads(events[-2])["error"]
        assert (
            error["type"] == "server_error" and "did not finish within its shutdown timeout (1 s)" in error["message"]
        )
        status, body = answers["long"]
        assert status == 503 and body["error"]["code"] == "server_shutting_down", (status, body)
        assert "shutting down" in body["error"]["message"]
        status, body = answers["short"]
        assert status == 200 and body["choices"][0]["finish_reason"] == "length", (status, body)
        assert proc.wait(60) in (0, -signal.SIGTERM, signal.SIGTERM)
        log = proc.stderr.read()
        assert "Traceback" not in log and "CancelledError" not in log, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_requests_are_served_first_come_first_served():
    # one processing unit: the requests that do not fit wait in the engine's scheduler, first come first served
    with simulated_engine(units=1) as engine, running(create_app(engine, "sim")) as url:
        served_in_arrival_order(url)


def served_in_arrival_order(url: str) -> None:
    f, sock = stream_socket(url, {"prompt": [2], "max_tokens": 200, "temperature": 0, "stream": True})
    next_event(f)  # the engine is busy: the requests below queue
    done = []

    def send(i):
        post(url, "/v1/completions", {"prompt": [i + 1], "max_tokens": 3, "temperature": 0})
        done.append(i)

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=send, args=(i,)))
        threads[-1].start()
        deadline = time.monotonic() + 5
        while gauge(url, "num_requests_waiting") != i + 1:
            assert time.monotonic() < deadline
            time.sleep(0.002)
    f.close(), sock.close()
    for t in threads:
        t.join(10)
    assert done == [0, 1, 2, 3]


def test_unknown_route_and_cli_errors_are_one_line(capsys):
    from specpar.entrypoints.cli import main

    with simulated_engine() as engine, running(create_app(engine, "sim")) as url:
        got, data = post(url, "/v1/embeddings", {"input": "x"})
        assert got == 404 and data["error"]["message"]
    assert main(["serve", "x", "--simulated"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert main(["serve", "--simulated", "--max-queue", "-1"]) == 2
