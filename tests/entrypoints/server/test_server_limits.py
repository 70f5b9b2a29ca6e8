"""specpar serve's limits: huge and deeply nested bodies are refused with 4xx and the connection keeps serving;
every start-up flag is checked before the model loads (one line, exit 2); a stream from a transformers model logs
no warning; stop strings with include_stop_str_in_output and min_tokens through a tokenizer."""

from __future__ import annotations

import http.client
import json
import logging
import warnings
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi")

from served import KEY, client, running, simulated_engine  # noqa: E402
from specpar import Engine, SamplingParams  # noqa: E402
from specpar.entrypoints.server.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def sim():
    with simulated_engine() as engine, running(create_app(engine, "sim", api_key=KEY, max_body_bytes=1 << 20)) as url:
        yield url


def test_deep_and_huge_bodies_get_4xx_and_the_keep_alive_connection_serves_on(sim):
    host, port = sim.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    good = json.dumps({"prompt": [1], "max_tokens": 2, "temperature": 0}).encode()
    bodies = {
        "deep list": b"[" * 50_000 + b"]" * 50_000,
        "deep object": b'{"prompt": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001,
        "huge": b'{"prompt": "' + b"1 " * 600_000 + b'"}',
    }
    for _ in range(10):
        for name, body in bodies.items():
            conn.request("POST", "/v1/completions", body, headers)
            response = conn.getresponse()
            data = json.loads(response.read())
            assert 400 <= response.status < 500 and data["error"]["message"], name
            assert response.status == (413 if name == "huge" else 400), (name, response.status)
            conn.request("POST", "/v1/completions", good, headers)  # the same connection
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["choices"][0]["finish_reason"] == "length"
    conn.close()


def _post(url, path: str, body: bytes, content_type: str | None) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    headers = {"Authorization": f"Bearer {KEY}", **({"Content-Type": content_type} if content_type else {})}
    try:
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_a_json_body_sent_as_another_content_type_gets_a_400_naming_it(sim):
    """Before: 400 "Input should be a valid dictionary or object to extract fields from", no word of the header."""
    body = json.dumps({"prompt": [1], "max_tokens": 2, "temperature": 0}).encode()
    status, data = _post(sim, "/v1/completions", body, "text/plain; charset=utf-8")
    assert status == 400 and data["error"]["type"] == "invalid_request_error"
    assert "Content-Type: application/json (got text/plain; charset=utf-8)" in data["error"]["message"]
    status, data = _post(sim, "/v1/completions", body, None)
    assert status == 400 and "Content-Type: application/json (got none)" in data["error"]["message"]
    status, data = _post(sim, "/v1/completions", body, "application/json")  # the control
    assert status == 200 and data["choices"][0]["finish_reason"] == "length", data


def test_an_assistant_message_with_null_content_and_no_tool_calls_is_refused(sim):
    """OpenAI's null content goes only with tool_calls, which this server does not take; before, it was accepted."""
    messages = [
        {"role": "user", "content": "1 2"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "3"},
    ]
    body = json.dumps({"messages": messages, "max_tokens": 2}).encode()
    status, data = _post(sim, "/v1/chat/completions", body, "application/json")
    assert status == 400 and "an assistant message needs content" in data["error"]["message"], data
    messages[1]["content"] = "4"
    status, data = _post(sim, "/v1/chat/completions", json.dumps({"messages": messages, "max_tokens": 2}).encode(),
                         "application/json")  # fmt: skip
    assert "an assistant message needs content" not in json.dumps(data)  # a string content passes the schema


FLAGS = ["--max-model-len 0", "--api-key=", "--shutdown-timeout -1", "--vocab 1e9", "--vocab 1000000000",
         "--sp-degree 100000", "--port 70000", "--max-queue 0", "-k 0", "--acceptance 2",
         "--target-ms nan", "--host 999.1.1.1"]  # fmt: skip


@pytest.mark.parametrize("flag", FLAGS)
def test_every_bad_start_up_flag_is_one_line_and_exit_2_before_any_model_loads(flag, capsys, monkeypatch):
    from specpar.entrypoints.cli import main, serve

    monkeypatch.setattr(serve, "build_engine", lambda args: pytest.fail("the engine was built"))
    assert main(["serve", "--simulated", *flag.split(" ")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err, err


def test_an_empty_key_in_the_environment_is_refused(capsys, monkeypatch):
    from specpar.entrypoints.cli import main

    monkeypatch.setenv("SPECPAR_API_KEY", "")
    assert main(["serve", "--simulated"]) == 2
    assert "SPECPAR_API_KEY" in capsys.readouterr().err


@contextmanager
def transformers_records():
    """The warnings (from any thread) and the transformers logger's records (it does not propagate to the root)
    inside the block."""
    records: list = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield records
        records.extend(caught)
    finally:
        logger.removeHandler(handler)


def test_a_tokenizer_model_streams_without_warnings_and_stops_with_or_without_the_stop_string():
    pytest.importorskip("torch")
    import torch

    from specpar.backends.transformers_model import TransformersModel
    from tiny_transformers import perturbed, tiny_module, tiny_tokenizer

    tok = tiny_tokenizer(48)
    module = tiny_module(48, seed=5, context=128, arch="llama")
    target = TransformersModel(module, name="tiny", tokenizer=tok)
    drafter = TransformersModel(perturbed(module, 0.1, 6), name="tiny-drafter", tokenizer=tok)
    with Engine(target, drafter, sp_degree=2, lookahead=3) as engine, running(create_app(engine, "tiny")) as url:
        c = client(url, "unused")
        full = engine.generate("w3 w4 w5", SamplingParams(temperature=0, max_tokens=12))
        words = full.text.split()
        stop = words[4]
        kw = dict(model="tiny", prompt="w3 w4 w5", max_tokens=12, temperature=0, stop=[stop])
        with transformers_records() as records:
            streamed = "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))
        assert records == []
        cut = c.completions.create(**kw).choices[0].text
        kept = c.completions.create(**kw, extra_body={"include_stop_str_in_output": True}).choices[0].text
        assert streamed == cut and kept == cut + full.text[len(cut) :][: full.text[len(cut) :].index(stop) + len(stop)]
        assert kept.endswith(stop) and not cut.endswith(stop)
        late = c.completions.create(**kw, extra_body={"min_tokens": 12, "ignore_eos": True}).choices[0].text
        assert late == full.text  # no stop string counts before min_tokens
        with transformers_records() as records:  # the control: the old argument name does warn
            module(input_ids=torch.tensor([[1, 2]]), past_key_values=None)
        assert records
