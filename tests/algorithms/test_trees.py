"""Token trees (SpecInfer): the tree type, lossless tree verification, and SI / DSI over trees on simulated models.

Greedy: every tree configuration returns the target's own greedy tokens; a tree of one chain is SI (and DSI)
exactly. Sampling: the first three tokens follow the target's joint law (chi-square), also when siblings come from
different drafters, and a verifier that skips the residual update between siblings fails the same test.
Theorem 1 (DSI never slower than non-SI) on a grid of drafter latency x acceptance rate, with trees.
"""

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.algorithms.verification import verify_chain, verify_tree
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.errors import ConfigError
from specpar.core.trees import BestFirst, TokenTree, check_tree, merge, parse_tree, tree_size
from stats import chi_square_p_value

# -- the tree type -----------------------------------------------------------------------------------------


def test_tree_sizes_and_config_errors():
    assert tree_size((2, 2, 1)) == 2 + 4 + 4
    assert parse_tree("2,2,1") == (2, 2, 1)
    for bad, words in [
        ((2, 0), "k2 must be a positive integer"),
        ((), "non-empty"),
        ((1, True), "positive integer"),
        ("2,2", "list of widths"),
    ]:
        with pytest.raises(ConfigError, match=words):
            check_tree(bad)
    with pytest.raises(ConfigError, match="reaches past the context"):
        check_tree((1, 1, 1), room=2)
    with pytest.raises(ConfigError, match="more than the 512"):
        check_tree((8, 8, 8, 8))
    with pytest.raises(ConfigError, match="comma-separated"):
        parse_tree("2,x")


def test_merge_joins_shared_prefixes_and_keeps_every_draw_in_order():
    a = TokenTree.chain([1, 2, 3], source=0)
    b = TokenTree.chain([1, 2, 4], source=1)
    c = TokenTree.chain([1, 5], source=2)
    tree = merge([a, b, c])
    assert len(tree) == 5  # 1, 2, 3, 4, 5: the prefix 1, 2 is shared
    one = tree.child(-1, 1)
    two = tree.child(one, 2)
    assert [tree.tokens[n] for n in tree.children(two)] == [3, 4]
    assert [tree.tokens[n] for n in tree.children(one)] == [2, 5]
    assert len(tree.draws[-1]) == 3  # three drafters drew token 1 at the root: one node, three draws
    assert [tree.sources[n] for n in tree.children(two)] == [0, 1]
    assert tree.tokens_of(tree.path(tree.child(two, 4))) == [1, 2, 4]
    mask = tree.ancestors()
    assert mask[tree.child(two, 4)].tolist() == [True, True, False, True, False]


def test_subtree_keeps_structure_and_draws():
    tree = merge([TokenTree.chain([1, 2, 3]), TokenTree.chain([1, 4])])
    sub = tree.subtree(tree.child(-1, 1))
    assert sorted(sub.tokens) == [2, 3, 4] and sub.depth == 2
    assert [sub.tokens[n] for n in sub.children(-1)] == [2, 4]


def test_greedy_expansion_ranks_candidates_and_its_first_path_is_the_drafters_chain():
    target = SimulatedModel(8, seed=1)
    drafter = target.drafter(0.5, seed=3)
    server = drafter.server()
    from specpar.core.calls import Draft, DraftTree

    tree = server.compute(DraftTree((1, 2), (3, 2, 2), GREEDY))
    assert len(tree) == tree_size((3, 2, 2)) and tree.depth == 3
    chain = drafter.server().compute(Draft((1, 2), 3, GREEDY)).tokens
    assert tree.tokens_of(tree.path(tree.most_likely_leaf())) == chain
    for node in [-1, *range(len(tree))]:  # siblings are distinct
        kids = [tree.tokens[c] for c in tree.children(node)]
        assert len(set(kids)) == len(kids)


def test_sampled_expansion_draws_without_replacement_and_stores_the_row_each_draw_came_from():
    target = SimulatedModel(6, seed=1)
    from specpar.core.calls import DraftTree

    tree = target.drafter(0.3, seed=2).server().compute(DraftTree((4,), (3,), Decoding(1.0, 5)))
    (c0, q0), (c1, q1), (c2, q2) = tree.draws[-1]
    tokens = [tree.tokens[c] for c in (c0, c1, c2)]
    assert len(set(tokens)) == 3
    assert q1[tokens[0]] == 0 and q2[tokens[0]] == q2[tokens[1]] == 0
    assert q1.sum() == pytest.approx(1) and q2.sum() == pytest.approx(1)
    assert q2[tokens[2]] == pytest.approx(q0[tokens[2]] / (1 - q0[tokens[0]] - q0[tokens[1]]))


