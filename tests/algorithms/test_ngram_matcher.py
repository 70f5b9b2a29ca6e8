"""The n-gram (prompt lookup) matcher: its continuations against a brute-force reference written from the definition,
the incremental index across a growing generation, and the chain and tree proposals it makes (point masses)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpar.algorithms.ngram import NgramMatcher, chain_proposal, point_masses, tree_proposal
from specpar.core.calls import Context
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.errors import ConfigError


def reference(tokens: list[int], k: int, min_n: int, max_n: int, branches: int) -> list[list[int]]:
    """The definition, by brute force: n from max_n down to min_n; for each, every earlier end of the last n tokens,
    the most recent first; its next k tokens, unless they start a continuation already found."""
    out: list[list[int]] = []
    total = len(tokens)
    for n in range(max_n, min_n - 1, -1):
        if n >= total:
            continue
        for end in range(total - 1, n - 1, -1):
            if tokens[end - n : end] == tokens[total - n :]:
                found = tokens[end : end + k]
                if not any(have[: len(found)] == found for have in out):
                    out.append(found)
                    if len(out) == branches:
                        return out
    return out


def test_the_last_ngram_is_matched_longest_first_and_most_recent_first():
    m = NgramMatcher(1, 3)
    #         0  1  2  3  4  5  6  7  8  9
    tokens = [5, 1, 2, 3, 9, 1, 2, 4, 7, 2]
    # n = 3: (4, 7, 2) nowhere earlier; n = 2: (7, 2) nowhere; n = 1: 2 at ends 3 and 7, most recent first
    assert m.continuations(tokens, 3) == [[4, 7, 2]]
    assert m.continuations(tokens, 3, branches=2) == [[4, 7, 2], [3, 9, 1]]
    assert NgramMatcher(2, 3).continuations(tokens, 3) == []  # no 2-gram or 3-gram match
    # a longer match wins over a more recent shorter one
    tokens = [1, 2, 3, 8, 0, 2, 3, 6, 1, 2, 3]
    assert m.continuations(tokens, 2) == [[8, 0]]  # (1, 2, 3) at end 3, not (2, 3) at end 7
    assert m.continuations(tokens, 2, branches=3) == [[8, 0], [6, 1]]
    # fewer than k tokens where the context ends first
    assert m.continuations([4, 4, 4], 5) == [[4]]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 3), min_size=1, max_size=40),
    k=st.integers(1, 6),
    sizes=st.tuples(st.integers(1, 4), st.integers(0, 3)),
    branches=st.integers(1, 4),
)
def test_continuations_follow_the_definition(tokens, k, sizes, branches):
    min_n, max_n = sizes[0], sizes[0] + sizes[1]
    assert NgramMatcher(min_n, max_n).continuations(tokens, k, branches) == reference(tokens, k, min_n, max_n, branches)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.lists(st.integers(0, 4), max_size=5), st.integers(0, 4)), min_size=1, max_size=15))
def test_the_index_follows_a_growing_generation_with_drafts_after_it(steps):
    """One matcher over one growing base, queried with Contexts that end in drafts: the same answers as fresh."""
    m, base = NgramMatcher(1, 3), [1, 2, 3, 1]
    for verified, drafts in steps:
        base.extend(verified)
        ctx = Context(base, len(base), tuple(range(drafts)))
        assert m.continuations(ctx, 4, 3) == reference(list(ctx), 4, 1, 3, 3)
    # a new generation (another base list) starts the index again
    assert m.continuations(Context([7, 8, 7], 3), 2) == [[8, 7]]


def test_bad_sizes_are_a_config_error():
    with pytest.raises(ConfigError, match="prompt_lookup_min"):
        NgramMatcher(0, 2)
    with pytest.raises(ConfigError, match=r"prompt_lookup_min \(3\) must be at most prompt_lookup_max \(2\)"):
        NgramMatcher(3, 2)


def test_a_chain_proposal_is_a_point_mass_when_sampling():
    assert chain_proposal([3, 1], GREEDY, 5).q is None
    q = chain_proposal([3, 1], Decoding(temperature=1.0), 5).q
    assert q.shape == (2, 5) and q[0, 3] == q[1, 1] == 1.0 and q.sum() == 2.0


def test_continuations_become_a_token_tree_with_shared_prefixes_merged():
    sampling = Decoding(temperature=0.7)
    tree = tree_proposal([[4, 7, 2], [4, 5], [3, 9]], sampling, 10)
    assert tree.tokens == [4, 7, 2, 5, 3, 9] and tree.parents == [-1, 0, 1, 0, -1, 4]
    assert [child for child, _ in tree.draws[-1]] == [0, 4]  # one draw per distinct child, the first match first
    assert [child for child, _ in tree.draws[0]] == [1, 3]
    for draws in tree.draws.values():
        for child, row in draws:
            assert np.array_equal(row, point_masses([tree.tokens[child]], 10)[0])
    greedy = tree_proposal([[4, 7, 2], [4, 5]], GREEDY, 10)
    assert greedy.draws[0] == [(1, None), (3, None)] and greedy.most_likely_leaf() == 2
