"""The proposer seam (specpar.algorithms.proposers): SI and DSI stay lossless with any proposer, including one that is not
a model server (it answers at once, at no cost on the clock, as an n-gram lookup would) and one that sometimes has
nothing to propose; the feedback hook hears of every draft the target tested, and nothing else."""

import itertools
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpar import ConfigError, LatencyProfile, SimulatedModel, generate
from specpar.algorithms.dsi import dsi
from specpar.algorithms.generation import Generation
from specpar.algorithms.proposers import ModelDrafter, Proposer, lookahead_of
from specpar.algorithms.si import si
from specpar.core.calls import Draft, DraftTree, Proposal
from specpar.core.config import SpeculativeConfig
from specpar.core.decoding import GREEDY, Decoding
from specpar.core.query import Query
from specpar.core.trees import TokenTree
from specpar.runtimes import Pool, VirtualRuntime
from specpar.runtimes.threads import ThreadRuntime
from stats import chi_square_p_value


class AtOnce(Proposer):
    """A drafter model's drafts computed on the spot, with no runtime task: a proposer that costs no time on the
    clock (what an n-gram lookup is). ``empty_every``: every that-many-th proposal is empty (it found nothing)."""

    def __init__(self, model, tree=None, empty_every: int = 0):
        self.server = model.server("at-once")
        self.tree = tree
        self.trees = tree is not None
        self.depth = None if tree is None else len(tree)
        self.empty_every = empty_every
        self.proposals = 0

    def propose(self, context, k, decoding):
        self.proposals += 1
        if self.empty_every and self.proposals % self.empty_every == 0:
            return TokenTree() if self.trees else Proposal([])
        call = Draft(context, k, decoding) if self.tree is None else DraftTree(context, tuple(self.tree[:k]), decoding)
        return self.server.compute(call)


def run(algorithm, target, proposer, prompt, n, k, sp=1, decoding=GREEDY, runtime_class=VirtualRuntime, **kw):
    """``algorithm`` (si or dsi) with ``proposer`` (a callable of the runtime, and of the drafter pool when one is
    given as ``drafter=``) on a fresh runtime."""
    drafter = kw.pop("drafter", None)
    targets = Pool([target.server(f"target{i}") for i in range(sp)], "target")
    pools = [targets] if drafter is None else [Pool([drafter.server("drafter")], "drafter"), targets]
    spec = SpeculativeConfig(algorithm=algorithm, lookahead=k, **kw)
    with runtime_class(pools) as rt:
        p = proposer(rt) if drafter is None else proposer(rt, pools[0])
        return (si if algorithm == "si" else dsi)(
            Generation(Query(prompt, n, decoding), rt), {"target": targets}, spec, p
        )


@st.composite
def setups(draw):
    vocab = draw(st.integers(2, 12))
    target = SimulatedModel(vocab, seed=draw(st.integers(0, 10**6)), latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(draw(st.floats(0.0, 1.0)), LatencyProfile.uniform(0.1), seed=draw(st.integers(0, 99)))
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4))
    tree = draw(st.sampled_from([None, None, (2,), (2, 1), (3, 2, 1)]))
    return target, drafter, prompt, draw(st.integers(1, 40)), draw(st.integers(1, 6)), draw(st.integers(1, 5)), tree


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), empty_every=st.sampled_from([0, 1, 2, 3]), dedicated=st.booleans())
def test_a_proposer_that_costs_no_time_gives_the_target_greedy_tokens_and_dsi_is_never_slower(
    setup, empty_every, dedicated
):
    """empty_every = 1: it never proposes anything, so DSI is non-SI with passes on the cursor only."""
    target, drafter, prompt, n, k, sp, tree = setup
    expected = target.greedy_tokens(prompt, n)
    nonsi = generate(prompt, target, algorithm="nonsi", max_tokens=n).time_ms
    for algorithm in ("si", "dsi"):
        kw = {"dedicated_cursor": dedicated} if algorithm == "dsi" else {}
        out = run(algorithm, target, lambda rt: AtOnce(drafter, tree, empty_every), prompt, n, k, sp, **kw)
        assert out.tokens == expected, algorithm
        assert out.drafter_forwards == 0  # no runtime task drafted
        if algorithm == "dsi" and (sp > 1 or not dedicated):
            assert out.time_ms <= nonsi + 1e-9  # Theorem 1 (one server kept for the cursor needs a second one)


