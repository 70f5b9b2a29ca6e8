"""The logits processors against Hugging Face's own (an independent implementation), and SamplingParams' checks."""

import math

import numpy as np
import pytest
import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specpar import ConfigError, SamplingParams
from specpar.core.logits_processors import LogitsProcessors


def hf_processed(logits, prefix, temperature, penalty, top_k, top_p, min_p):
    """HF generate's order: penalty, temperature, top-k, top-p, min-p."""
    procs = LogitsProcessorList()
    if penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty))
    procs.append(TemperatureLogitsWarper(temperature))
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p))
    if min_p > 0.0:
        procs.append(MinPLogitsWarper(min_p))
    return procs(torch.tensor([prefix]), torch.tensor(logits[None])).numpy()[0]


@pytest.mark.parametrize(
    "penalty, top_k, top_p, min_p",
    [(1.3, 0, 1.0, 0.0), (0.7, 0, 1.0, 0.0), (1.0, 5, 1.0, 0.0), (1.0, 0, 0.8, 0.0), (1.0, 0, 1.0, 0.2),
     (1.5, 7, 0.9, 0.05)],
)  # fmt: skip
def test_rows_are_hugging_faces_processed_logits_each_with_its_own_prefix(penalty, top_k, top_p, min_p):
    rng = np.random.default_rng(0)
    V, context, start = 20, [3, 4, 4, 9, 1, 7, 2], 4  # rows at positions 4..6: prefixes context[:4], [:5], [:6]
    logits = rng.normal(0, 2, size=(3, V))
    got = LogitsProcessors(penalty, top_k, top_p, min_p).apply(logits, context, start, 0.8)
    for i in range(3):
        want = hf_processed(logits[i], context[: start + i], 0.8, penalty, top_k, top_p, min_p)
        assert np.array_equal(np.isinf(got[i]), np.isinf(want))
        # equal up to a constant per row (specpar shifts them so that the largest is 0: no T overflows them)
        assert np.allclose((got[i] - got[i].max())[np.isfinite(got[i])], (want - want.max())[np.isfinite(want)])


def test_greedy_applies_only_the_penalty():
    logits = np.array([[1.0, 2.0, -1.0, 1.9]])
    z = LogitsProcessors(2.0, top_k=1, top_p=0.1).apply(logits, [1], 1, 0.0)
    assert z.tolist() == [[1.0, 1.0, -1.0, 1.9]]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(top_k=-2), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(repetition_penalty=-1.0), "repetition_penalty"),
        (dict(stop=[""]), "stop"),
        (dict(stop=""), "stop"),
        (dict(temperature=math.inf), "temperature"),
        (dict(temperature=math.nan), "temperature"),
        (dict(temperature=-0.5), "temperature"),
        (dict(min_p=1.5), "min_p"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(stop_token_ids=[-3]), "stop_token_ids"),
        (dict(topp=0.9), "unknown sampling parameter 'topp'"),
    ],
)
def test_bad_params_get_one_clear_error(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        SamplingParams.from_kwargs(**kwargs)


def test_defaults_process_nothing():
    d = SamplingParams(temperature=0).decoding()
    assert d.greedy and d.processors is None and not d.reshapes
    assert not SamplingParams(top_k=3, temperature=0).decoding().reshapes  # greedy: a filter keeps the argmax
    assert SamplingParams(top_k=3, temperature=1.0).decoding().reshapes
    assert not SamplingParams().decoding().greedy  # vLLM's default temperature, 1
