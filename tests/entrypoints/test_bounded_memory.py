"""A long-running engine's memory does not grow with the requests it serves.

The class: a per-pass log kept forever (TransformersServer.forward_log was a list: +10 MB over 2000 requests on a
tiny pair, linear in requests). Memory is measured as the interpreter's allocated blocks (sys.getallocatedblocks:
no tracing, so 5,000 requests take seconds): 4,800 requests after a warm-up added about 15,000 blocks before the
fix (3 per request: the interval's tuple and its two floats) and a few hundred after it.
"""

from __future__ import annotations

import gc
import sys

import pytest

import specpar.entrypoints.requests as requests_module
from specpar import SamplingParams
from specpar.backends.forward_log import ForwardLog
from specpar.entrypoints.engine import Engine
from tiny_transformers import tiny_pair

pytestmark = pytest.mark.slow  # (pytest -m 'not slow' leaves it out: the fast inner loop)


def test_the_forward_log_holds_the_latest_passes_and_numbers_them_from_the_first():
    log = ForwardLog(capacity=4)
    for i in range(10):
        log.append((float(i), i + 0.5))
    assert len(log) == 10  # passes logged so far
    assert log.since(7) == log[7:] == [(7.0, 7.5), (8.0, 8.5), (9.0, 9.5)]
    assert log.since(2) == [(6.0, 6.5), (7.0, 7.5), (8.0, 8.5), (9.0, 9.5)]  # only the latest 4 are held
    assert log.since(10) == [] and ForwardLog().since(0) == []
    with pytest.raises(TypeError, match=r"log\[n:\]"):
        log[2:5]


def test_an_engine_serving_5000_requests_on_a_tiny_pair_keeps_its_memory_bounded(monkeypatch):
    monkeypatch.setattr(requests_module, "cpu_cores", lambda: 1)  # one torch thread: a tiny pass in a millisecond
    target, drafter = tiny_pair(vocab=64, seed=0)
    params = SamplingParams(max_tokens=1)
    with Engine(target, drafter, sp_degree=1) as engine:
        for _ in range(200):  # warm-up: every cache and pool the first requests fill
            engine.generate([1, 2, 3], params, algorithm="nonsi")
        gc.collect()
        before = sys.getallocatedblocks()
        for _ in range(4800):
            result = engine.generate([1, 2, 3], params, algorithm="nonsi")
        gc.collect()
        grown = sys.getallocatedblocks() - before
        assert result.overhead["wall_ms"] > 0  # the engine still reads each request's passes from the log
        assert len(engine.targets.servers[0].forward_log) == 5000
    assert grown < 2000, f"{grown} memory blocks more after 4,800 requests"
