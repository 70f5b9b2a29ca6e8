"""specpar serve under load: requests at once share the engine's processing units (no request waits for another
to end), streams included; each answer equals the one it gets alone; the scheduler's load metrics move on
/metrics; a client that leaves frees its units at once. Simulated models and a tiny transformers pair, each on a
live in-process server that the test always stops. Control: an engine of one unit runs the same burst one
request at a time, which the concurrency check catches."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from served import (  # noqa: E402
    KEY,
    client,
    metrics_text,
    next_event,
    parse_prometheus,
    post,
    running,
    simulated_engine,
    stream_socket,
)
from specpar import Engine, SamplingParams  # noqa: E402
from specpar.entrypoints.server.app import create_app  # noqa: E402

# Eight requests: every algorithm, several SP degrees and lookaheads, lengths, stop ids, seeded sampling (the
# Gumbel coupling reproduces a seed whatever the share), penalties, n=2, streams.
BURST = [
    {"prompt": [1, 2], "max_tokens": 40, "temperature": 0, "speculative": {"algorithm": "dsi"}},
    {"prompt": [3], "max_tokens": 33, "temperature": 0, "speculative": {"algorithm": "si", "lookahead": 2}},
    {"prompt": [4, 5, 6], "max_tokens": 25, "temperature": 0, "speculative": {"algorithm": "nonsi"}},
    {"prompt": [7], "max_tokens": 37, "temperature": 0, "stream": True,
     "speculative": {"algorithm": "dsi", "sp_degree": 1, "lookahead": 4}},
    {"prompt": [8, 1], "max_tokens": 30, "temperature": 0.8, "seed": 11, "speculative": {"algorithm": "dsi"}},
    {"prompt": [9], "max_tokens": 28, "temperature": 0, "stop_token_ids": [5], "ignore_eos": True,
     "speculative": {"algorithm": "si"}},
    {"prompt": [10, 3], "max_tokens": 35, "temperature": 0.7, "seed": 3, "n": 2, "stream": True,
     "speculative": {"algorithm": "si", "lookahead": 3}},
    {"prompt": [2, 2], "max_tokens": 31, "temperature": 0, "frequency_penalty": 0.5,
     "speculative": {"algorithm": "dsi", "sp_degree": 2}},
]  # fmt: skip


def completions(url: str, body: dict) -> list[str]:
    """Each choice's text of one completions request, streamed or whole, by choice index."""
    c = client(url)
    kw = {k: v for k, v in body.items() if k not in ("speculative", "stop_token_ids", "ignore_eos", "stream")}
    extra = {k: body[k] for k in ("speculative", "stop_token_ids", "ignore_eos") if k in body}
    if not body.get("stream"):
        out = c.completions.create(model="m", **kw, extra_body=extra)
        return [ch.text for ch in sorted(out.choices, key=lambda ch: ch.index)]
    texts: dict[int, str] = {}
    for chunk in c.completions.create(model="m", **kw, extra_body=extra, stream=True):
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
    return [texts[i] for i in sorted(texts)]


def burst(url: str) -> tuple[list[list[str]], list[dict]]:
    """BURST sent at once (one thread each, released together): (each request's texts, the load metrics scraped
    while it ran)."""
    out: list = [None] * len(BURST)
    start = threading.Barrier(len(BURST) + 1)
    errors: list = []

    def send(i):
        start.wait()
        try:
            out[i] = completions(url, BURST[i])
        except BaseException as exc:  # raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(BURST))]
    for t in threads:
        t.start()
    start.wait()
    seen = []
    while any(t.is_alive() for t in threads):
        seen.append(load(url))
        time.sleep(0.003)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out, seen


def load(url: str) -> dict:
    m = parse_prometheus(metrics_text(url))
    return {name.removeprefix("specpar:"): v for (name, labels), v in m.items() if not labels - {("model_name", "m")}}


def check_burst(engine: Engine, greedy_tokens) -> list[dict]:
    """The burst on a live server of ``engine``: every answer equals its answer alone (and, greedy, the target's
    tokens); returns the metrics seen during the burst."""
    with running(create_app(engine, "m", api_key=KEY)) as url:
        alone = [completions(url, body) for body in BURST]
        before = load(url)
        together, seen = burst(url)
        after = load(url)
    assert together == alone
    for body, texts in zip(BURST, alone):
        if body["temperature"] == 0 and "stop_token_ids" not in body and "frequency_penalty" not in body:
            assert [int(t) for t in texts[0].split()] == greedy_tokens(body["prompt"], body["max_tokens"])
    assert after["output_tokens_total"] - before["output_tokens_total"] == sum(len(t.split()) for x in alone for t in x)
    assert after["num_requests_running"] == after["num_requests_waiting"] == after["num_units_in_use"] == 0
    return seen


@pytest.mark.slow
def test_eight_requests_at_once_on_simulated_models_each_as_alone():
    engine = simulated_engine(units=4)  # 4 units, DSI's SP 2 at most: at least two requests run at once
    seen = check_burst(engine, engine.target_model.greedy_tokens)
    assert max(m["num_requests_running"] for m in seen) >= 2
    assert max(m["num_requests_waiting"] for m in seen) >= 1
    assert max(m["num_units_in_use"] for m in seen) == 4
    assert max(m["goodput_tokens_per_second"] for m in seen) > 0
    assert 1 <= max(m["units_per_request"] for m in seen) <= 4


