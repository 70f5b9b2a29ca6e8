"""The passes a llama.cpp server plans (specpar.backends.llama.prefill, pure functions: no llama.cpp needed): the
prompt's canonical passes are a function of its length alone, whatever part of it the cache already holds; exact
passes after it hold at most ``limit`` tokens and ``cap`` rows; a cache is reused only in the passes two prompts
share."""

from __future__ import annotations

import pytest

from specpar.backends.llama import prefill
from specpar.core.errors import ConfigError


def boundaries(start: int, lengths: list[int]) -> list[int]:
    """The positions where the planned passes end."""
    out, p = [], start
    for n in lengths:
        p += n
        out.append(p)
    return out


def test_the_region_is_the_prompt_but_its_last_token():
    assert [prefill.region(n) for n in (0, 1, 2, 118)] == [0, 0, 1, 117]


@pytest.mark.parametrize("held", [0, 32, 64, 96])
def test_the_prompts_passes_end_at_multiples_of_the_size_wherever_the_cache_stops(held):
    """A prompt of 100 tokens in passes of 32: 0-32-64-96-99, then its last token and 5 more in exact passes of 4;
    a server that holds the first ``held`` tokens (whole passes) feeds the same passes from there."""
    got = boundaries(held, prefill.passes(held, 105, 99, 32, 4))
    assert got == [b for b in (32, 64, 96, 99) if b > held] + [103, 105]


def test_without_a_region_every_pass_is_an_exact_one():
    assert prefill.passes(0, 20, 0, 512, 7) == [7, 7, 6]
    assert prefill.passes(10, 11, 0, 512, 7) == [1]


def test_a_pass_after_the_region_ends_early_rather_than_ask_more_rows_than_the_buffer_holds():
    rows = list(range(0, 200))
    lengths = prefill.passes(0, 200, 0, 512, 512, rows, cap=64)
    assert lengths == [64, 64, 64, 8]


def test_a_canonical_pass_never_splits_and_refuses_too_many_rows():
    with pytest.raises(ConfigError, match="rows asked of one pass over the prompt"):
        prefill.passes(0, 101, 100, 512, 7, list(range(0, 101)), cap=64)
    assert prefill.passes(0, 101, 100, 512, 7, [99, 100], cap=64) == [100, 1]


def test_a_context_that_ends_inside_its_prompt_is_refused():
    with pytest.raises(ConfigError, match="ends inside its request's prompt"):
        prefill.passes(0, 50, 99, 32, 7)


def test_a_cache_is_reused_in_the_whole_passes_both_regions_share():
    assert prefill.reusable(99, 99, 32) == prefill.EVERYTHING
    assert prefill.reusable(79, 99, 32) == 64  # 0-32, 32-64 alike; 64-79 against 64-96
    assert prefill.reusable(99, 79, 32) == 64
    assert prefill.reusable(0, 99, 32) == 0  # a cache filled without a region (exact passes only)
    assert prefill.reusable(20, 99, 32) == 0  # a short prompt: its only pass, 0-20, is not 0-32


def test_below_the_region_only_whole_passes_of_a_shared_prefix_are_kept():
    assert [prefill.whole_passes(keep, 99, 32) for keep in (0, 31, 32, 48, 64, 98)] == [0, 0, 32, 32, 64, 96]
    assert [prefill.whole_passes(keep, 99, 32) for keep in (99, 105)] == [99, 105]  # past the region: every token
