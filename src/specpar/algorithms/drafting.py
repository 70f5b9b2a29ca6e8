"""What SI and DSI draft with, from the configuration: :func:`make_proposer`.

``lookahead="adaptive"``: :class:`AdaptiveProposer` puts a :class:`~specpar.planning.adaptive.AdaptiveLookahead` in
front of another proposer: each proposal (an SI round, a DSI chunk) drafts no more than the policy's lookahead, and
every draft the target tests feeds the policy's acceptance estimate (``feedback``). Its ``depth`` is the largest
candidate, so the algorithm runs with that as its lookahead (a proposer may always propose fewer drafts than asked).
"""

from __future__ import annotations

from specpar.algorithms.generation import Generation
from specpar.algorithms.ngram import NgramProposer
from specpar.algorithms.proposers import ModelDrafter, Proposer
from specpar.core.config import SpeculativeConfig, parse_proposer
from specpar.core.decoding import Decoding
from specpar.core.errors import ConfigError
from specpar.planning.adaptive import DEFAULT_MAX_LOOKAHEAD, DEFAULT_PRIOR, AdaptiveLookahead, adaptive_lookahead
from specpar.runtimes.base import Pool, latency_of, model_of


def make_proposer(g: Generation, pools: dict[str, Pool], spec: SpeculativeConfig) -> Proposer:
    """The proposer ``spec`` asks for (:mod:`specpar.algorithms.proposers`): the drafter pool's model (one, or several
    whose trees are merged), drafting the config's token tree where it has one, else chains; or the n-gram proposer,
    alone or in front of that model (``spec.proposer``); within the adaptive lookahead's windows where
    ``spec.lookahead`` is "adaptive"."""
    choice = parse_proposer(spec.proposer or "drafter")
    proposer = ModelDrafter(g.runtime, pools["drafter"], spec.tree) if choice.uses_drafter else None
    if choice.ngram:
        width = model_of(pools["target"]).vocab_size
        proposer = NgramProposer(width, choice.min_n, choice.max_n, spec.tree, fallback=proposer)
    if spec.lookahead != "adaptive":
        return proposer
    drafter = pools["drafter"] if choice.uses_drafter else None
    return AdaptiveProposer(proposer, adaptive_policy(spec, pools["target"], drafter, g.max_tokens))


def adaptive_policy(spec: SpeculativeConfig, target: Pool, drafter: Pool | None, max_tokens: int) -> AdaptiveLookahead:
    """lookahead="adaptive" (specpar.planning.adaptive): the policy for SI or DSI on these models' latency profiles,
    from the drafter's acceptance rate where it has one (simulated drafters)."""
    t, d = latency_of(target), latency_of(drafter)
    if t is None or d is None:
        raise ConfigError(
            "lookahead=\"adaptive\" weighs the target's and the drafter model's latency profiles (simulated models, or "
            "real ones given a measured profile: `specpar profile`); with the n-gram proposer alone, give a lookahead"
        )
    a = model_of(drafter).acceptance_rate
    return adaptive_lookahead(
        spec.algorithm,
        t,
        d,
        spec.sp_degree or 1,
        max_lookahead=max(1, min(DEFAULT_MAX_LOOKAHEAD, max_tokens - 1)),
        dedicated_cursor=spec.dedicated_cursor,
        prior=DEFAULT_PRIOR if a is None else a,
    )


class AdaptiveProposer(Proposer):
    """``inner``'s drafts, at most ``policy.lookahead()`` of them per window; feedback reaches the policy (and
    ``inner``'s own hook, if it has one)."""

    def __init__(self, inner: Proposer, policy: AdaptiveLookahead):
        if inner.trees:
            raise ConfigError('lookahead="adaptive" drafts chains: a token tree fixes its own depth')
        self.inner, self.policy = inner, policy
        self.depth = policy.candidates[-1]
        self.feedback = policy.feedback if inner.feedback is None else self._both

    def _both(self, index: int, accepted: bool) -> None:
        self.policy.feedback(index, accepted)
        self.inner.feedback(index, accepted)

    def propose(self, context, k: int, decoding: Decoding):
        return self.inner.propose(context, min(k, self.policy.lookahead()), decoding)

    def __repr__(self) -> str:
        return f"AdaptiveProposer({self.inner!r}, {self.policy!r})"