def test_a_tree_is_priced_as_a_chain_of_the_same_node_count():
    from specpar.core.calls import Draft, DraftTree, Score, ScoreTree

    target = SimulatedModel(8, seed=1, latency=LatencyProfile(5.0, 1.0, 0.25))
    tree = merge([TokenTree.chain([1, 2, 3]), TokenTree.chain([4, 5]), TokenTree.chain([1, 6])])  # 6 nodes
    for cached in (0, 3):  # a cold server pays TTFT, a warm one the unseen context tokens and the nodes
        server = target.server()
        if cached:
            server.compute(Score((7, 7, 7), 0, GREEDY))
        ctx = (7, 7, 7, 7)
        assert server.duration_ms(ScoreTree(ctx, tree, GREEDY)) == server.duration_ms(Score(ctx + (0,) * 6, 6, GREEDY))
    drafter = target.drafter(0.5, LatencyProfile(1.0, 0.1, 0.02)).server()
    drafter.compute(Draft((7, 7), 1, GREEDY))
    # expansion <3, 2, 2>: three passes (as a chain of 3); the second feeds level 1's 3 nodes, the third level 2's 6
    chain = drafter.duration_ms(Draft((7, 7), 3, GREEDY))
    assert drafter.duration_ms(DraftTree((7, 7), (3, 2, 2), GREEDY)) == pytest.approx(chain + (2 + 5) * 0.02)


# -- verification ------------------------------------------------------------------------------------------


@st.composite
def greedy_trees(draw):
    """A random tree over a vocabulary of 4 and the target's argmax at the root and after every node."""
    tree = TokenTree()
    for _ in range(draw(st.integers(0, 12))):
        parent = draw(st.integers(-1, len(tree) - 1))
        tree.add(parent, draw(st.integers(0, 3)))
    rows = draw(st.lists(st.integers(0, 3), min_size=len(tree) + 1, max_size=len(tree) + 1))
    return tree, rows


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(case=greedy_trees())
def test_greedy_tree_verification_is_the_longest_path_matching_the_target(case):
    tree, rows = case
    path, token = verify_tree(tree, rows, GREEDY, start=10)
    # brute force: every root-to-node path whose tokens are each the target's argmax after the path before it
    best = []
    for node in range(len(tree)):
        p = tree.path(node)
        if all(tree.tokens[n] == rows[(p[i - 1] if i else -1) + 1] for i, n in enumerate(p)) and len(p) > len(best):
            best = p
    assert path == best
    assert token == rows[(path[-1] if path else -1) + 1]


@settings(max_examples=200, deadline=None)
@given(
    k=st.integers(0, 6),
    seed=st.integers(0, 10**6),
    greedy=st.booleans(),
)
def test_a_tree_of_one_chain_verifies_as_the_chain(k, seed, greedy):
    rng = np.random.default_rng(seed)
    v = 5
    drafts = [int(x) for x in rng.integers(0, v, k)]
    decoding = GREEDY if greedy else Decoding(1.0, seed)
    if greedy:
        q, rows = None, [int(x) for x in rng.integers(0, v, k + 1)]
    else:
        q = rng.dirichlet(np.ones(v), k)
        rows = rng.dirichlet(np.ones(v), k + 1)
    n, token = verify_chain(drafts, q, rows, decoding, start=7)
    path, tree_token = verify_tree(TokenTree.chain(drafts, q), rows, decoding, start=7)
    assert (len(path), tree_token) == (n, token)


# -- SI and DSI over trees ---------------------------------------------------------------------------------

TREES = [(1,), (3,), (2, 1), (2, 2, 1), (1, 3, 1, 2), (4, 1, 1)]


