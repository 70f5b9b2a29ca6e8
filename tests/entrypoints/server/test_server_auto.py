"""A served request's algorithm "auto" (prediction/auto.py): the response says what it ran, predicted and why (a
``specpar`` field beside ``usage``), and /metrics counts the choices by method with predicted and measured time."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from served import KEY, client, gauge, post, running, simulated_engine  # noqa: E402
from specpar.entrypoints.server.app import create_app  # noqa: E402

pytestmark = pytest.mark.slow  # live servers


def counter(url: str, name: str, **labels) -> float:
    from served import metrics_text, parse_prometheus

    key = frozenset({("model_name", "sim"), *labels.items()})
    return parse_prometheus(metrics_text(url)).get((f"specpar:{name}_total", key), 0.0)


def test_a_requests_auto_reports_its_choice_in_the_response_and_the_metrics():
    engine = simulated_engine()
    with running(create_app(engine, "sim", api_key=KEY, max_model_len=2048)) as url:
        status, body = post(url, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 12,
                                                     "speculative": {"algorithm": "auto"}})  # fmt: skip
        assert status == 200, body
        chosen = body["specpar"]
        assert chosen["method"] in ("dsi", "tree-dsi", "si", "tree-si")  # a fast, accurate drafter: it pays
        assert chosen["predicted_ms"] > 0 and chosen["measured_ms"] > 0
        assert chosen["reason"].startswith(chosen["label"] + ": predicted")
        assert body["usage"]["completion_tokens"] == 12
        assert counter(url, "auto_choices", method=chosen["method"]) == 1
        assert counter(url, "auto_predicted_seconds") == pytest.approx(chosen["predicted_ms"] / 1e3)
        assert counter(url, "auto_measured_seconds") > 0
        # control: a request that names its algorithm has no such field and counts no choice
        status, plain = post(url, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 12})
        assert status == 200 and "specpar" not in plain
        assert counter(url, "auto_choices", method=chosen["method"]) == 1
        # the OpenAI client reads the response as usual (the extra field rides along)
        out = client(url).completions.create(model="sim", prompt="1 2 3", max_tokens=5,
                                             extra_body={"speculative": {"algorithm": "auto"}})  # fmt: skip
        assert out.usage.completion_tokens == 5 and out.model_extra["specpar"]["method"] == chosen["method"]
        assert gauge(url, "target_servers") == 2


def test_a_streamed_auto_request_says_its_choice_in_the_usage_chunk():
    engine = simulated_engine()
    with running(create_app(engine, "sim", api_key=KEY, max_model_len=2048)) as url:
        stream = client(url).completions.create(model="sim", prompt="1 2 3", max_tokens=6, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_body={"speculative": {"algorithm": "auto"}})  # fmt: skip
        chunks = list(stream)
        last = json.loads(chunks[-1].model_dump_json())
        assert last["usage"]["completion_tokens"] == 6 and last["specpar"]["predicted_ms"] > 0


def test_serve_algorithm_auto_is_every_requests_default():
    from specpar.entrypoints.cli import arguments, serve
    from specpar.entrypoints.cli.main import build_parser

    args = build_parser().parse_args(["serve", "--simulated", "--vocab-size", "16", "--algorithm", "auto"])
    arguments.build_all(args)
    engine, _ = serve.build_engine(args)
    with engine:
        result = engine.generate([1, 2, 3], max_tokens=12, temperature=0)
        assert result.auto is not None and result.tokens == engine.target_model.greedy_tokens([1, 2, 3], 12)
        # a request that names its algorithm runs it (the default's settings auto chose are not carried over)
        assert engine.generate([1, 2, 3], max_tokens=12, temperature=0, algorithm="si").algorithm == "si"
