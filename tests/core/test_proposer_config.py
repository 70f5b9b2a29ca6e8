"""The proposer and the adaptive lookahead in SpeculativeConfig: the field's spellings, vLLM's ``method: "ngram"``
with ``prompt_lookup_min``/``max``, and clear errors."""

from __future__ import annotations

import pytest

from specpar.core.config import SpeculativeConfig, parse_proposer
from specpar.core.errors import ConfigError


@pytest.mark.parametrize(
    "text,normal",
    [("ngram", "ngram:1:3"), ("NGRAM:2:4", "ngram:2:4"), ("ngram+drafter", "ngram:1:3+drafter"),
     ("ngram:1:1 + drafter", "ngram:1:1+drafter"), ("drafter", "drafter")],
)  # fmt: skip
def test_the_proposer_field_is_read_and_kept_in_one_spelling(text, normal):
    assert SpeculativeConfig(algorithm="si", proposer=text).proposer == normal
    assert str(parse_proposer(normal)) == normal


def test_vllms_ngram_method_selects_the_ngram_proposer_with_its_sizes():
    spec = SpeculativeConfig.from_vllm({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})
    assert (spec.proposer, spec.lookahead, spec.algorithm) == ("ngram:1:4", 5, "dsi")
    assert SpeculativeConfig.from_vllm({"method": "ngram", "prompt_lookup_min": 5}).proposer == "ngram:5:5"
    spec = SpeculativeConfig.from_vllm({"method": "ngram", "algorithm": "si", "prompt_lookup_min": 2})
    assert (spec.proposer, spec.algorithm) == ("ngram:2:3", "si")
    assert SpeculativeConfig.coerce('{"method": "ngram"}').proposer == "ngram:1:3"
    assert SpeculativeConfig(lookahead="adaptive").lookahead == "adaptive"


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: SpeculativeConfig(proposer="ngram:3:1"), r"prompt_lookup_min \(3\) must be at most"),
        (lambda: SpeculativeConfig(proposer="ngram:0:2"), "prompt_lookup_min"),
        (lambda: SpeculativeConfig(proposer="ngram:a:b"), "integers"),
        (lambda: SpeculativeConfig(proposer="eagle"), "proposer must be"),
        (lambda: SpeculativeConfig(proposer=3), "proposer must be a string"),
        (lambda: SpeculativeConfig(algorithm="hsd", proposer="ngram"), "'si' or 'dsi', not 'hsd'"),
        (lambda: SpeculativeConfig.from_vllm({"method": "si", "prompt_lookup_max": 3}), "go with method 'ngram'"),
        (lambda: SpeculativeConfig.from_vllm({"method": "ngram", "proposer": "ngram"}), "twice"),
        (lambda: SpeculativeConfig(lookahead="sometimes"), "'auto' or 'adaptive'"),
    ],
)
def test_bad_proposer_settings_are_one_config_error(make, needle):
    with pytest.raises(ConfigError, match=needle):
        make()