@st.composite
def setups(draw):
    vocab = draw(st.integers(2, 12))
    seed = draw(st.integers(0, 10**6))
    per_token = draw(st.sampled_from([0.0, 0.05]))
    ttft = draw(st.sampled_from([1.0, 3.0]))
    target = SimulatedModel(vocab, seed=seed, latency=LatencyProfile(ttft, 1.0, per_token))
    a, c = draw(st.floats(0.0, 1.0)), draw(st.floats(0.01, 1.0))
    drafters = [
        target.drafter(a, target.latency.scaled(c), seed=draw(st.integers(0, 99)))
        for _ in range(draw(st.integers(1, 2)))
    ]
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4))
    tree = draw(st.one_of(st.sampled_from(TREES), st.builds(BestFirst, st.integers(1, 10), st.integers(1, 3))))
    return target, drafters, prompt, draw(st.integers(1, 30)), tree, draw(st.integers(1, 4))


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_si_and_dsi_over_trees_return_the_target_greedy_tokens(setup):
    """Uniform trees <k1, ..., km> and best-first trees (best:B:W), one or two drafters merged, any SP."""
    target, drafters, prompt, n, tree, sp = setup
    expected = target.greedy_tokens(prompt, n)
    drafter = drafters if len(drafters) > 1 else drafters[0]
    for algo in ("si", "dsi"):
        out = generate(prompt, target, drafter, algorithm=algo, max_tokens=n, tree=tree, sp_degree=sp)
        assert out.tokens == expected, f"{algo} with tree {tree} diverged from the target's greedy decoding"
        assert out.accepted + out.rounds == n


def test_dsi_tree_finished_ahead_of_the_cursor_lends_its_rows_to_the_right_positions():
    """A tree verification hanging beyond the cursor (its start > len(out)) that finishes first: its rows are read
    along the drafts from its start, not from the cursor (found by the property test above: the last token was
    the row after the wrong sibling)."""
    target = SimulatedModel(2, seed=0, latency=LatencyProfile(1.0, 1.0, 0.05))
    drafter = target.drafter(1.0, target.latency.scaled(0.25), seed=0)
    out = generate([0], target, drafter, algorithm="dsi", max_tokens=12, tree=(3,), sp_degree=3)
    assert out.tokens == target.greedy_tokens([0], 12)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("algorithm,sp", [("si", 1), ("dsi", 1), ("dsi", 3)])
def test_a_tree_of_one_chain_is_the_chain_algorithm_exactly(algorithm, sp, temperature):
    for lat in (LatencyProfile.uniform(1.0), LatencyProfile(3.0, 1.0, 0.2)):
        target = SimulatedModel(8, seed=4, latency=lat)
        drafter = target.drafter(0.6, LatencyProfile.uniform(0.1), seed=5)
        for k in (1, 4):
            # rejection sampling, as before seeds chose the Gumbel coupling: a one-chain tree drafts its nodes with
            # other draws than a chain does under the Gumbel coupling (the same tokens, other acceptances)
            kw = dict(algorithm=algorithm, sp_degree=sp, max_tokens=40, temperature=temperature, seed=3,
                      coupling="rejection")  # fmt: skip
            chain = generate([1, 2], target, drafter, lookahead=k, **kw)
            tree = generate([1, 2], target, drafter, tree=(1,) * k, **kw)
            assert (tree.tokens, tree.time_ms, tree.accepted, tree.target_forwards) == (
                chain.tokens,
                chain.time_ms,
                chain.accepted,
                chain.target_forwards,
            )