def test_a_proposer_that_costs_no_time_on_threads():
    target = SimulatedModel(8, seed=3, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(0.7, LatencyProfile.uniform(0.1), seed=2)
    for empty_every in (0, 2):
        out = run(
            "dsi", target, lambda rt: AtOnce(drafter, None, empty_every), [1], 20, 3, 3, runtime_class=ThreadRuntime
        )
        assert out.tokens == target.greedy_tokens([1], 20)


V, N, PROMPT, SAMPLES = 4, 3, [0, 1], 3000


class QOfTheTarget(AtOnce):
    """A broken proposer: its drafts are another model's samples, but the rows it hands with them are the target's,
    so verification accepts every draft the target does not exclude (min(1, p/q) = 1): the output follows that
    model where the target allows it."""

    def __init__(self, model, target):
        super().__init__(model)
        self.target_server = target.server("q-of-the-target")

    def propose(self, context, k, decoding):
        proposal = super().propose(context, k, decoding)
        tokens, q = list(context), []
        for x in proposal.tokens:
            q.append(self.target_server.compute(Draft(tuple(tokens), 1, decoding)).q[0])
            tokens.append(x)
        return Proposal(proposal.tokens, q)


def joint(algorithm, proposer, target):
    """The joint distribution of the first N tokens over SAMPLES seeds (temperature 1)."""
    return Counter(
        tuple(run(algorithm, target, proposer, PROMPT, N, 2, 3, Decoding(1.0, seed=i)).tokens) for i in range(SAMPLES)
    )


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["si", "dsi"])
def test_sampled_output_with_a_proposer_that_costs_no_time_follows_the_target(algorithm):
    target = SimulatedModel(V, seed=21, latency=LatencyProfile.uniform(1.0), spread=1.5)
    drafter = target.drafter(0.5, LatencyProfile.uniform(0.1), seed=4)
    exact = {s: target.sequence_probability(PROMPT, s, 1.0) for s in itertools.product(range(V), repeat=N)}
    p_value = chi_square_p_value(joint(algorithm, lambda rt: AtOnce(drafter, None, 3), target), exact)
    assert p_value > 1e-3, f"{algorithm} with a proposer at no cost does not follow the target (p = {p_value:.2g})"
    other = SimulatedModel(V, seed=99, latency=LatencyProfile.uniform(0.1), spread=1.5)
    biased = chi_square_p_value(joint(algorithm, lambda rt: QOfTheTarget(other, target), target), exact)
    assert biased < 1e-6, f"the test cannot tell a proposer that misstates q (p = {biased:.2g})"


class Recording(ModelDrafter):
    """A model drafter that records the feedback it hears: (index, accepted) of each of its drafts tested."""

    def __init__(self, runtime, pool, tree=None):
        super().__init__(runtime, pool, tree)
        self.heard = []
        self.feedback = lambda index, accepted: self.heard.append((index, accepted))


def feedback_matches(out, heard) -> bool:
    """The feedback heard is exactly the result's per-position tested and accepted counts, and nothing else."""
    drafted, accepted = Counter(i for i, _ in heard), Counter(i for i, a in heard if a)
    size = len(out.position_drafted)
    return (
        [drafted[i] for i in range(size)] == out.position_drafted
        and [accepted[i] for i in range(size)] == out.position_accepted
        and len(heard) == out.drafted
    )


def feedback_runs():
    target = SimulatedModel(8, seed=5, latency=LatencyProfile.uniform(1.0))
    drafter = target.drafter(0.6, LatencyProfile.uniform(0.1), seed=7)
    for algorithm, tree, decoding in itertools.product(["si", "dsi"], [None, (2, 1)], [GREEDY, Decoding(1.0, seed=3)]):
        proposers = []

        def proposer(rt, pool, tree=tree):
            proposers.append(Recording(rt, pool, tree))
            return proposers[-1]

        out = run(algorithm, target, proposer, [2], 60, 3, 3, decoding, drafter=drafter)
        assert out.tokens and out.drafted > out.accepted > 0  # some drafts accepted and some rejected
        yield out, proposers[0].heard


def test_the_feedback_hook_hears_every_draft_tested_and_nothing_else():
    for out, heard in feedback_runs():
        assert feedback_matches(out, heard)


def test_the_feedback_check_catches_a_hook_that_misses_rejections(monkeypatch):
    tested = Generation._tested

    def rejections_unheard(self, index, accepted):
        feedback = self.feedback
        if not accepted:
            self.feedback = None
        tested(self, index, accepted)
        self.feedback = feedback

    monkeypatch.setattr(Generation, "_tested", rejections_unheard)
    assert not any(feedback_matches(out, heard) for out, heard in feedback_runs())


def test_a_model_drafter_drafts_chains_or_trees_whose_depth_is_the_lookahead():
    target = SimulatedModel(8, seed=1, latency=LatencyProfile.uniform(1.0))
    pool = Pool([target.drafter(0.5).server("d")], "drafter")
    rt = VirtualRuntime([pool])
    chains, trees = ModelDrafter(rt, pool), ModelDrafter(rt, pool, (2, 2, 1))
    assert not chains.trees and lookahead_of(chains, 4) == 4
    assert trees.trees and lookahead_of(trees, 4) == 3  # a tree's lookahead is its depth
    with pytest.raises(ConfigError, match="tree width"):
        ModelDrafter(rt, pool, (2, 0))
