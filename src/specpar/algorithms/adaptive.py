"""A proposer whose lookahead adapts during a generation (``lookahead="adaptive"``).

:class:`AdaptiveProposer` puts a :class:`~specpar.planning.adaptive.AdaptiveLookahead` in front of another proposer:
each proposal (an SI round, a DSI chunk) drafts no more than the policy's lookahead, and every draft the target tests
feeds the policy's acceptance estimate (``feedback``). Its ``depth`` is the largest candidate, so the algorithm runs
with that as its lookahead (a proposer may always propose fewer drafts than asked).
"""

from __future__ import annotations

from specpar.algorithms.proposers import Proposer
from specpar.core.decoding import Decoding
from specpar.planning.adaptive import AdaptiveLookahead


class AdaptiveProposer(Proposer):
    """``inner``'s drafts, at most ``policy.lookahead()`` of them per window; feedback reaches the policy (and
    ``inner``'s own hook, if it has one)."""

    def __init__(self, inner: Proposer, policy: AdaptiveLookahead):
        if inner.trees:
            from specpar.core.errors import ConfigError

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
