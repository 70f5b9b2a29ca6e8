"""Best-first token trees ("best:B"): B nodes grown by the drafter's path probability (Sequoia, EAGLE-2).

The growth is exact best-first (the B most likely paths, checked against brute force over a synthetic drafter),
for any number of nodes expanded per pass; a confident drafter gives its chain, and SI over it is SI over the chain;
SI and DSI over it return the target's greedy tokens; sampled, the first three tokens follow the target's joint law
(chi-square) and the same test fails when the residual update between siblings is skipped.
"""

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpar import LatencyProfile, SimulatedModel, generate
from specpar.core.calls import Draft, DraftTree
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.errors import ConfigError
from specpar.core.trees import BestFirst, check_tree, grow_best_first, parse_tree
from specpar.entrypoints import cli


def synthetic_drafter(vocab: int, seed: int):
    """A drafter whose row at a path is a fixed random distribution of that path: ranked(fed, frontier, k)."""

    @functools.cache
    def row(path: tuple) -> np.ndarray:
        rng = np.random.default_rng(hash((seed, path)) & 0xFFFFFFFF)
        return rng.dirichlet(np.full(vocab, 0.3))

    def ranked(fed, frontier, k):
        out = []
        for n in frontier:
            q = row(tuple(fed.tokens_of(fed.path(n))) if n >= 0 else ())
            top = np.argsort(-q, kind="stable")[:k]
            out.append((top.tolist(), q[top].tolist()))
        return out

    return row, ranked


def brute_force_best(row, vocab: int, budget: int, depth: int) -> list[tuple]:
    """The ``budget`` most likely paths of at most ``depth`` tokens, by enumeration."""
    paths = {}
    for d in range(1, depth + 1):
        for path in itertools.product(range(vocab), repeat=d):
            paths[path] = sum(math.log(row(path[:i])[t]) for i, t in enumerate(path))
    return sorted(paths, key=lambda p: -paths[p])[:budget]


