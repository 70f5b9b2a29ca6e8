"""specpar serve against its own OpenAPI schema (schemathesis): requests generated from the schema, valid and
not, get no server error (5xx), and the server is still up and correct afterwards. Bounded: a fixed number of
examples per operation on a virtual-clock engine with a 64-token context window."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from served import KEY, post, running  # noqa: E402
from specpar import Engine, SamplingParams, SimulatedModel  # noqa: E402
from specpar.entrypoints.server.app import create_app  # noqa: E402

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)

EXAMPLES = 30  # per operation and mode (8 operations)


@pytest.fixture(scope="module")
def served():
    target = SimulatedModel(16, seed=0)
    engine = Engine(target, target.drafter(0.7), sp_degree=2, runtime="virtual", lookahead=3)
    with running(create_app(engine, "sim", api_key=KEY, max_model_len=64)) as url:
        yield url, engine, schemathesis.openapi.from_url(url + "/openapi.json")


def operations(schema):
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_generated_request_gets_a_server_error(served, mode):
    """Each operation's generated requests (schema-valid ones, and ones that break the schema), EXAMPLES each."""
    from schemathesis.generation.modes import GenerationMode

    url, _, schema = served
    ops = operations(schema)
    assert {op.path for op in ops} >= {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}
    statuses = []
    if mode == "negative":  # a GET without parameters has nothing to break
        ops = [op for op in ops if op.method.upper() == "POST"]
    for op in ops:

        @given(case=op.as_strategy(GenerationMode(mode)))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def check(case):
            t0 = time.perf_counter()
            response = case.call(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text)
            assert time.perf_counter() - t0 < 10, "a request took over 10 s"
            statuses.append(response.status_code)

        check()
    assert len(statuses) >= 2 * len(ops)  # requests were sent
    if mode == "positive":
        assert statuses.count(200) >= len(ops)  # and schema-valid ones mostly served


def test_the_server_is_up_and_correct_after_the_run(served):
    url, engine, _ = served
    status, body = post(url, "/v1/completions", {"prompt": [1, 2], "max_tokens": 5, "temperature": 0})
    assert status == 200
    assert [int(t) for t in body["choices"][0]["text"].split()] == engine.generate(
        [1, 2], SamplingParams(temperature=0, max_tokens=5)
    ).tokens