@pytest.mark.slow
def test_control_one_unit_serves_the_burst_one_request_at_a_time():
    engine = simulated_engine(units=1)
    seen = check_burst(engine, engine.target_model.greedy_tokens)
    assert max(m["num_requests_running"] for m in seen) == 1  # what the concurrency check above refuses
    assert max(m["num_requests_waiting"] for m in seen) >= 2


@pytest.mark.slow
def test_eight_requests_at_once_on_tiny_transformers_each_as_alone():
    from tiny_transformers import reference_greedy, tiny_pair

    target, drafter = tiny_pair(vocab=32, seed=4)
    engine = Engine(target, drafter, sp_degree=2, units=3, runtime="threads", lookahead=3)
    seen = check_burst(engine, lambda p, n: reference_greedy(target, p, n))
    assert max(m["num_requests_running"] for m in seen) >= 2


def test_a_client_leaving_a_stream_gives_its_units_to_the_waiting_request_at_once():
    """One unit: a long stream holds it and a request waits; the stream's client goes, the request starts."""
    with simulated_engine(units=1) as engine, running(create_app(engine, "sim")) as url:
        f, sock = stream_socket(url, {"prompt": [2], "max_tokens": 1900, "temperature": 0, "stream": True})
        next_event(f)
        got = {}

        def waiting():
            got["answer"] = post(url, "/v1/completions", {"prompt": [3], "max_tokens": 3, "temperature": 0})
            got["at"] = time.perf_counter()

        thread = threading.Thread(target=waiting)
        thread.start()
        try:
            deadline = time.monotonic() + 5
            while engine.load_metrics().requests_waiting != 1:
                assert time.monotonic() < deadline
                time.sleep(0.005)
            time.sleep(0.05)
            assert "answer" not in got  # it waits for the stream's unit
            left = time.perf_counter()
        finally:
            f.close(), sock.close()
            thread.join(10)
        status, data = got["answer"]
        assert status == 200 and [
            int(t) for t in data["choices"][0]["text"].split()
        ] == engine.target_model.greedy_tokens([3], 3)
        assert got["at"] - left < 0.5  # the stream had ~1,850 tokens (~4 s) left
        assert engine.load_metrics().units_in_use == 0


def test_engine_generate_runs_a_list_at_once_in_input_order():
    """A list of prompts (mixed SamplingParams) runs as concurrent requests: outputs in order, each its single
    call's; the scheduler saw several at once."""
    engine = simulated_engine(units=4)
    prompts = [[i + 1, (3 * i) % 7 + 1] for i in range(8)]
    params = [  # seeded sampling with the coupling that reproduces a seed whatever the share
        SamplingParams(temperature=0 if i % 3 else 0.9, seed=i, coupling="gumbel", max_tokens=20 + 3 * i)
        for i in range(8)
    ]
    with engine:
        alone = [engine.generate(p, q, algorithm="dsi") for p, q in zip(prompts, params)]
        seen, done = [], threading.Event()

        def watch():
            while not done.is_set():
                seen.append(engine.load_metrics())
                time.sleep(0.002)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            together = engine.generate(prompts, params, algorithm="dsi")
        finally:
            done.set()
            watcher.join()
    assert [r.tokens for r in together] == [r.tokens for r in alone]
    assert max(m.requests_running for m in seen) >= 2


def test_metrics_names_are_vllms():
    with simulated_engine() as engine, running(create_app(engine, "m")) as url:
        text = metrics_text(url)
    for name in ("num_requests_running", "num_requests_waiting", "num_units", "num_units_in_use", "units_per_request",
                 "goodput_tokens_per_second"):  # fmt: skip
        assert f"# TYPE specpar:{name} gauge" in text
    for name in ("output_tokens_total", "share_switches_total"):
        assert f"# TYPE specpar:{name} counter" in text


def test_engine_generate_runs_a_list_at_once_on_the_virtual_clock():
    """Simulated models on the virtual clock: a list arrives at once on one shared clock, so the last ends well
    before the sum of the requests' times alone (which one after the other would take, to the microsecond)."""
    engine = simulated_engine("virtual", units=4)
    prompts = [[i + 1, (3 * i) % 7 + 1] for i in range(8)]
    params = [
        SamplingParams(temperature=0 if i % 3 else 0.9, seed=i, coupling="gumbel", max_tokens=20 + 3 * i)
        for i in range(8)
    ]
    with engine:
        alone = [engine.generate(p, q, algorithm=a) for p, q, a in zip(prompts, params, ["dsi", "si", "nonsi"] * 3)]
        together = engine.generate(prompts[:3], params[:3], algorithm="dsi") + engine.generate(prompts, params)
        again = engine.generate(prompts, params)
    assert [r.tokens for r in together[3:]] == [r.tokens for r in alone]
    assert [r.tokens for r in together[:3]] == [r.tokens for r in alone[:3]]
    assert [(r.tokens, r.time_ms, r.queue_ms) for r in again] == [
        (r.tokens, r.time_ms, r.queue_ms) for r in together[3:]
    ]
    makespan = max(r.queue_ms + r.time_ms for r in together[3:])
    assert makespan < 0.8 * sum(r.time_ms for r in alone)
    assert max(r.queue_ms for r in together[3:]) > 0  # 8 requests, 4 units: some waited