def test_wider_trees_accept_more_per_target_pass():
    target = SimulatedModel(8, seed=0, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(0.5, LatencyProfile.uniform(0.05), seed=1)
    chain = generate([1], target, drafter, algorithm="si", max_tokens=400, lookahead=3)
    tree = generate([1], target, drafter, algorithm="si", max_tokens=400, tree=(3, 2, 1))
    # per level the tree holds the target's token with probability 1 - (1 - a)^k: 0.875, 0.75, 0.5 vs 0.5 each
    assert tree.mean_acceptance_length > chain.mean_acceptance_length + 0.5
    assert tree.time_ms < chain.time_ms


C_GRID = [0.02, 0.1, 0.4, 1.0]
A_GRID = [0.0, 0.3, 0.7, 1.0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "latency", [LatencyProfile.uniform(1.0), LatencyProfile(3.0, 1.0, 0.2)], ids=["paper", "per-node"]
)
@pytest.mark.parametrize("c", C_GRID)
def test_theorem1_dsi_over_trees_is_never_slower_than_nonsi(c, latency):
    """The paper's time units, and a target with TTFT 3 TPOT that pays 0.2 TPOT per scored node (trees cost more)."""
    for a, tree, sp in itertools.product(A_GRID, [(2,), (2, 2, 1), (3, 1, 1, 1)], [2, 4]):
        target = SimulatedModel(8, seed=7, latency=latency)
        drafter = target.drafter(a, latency.scaled(c), seed=8)
        nonsi = generate([3, 1], target, None, algorithm="nonsi", max_tokens=40).time_ms
        dsi = generate([3, 1], target, drafter, algorithm="dsi", max_tokens=40, tree=tree, sp_degree=sp).time_ms
        assert dsi <= nonsi + 1e-9, f"DSI with tree {tree} took {dsi} > non-SI {nonsi} at c={c}, a={a}, SP={sp}"


# sampled DSI tokens depend on timing (which positions the target fills before a draft exists), as for chains
@pytest.mark.parametrize("algorithm,temperature", [("si", 1.0), ("dsi", 0.0)])
def test_merged_trees_give_the_same_tokens_on_threads_as_on_the_virtual_clock(algorithm, temperature):
    target = SimulatedModel(6, seed=2, latency=LatencyProfile.uniform(0.3))
    drafters = [target.drafter(0.6, LatencyProfile.uniform(0.05), seed=s) for s in (1, 2)]
    kw = dict(algorithm=algorithm, max_tokens=20, tree=(2, 1), sp_degree=2, temperature=temperature, seed=4)
    virtual = generate([1], target, drafters, **kw)
    assert generate([1], target, drafters, runtime="threads", **kw).tokens == virtual.tokens


def test_trees_are_refused_where_they_do_not_apply():
    target = SimulatedModel(8, seed=0)
    with pytest.raises(ConfigError, match="'si' or 'dsi'"):
        generate([1], target, target.drafter(0.5), algorithm="nonsi", tree=(2,))
    with pytest.raises(ConfigError, match="positive integer"):
        generate([1], target, target.drafter(0.5), algorithm="si", tree=(2, 0))
    with pytest.raises(ConfigError, match="only token trees"):
        generate([1], target, [target.drafter(0.5), target.drafter(0.4)], algorithm="si", lookahead=2)


# -- sampling: the joint law of the first three tokens -----------------------------------------------------

# 1,500 samples: the tree without the residual update fails at p = 1e-44 with them, p < 1e-6 wanted (6e-85 with
# 3,000)
V, N, PROMPT, SAMPLES = 4, 3, [0, 1], 1500


def models():
    target = SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    lat = LatencyProfile.uniform(0.1)
    # an unrelated model (a general overlap with p) and a mixed drafter q = a p + (1 - a) onehot(z)
    return target, SimulatedModel(V, seed=99, latency=lat, spread=1.5), target.drafter(0.5, lat, seed=4)


def exact_joint(target):
    return {seq: target.sequence_probability(PROMPT, seq) for seq in itertools.product(range(V), repeat=N)}


def sample_outputs(target, drafter, algorithm, tree):
    return Counter(
        tuple(
            generate(
                PROMPT,
                target,
                drafter,
                algorithm=algorithm,
                max_tokens=N,
                tree=tree,
                temperature=1.0,
                seed=i,
                coupling="rejection",  # SpecInfer's multi-step sampling (a seed alone would choose the Gumbel coupling)
            ).tokens
        )
        for i in range(SAMPLES)
    )


CASES = {
    "si, one drafter, 3 siblings": ("si", "other", (3, 1)),
    "dsi, one drafter, 2 x 2": ("dsi", "other", (2, 2)),
    "si, siblings from two drafters": ("si", "both", (1, 2)),
    "dsi, siblings from two drafters": ("dsi", "both", (2,)),
}


def drafter_of(which):
    target, other, mixed = models()
    return target, {"other": other, "both": [other, mixed]}[which]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_sampled_trees_follow_the_target_jointly_over_the_first_three_tokens(case):
    algorithm, which, tree = CASES[case]
    target, drafter = drafter_of(which)
    p_value = chi_square_p_value(sample_outputs(target, drafter, algorithm, tree), exact_joint(target))
    assert p_value > 1e-3, f"{case}: tree verification does not follow the target (p = {p_value:.2g})"


@pytest.mark.slow
def test_skipping_the_residual_update_between_siblings_fails_the_distribution_test(no_residual_update):
    """The biased variant: every sibling is tested against the target's original p (no norm(max(0, p - q)))."""
    target, drafter = drafter_of("other")
    p_value = chi_square_p_value(sample_outputs(target, drafter, "si", (3, 1)), exact_joint(target))
    assert p_value < 1e-6, f"the test could not detect the missing residual update (p = {p_value:.2g})"