@settings(max_examples=40, deadline=None)
@given(vocab=st.integers(2, 4), budget=st.integers(1, 12), width=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_growth_is_exact_best_first_for_any_width(vocab, budget, width, seed):
    row, ranked = synthetic_drafter(vocab, seed)
    depth = 4 if vocab < 4 else 3
    tree, fed, passes = grow_best_first(BestFirst(budget, width, depth), ranked, GREEDY, vocab)
    paths = {tuple(tree.tokens_of(tree.path(n))) for n in range(len(tree))}
    best = brute_force_best(row, vocab, budget, depth)
    # exact up to ties: the tree's least likely path is as likely as the brute force's
    values = lambda ps: sorted(sum(math.log(row(p[:i])[t]) for i, t in enumerate(p)) for p in ps)  # noqa: E731
    assert len(tree) == min(budget, len(best))
    assert np.allclose(values(paths), values(best))
    assert passes <= max(1, budget) and len(fed) <= (passes - 1) * width
    for n in range(len(tree)):  # parents first, each path's log-probability recorded
        assert tree.parents[n] < n
        assert tree.logq[n] == pytest.approx(values([tuple(tree.tokens_of(tree.path(n)))])[0])


def test_budget_gives_exactly_b_nodes_or_fewer_when_the_vocabulary_runs_out():
    _, ranked = synthetic_drafter(3, 0)
    for budget in (1, 2, 5, 9):
        assert len(grow_best_first(BestFirst(budget), ranked, GREEDY, 3)[0]) == budget
    assert len(grow_best_first(BestFirst(9, depth=1), ranked, GREEDY, 3)[0]) == 3  # one level of a vocabulary of 3
    assert len(grow_best_first(BestFirst(20, depth=2), ranked, GREEDY, 3)[0]) == 3 + 9
    target = SimulatedModel(4, seed=1)
    drafter = target.drafter(0.6).server()
    assert len(drafter.compute(DraftTree((1, 2), BestFirst(8), GREEDY))) == 8
    assert len(drafter.compute(DraftTree((1, 2), BestFirst(8, depth=1), GREEDY))) == 4


def test_a_confident_drafter_grows_its_chain_and_si_over_it_is_si_over_the_chain():
    target = SimulatedModel(8, seed=3, latency=LatencyProfile(2.0, 1.0))
    drafter = target.drafter(0.97, LatencyProfile.uniform(0.1), seed=2)
    tree = drafter.server().compute(DraftTree((5, 6), BestFirst(8), GREEDY))
    chain = drafter.server().compute(Draft((5, 6), 8, GREEDY)).tokens
    assert [len(tree.children(n)) for n in [-1, *range(7)]] == [1] * 8  # a path of 8 nodes
    assert tree.tokens_of(tree.path(7)) == chain
    for algorithm in ("si", "dsi"):
        kw = dict(algorithm=algorithm, max_tokens=60, sp_degree=2)
        a = generate([5, 6], target, drafter, lookahead=8, **kw)
        b = generate([5, 6], target, drafter, tree="best:8", **kw)
        # the same verifications (times differ near the end, where the depth is capped and the budget's
        # remaining nodes go to second candidates, at one drafter pass each)
        assert (b.tokens, b.accepted, b.target_forwards) == (a.tokens, a.accepted, a.target_forwards)


def test_the_simulator_prices_what_the_growth_did():
    target = SimulatedModel(8, seed=3, latency=LatencyProfile(2.0, 1.0))
    drafter = target.drafter(0.5, LatencyProfile(1.0, 0.1, 0.02), seed=2).server()
    drafter.compute(Draft((7, 7), 1, GREEDY))
    call = DraftTree((7, 7), BestFirst(6, 2), GREEDY)
    _, fed, passes = drafter._grow(call, drafter._root_hash(call.context))
    chain = drafter.duration_ms(Draft((7, 7), passes, GREEDY))
    assert passes >= 2 and len(fed) > passes - 1  # at a = 0.5 the tree branches, and W = 2 feeds two at a time
    assert drafter.duration_ms(call) == pytest.approx(chain + (len(fed) - (passes - 1)) * 0.02)


def test_bad_budgets_are_one_clear_error():
    assert parse_tree("best:8") == BestFirst(8) and parse_tree("best:8:2") == BestFirst(8, 2)
    assert check_tree("best:12") == BestFirst(12)
    for bad, words in [
        ("best:0", "positive node budget"),
        ("best:-3", "positive node budget"),
        ("best:8:0", "positive W"),
        ("best", "best:B"),
        ("best:x", "best:B"),
        ("best:1:2:3", "best:B"),
        ("best:600", "more than the 512"),
    ]:
        with pytest.raises(ConfigError, match=words):
            parse_tree(bad)
    target = SimulatedModel(8, seed=0)
    with pytest.raises(ConfigError, match="positive node budget"):
        generate([1], target, target.drafter(0.5), algorithm="si", tree=BestFirst(0))
    with pytest.raises(ConfigError, match="'si' or 'dsi'"):
        generate([1], target, target.drafter(0.5), algorithm="nonsi", tree="best:4")


def test_simulate_cli_runs_best_first_trees_and_names_bad_ones(capsys):
    assert cli.main(["simulate", "--tree", "best:6", "-a", "0.6", "-k", "6", "--repeats", "1", "-N", "30"]) == 0
    assert "best:6" in capsys.readouterr().out
    assert cli.main(["simulate", "--tree", "best:0", "--repeats", "1"]) == 2
    assert "positive node budget" in capsys.readouterr().err


# -- sampling: candidates are chosen, not drawn; their rows are point masses -------------------------------

# 1,500 samples: best-first trees without the residual update fail at p = 4e-34 with them, p < 1e-6 wanted (8e-76
# with 3,000)
V, N, PROMPT, SAMPLES = 4, 3, [0, 1], 1500


def sampled_joint(target, drafter, algorithm, shape):
    from collections import Counter

    kw = dict(algorithm=algorithm, max_tokens=N, tree=shape, temperature=1.0, sp_degree=2)
    return Counter(tuple(generate(PROMPT, target, drafter, seed=i, **kw).tokens) for i in range(SAMPLES))


def sampling_models():
    target = SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    return target, SimulatedModel(V, seed=99, latency=LatencyProfile.uniform(0.1), spread=1.5)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,shape", [("si", BestFirst(4)), ("dsi", BestFirst(3, 2))])
def test_sampled_best_first_trees_follow_the_target_jointly_over_the_first_three_tokens(algorithm, shape):
    from stats import chi_square_p_value

    target, drafter = sampling_models()
    exact = {s: target.sequence_probability(PROMPT, s) for s in itertools.product(range(V), repeat=N)}
    p_value = chi_square_p_value(sampled_joint(target, drafter, algorithm, shape), exact)
    assert p_value > 1e-3, f"{algorithm} over {shape} does not follow the target (p = {p_value:.2g})"


@pytest.mark.slow
def test_sampled_best_first_without_the_residual_update_fails_the_distribution_test(no_residual_update):
    """The biased variant: each candidate accepted with the target's original p(x), not the residual's."""
    from stats import chi_square_p_value

    target, drafter = sampling_models()
    exact = {s: target.sequence_probability(PROMPT, s) for s in itertools.product(range(V), repeat=N)}
    p_value = chi_square_p_value(sampled_joint(target, drafter, "si", BestFirst(4)), exact)
    assert p_value < 1e-6, f"the test could not detect the missing residual update (p = {p_value:.2g})"


def test_sampled_candidates_are_the_drafters_most_likely_tokens_with_point_mass_rows():
    target = SimulatedModel(6, seed=5)
    drafter = SimulatedModel(6, seed=8)
    tree = drafter.server().compute(DraftTree((1, 2), BestFirst(5), Decoding(0.7, 0)))
    q = drafter.probs(drafter.prefix_hash((1, 2)), 0.7)
    roots = tree.children(-1)
    assert [tree.tokens[n] for n in roots] == [int(t) for t in np.argsort(-q, kind="stable")[: len(roots)]]
    for draws in tree.draws.values():
        for child, row in draws:
            assert row[tree.tokens[child]] == 1.0 and row.sum() == 1.0
    assert target  # the target plays no part in drafting


# -- real transformers servers (tiny float64 models) -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from tiny_transformers import tiny_pair

    return tiny_pair(vocab=64, seed=3, noise=0.3, latencies=(LatencyProfile(1.0, 1.0, 0.1), LatencyProfile(0.3, 0.3)))


def test_transformers_growth_records_the_drafters_path_probabilities_and_keeps_its_cache(tiny):
    from specpar.core.calls import Score

    _, drafter = tiny
    prompt = (3, 5, 7, 9, 11)
    server = drafter.server()
    tree = server.run(DraftTree(prompt, BestFirst(6), GREEDY), None)
    assert len(tree) == 6 and server.forwards <= 6  # the prompt's pass, then at most B - 1 passes of one node
    for node in range(len(tree)):  # log q of the path, from a fresh pass over it
        path = tree.tokens_of(tree.path(node))
        rows = drafter.server().run(Score(prompt + tuple(path), len(path), Decoding(1.0, 0)), None).rows
        assert tree.logq[node] == pytest.approx(sum(math.log(rows[i][t]) for i, t in enumerate(path)))
    leaf = tree.path(tree.most_likely_leaf())
    cont = prompt + tuple(tree.tokens_of(leaf))  # drafting on from the chosen leaf reuses the cached path
    assert server.run(Draft(cont, 2, GREEDY), None).tokens == drafter.server().run(Draft(cont, 2, GREEDY), None).tokens


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["threads", "virtual"])
def test_si_and_dsi_over_best_first_trees_return_the_targets_greedy_on_transformers(tiny, runtime):
    from tiny_transformers import reference_greedy

    target, drafter = tiny
    prompt, n = [4, 8, 15, 16, 23], 14
    expected = reference_greedy(target, prompt, n)
    for algorithm, shape, sp in [("si", "best:6", 1), ("dsi", "best:5:2", 2)]:
        res = generate(
            prompt, target, drafter, algorithm=algorithm, max_tokens=n, tree=shape, sp_degree=sp, runtime=runtime
        )
        assert res.tokens == expected, f"{algorithm} over {shape} on {runtime}"
