"""Token trees on real transformers servers (tiny float64 models): tree attention in one pass, KV pruning after it,
expansion one pass per level, and SI / DSI over trees returning the target's own greedy tokens."""

from __future__ import annotations

import numpy as np
import pytest

from specpar import generate
from specpar.core.calls import Draft, DraftTree, Score, ScoreTree
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.trees import TokenTree, merge
from tiny_transformers import reference_greedy, tiny_pair

PROMPT = (3, 5, 7, 9, 11)
SAMPLING = Decoding(1.0, 0)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab=64, seed=3, noise=0.1, latencies=(LatencyProfile(1.0, 1.0, 0.1), LatencyProfile(0.3, 0.3)))


def a_tree() -> TokenTree:
    """Two branches of different depths under the root, and siblings deeper down."""
    return merge([TokenTree.chain(c) for c in ([10, 12, 15], [10, 13], [11, 14, 16, 17], [10, 12, 18])])


def fresh_rows(model, tokens, n):
    """The last n + 1 rows of a pass over ``tokens`` on a new server (the reference: a pass on the path alone)."""
    return model.server().run(Score(tuple(tokens), n, SAMPLING)).rows


def test_one_pass_scores_every_node_as_a_pass_on_its_path_alone(pair):
    target, _ = pair
    tree = a_tree()
    server = target.server()
    server.run(Score(PROMPT[:3], 0, SAMPLING))  # a cached prefix: the tree pass also catches up on 2 tokens
    rows = server.run(ScoreTree(PROMPT, tree, SAMPLING)).rows
    assert rows.shape == (len(tree) + 1, 64) and server.forwards == 2
    for node in range(len(tree)):
        path = tree.tokens_of(tree.path(node))
        ref = fresh_rows(target, PROMPT + tuple(path), len(path))
        np.testing.assert_allclose(rows[0], ref[0], atol=1e-12)
        np.testing.assert_allclose(rows[1 + node], ref[-1], atol=1e-12)


@pytest.mark.parametrize("accepted", [[], [10], [10, 12], [11, 14, 16, 17], [10, 13]])
def test_after_verification_the_cache_keeps_only_the_accepted_path(pair, accepted):
    target, _ = pair
    tree = a_tree()
    server = target.server()
    server.run(ScoreTree(PROMPT, tree, SAMPLING))
    nxt = PROMPT + tuple(accepted) + (40, 41)  # the accepted path, the target's token, one new draft
    assert server.cached_len(nxt) == len(PROMPT) + len(accepted)
    rows = server.run(Score(nxt, 1, SAMPLING)).rows
    np.testing.assert_allclose(rows, fresh_rows(target, nxt, 1), atol=1e-12)
    # the cache holds exactly the context's keys and values: the pass fed only the 2 unseen tokens
    assert server.tokens == nxt and server._cache.layers[0].keys.shape[-2] == len(nxt)
    assert server.forwards == 2
    # a second tree after it, from the pruned cache, scores as from scratch
    second = a_tree()
    rows = server.run(ScoreTree(nxt, second, SAMPLING)).rows
    np.testing.assert_allclose(
        rows[1 + second.follow([10, 12])[-1]], fresh_rows(target, nxt + (10, 12), 0)[-1], atol=1e-12
    )


def test_a_rejected_tree_is_dropped_and_a_divergent_context_crops_the_prefix(pair):
    target, _ = pair
    server = target.server()
    server.run(ScoreTree(PROMPT, a_tree(), SAMPLING))
    other = PROMPT[:3] + (20, 21)
    rows = server.run(Score(other, 1, SAMPLING)).rows
    np.testing.assert_allclose(rows, fresh_rows(target, other, 1), atol=1e-12)


def test_tree_expansion_one_pass_per_level_and_its_greedy_path_is_the_drafters_chain(pair):
    _, drafter = pair
    server = drafter.server()
    tree = server.run(DraftTree(PROMPT, (3, 2, 2), GREEDY), None)
    assert len(tree) == 3 + 6 + 12 and server.forwards == 3  # prefill, then levels 1 and 2 (level 3 is not fed)
    leaf = tree.most_likely_leaf()
    chain = drafter.server().run(Draft(PROMPT, 3, GREEDY), None).tokens
    assert tree.tokens_of(tree.path(leaf)) == chain
    # drafting on from the leaf reuses the cached path (DSI): as a fresh drafter would
    cont = PROMPT + tuple(chain)
    assert server.run(Draft(cont, 2, GREEDY), None).tokens == drafter.server().run(Draft(cont, 2, GREEDY), None).tokens
    sampled = drafter.server().run(DraftTree(PROMPT, (3, 2), SAMPLING), None)
    for node in [-1, *range(3)]:
        kids = [sampled.tokens[c] for c in sampled.children(node)]
        assert len(set(kids)) == len(kids)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["threads", "virtual"])
def test_si_and_dsi_over_trees_return_the_targets_own_greedy_generate(pair, runtime):
    target, drafter = pair
    n = 16
    for seed in range(3):
        prompt = [int(x) for x in np.random.default_rng(seed).integers(0, 64, size=4 + seed)]
        expected = reference_greedy(target, prompt, n)
        for algorithm, tree, sp in [("si", (2, 2, 1), 1), ("dsi", (2, 1), 2), ("dsi", (3, 2, 1), 3)]:
            res = generate(
                prompt, target, drafter, algorithm=algorithm, max_tokens=n, tree=tree, sp_degree=sp, runtime=runtime
            )
            assert res.tokens == expected, f"{algorithm} tree {tree} prompt seed {seed} on {runtime}"


def test_a_tree_past_the_context_window_is_refused(pair):
    target, drafter = pair
    short_prompt = [i % 64 for i in range(250)]  # the tiny models' window is 256, their vocabulary 64
    with pytest.raises(ConfigError, match="reaches past the context"):
        generate(short_prompt, target, drafter, algorithm="si", max_tokens=4, tree=(1,) * 7)


def test_top_k_candidates_rescue_rejected_drafts_on_real_models():
    """A noisier drafter: its second to fourth candidates hold the target's token where its first does not."""
    target, drafter = tiny_pair(vocab=64, seed=3, noise=0.3, latencies=(LatencyProfile.uniform(1.0), None))
    chain = generate([1, 2, 3, 4], target, drafter, algorithm="si", max_tokens=40, lookahead=1, runtime="threads")
    tree = generate([1, 2, 3, 4], target, drafter, algorithm="si", max_tokens=40, tree=(4,), runtime="threads")
    assert tree.tokens == chain.tokens
    assert tree.mean_acceptance_length > chain.mean_acceptance_length + 0.1
