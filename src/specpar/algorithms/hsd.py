"""HSD: hierarchical speculative decoding (Globerson, Kaplan, Mansour, Mohri, Schuster et al. 2025, Algorithm 1).

Models M0 < M1 < ... < MK, one pool each (``levels``), MK the target; buffer sizes T_0 .. T_{K-1} (``buffers``).

* M0 drafts T_0 tokens autoregressively (one Draft call).
* Mi (0 < i < K) asks the level below for a batch, verifies it in one forward pass (one Score call), keeps the
  accepted prefix plus its own replacement or bonus token, and asks again from the extended context until it holds
  at least T_i tokens; it hands up exactly the first T_i (a fixed batch size makes a level's expected cost a function
  of (alpha, T_lower, T_upper) alone, :mod:`specpar.planning.hsd_latency`; the dropped tokens are drafts).
* MK verifies one batch from MK-1 per round through :class:`Generation`, as SI does. With K = 1 this is SI.

Sampling: the tokens Mi hands up are distributed as Mi's own p_i (by the rejection sampling lemma), so they travel
up with Mi's rows as their ``q``. Every level draws its uniforms from its own seed (:func:`level_decoding`): a level
above must not reuse the uniform that decided the token it tests. By induction over the levels the output follows
the target's distribution (the paper's Theorem 2.1; tests/algorithms/test_hsd_lossless.py). No level drafts past
the last output token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from specpar.algorithms.generation import Generation
from specpar.algorithms.verification import verify_chain
from specpar.core.calls import Draft, Proposal, Score
from specpar.core.config import SpeculativeConfig
from specpar.core.decoding import Decoding, mix64
from specpar.core.errors import ConfigError
from specpar.core.numbers import positive_int
from specpar.core.results import GenerationResult
from specpar.runtimes.base import Pool

_LEVEL_SALT = 0x2545F4914F6CDD1D


@lru_cache(maxsize=256)
def level_decoding(decoding: Decoding, level: int) -> Decoding:
    """The decoding an intermediate level verifies with: same temperature, independent uniforms (the Gumbel coupling
    keeps the seed: each level's token is its own Gumbel-max sample whatever it tests)."""
    if decoding.coupling == "gumbel":
        return decoding
    return replace(decoding, seed=mix64(decoding.seed ^ ((level + 1) * _LEVEL_SALT)))


def check_buffers(buffers: Sequence[int], n_drafters: int) -> list[int]:
    if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
        raise ConfigError(f"buffers must be a list of buffer sizes T_i, one per drafter level, got {buffers!r}")
    if len(buffers) != n_drafters:
        raise ConfigError(
            f"HSD needs one buffer size T_i per drafter level: {n_drafters} drafters, "
            f"got {len(buffers)} buffer sizes {list(buffers)}"
        )
    return [positive_int(f"buffer size T_{i}", t) for i, t in enumerate(buffers)]


class DrafterLevels:
    """The levels below the target, M0 .. M_{K-1}: how M_m gets its next T_m tokens (Algorithm 1's recursion).

    ``run(m, call)`` returns the result of a Draft (m = 0) or Score (m > 0) call on model m (a runtime task in
    :func:`hsd`, a direct server call in :class:`~specpar.algorithms.hsd_sp.LevelsServer`). Counts per level:
    requests (``calls``), forward passes, drafts tested and accepted.
    """

    def __init__(self, run: Callable, buffers: Sequence[int]):
        self.run = run
        self.T = list(buffers)
        n = len(self.T)
        self.calls, self.forwards, self.tested, self.accepted = [0] * n, [0] * n, [0] * n, [0] * n

    def fill(
        self, m: int, context: tuple[int, ...], limit: int, decoding: Decoding, want: int | None = None
    ) -> Proposal:
        """M_m's next ``want`` (default T_m) tokens after ``context``, never past position ``limit``; Proposal.q holds
        M_m's own row at each (the q of the level above), None when greedy."""
        want = min(self.T[m] if want is None else want, limit - len(context))
        self.calls[m] += 1
        if m == 0:
            self.forwards[0] += want
            return self.run(0, Draft(context, want, decoding))
        verifier = level_decoding(decoding, m)
        tokens, rows = [], []
        while len(tokens) < want:
            batch = self.fill(m - 1, context + tuple(tokens), limit, decoding)
            scores = self.run(m, Score(context + tuple(tokens) + tuple(batch.tokens), len(batch.tokens), decoding))
            self.forwards[m] += 1
            n, token = verify_chain(batch.tokens, batch.q, scores.rows, verifier, scores.start)
            self.tested[m] += min(n + 1, len(batch.tokens))
            self.accepted[m] += n
            tokens += batch.tokens[:n] + [token]
            rows.extend(scores.rows[: n + 1])  # M_m's own row at each kept position
        return Proposal(tokens[:want], None if decoding.greedy else np.stack(rows[:want]))

    def counts(self) -> list[list[int]]:
        """A copy of the counters: [calls, forwards, tested, accepted], each [K] (M0 first)."""
        return [list(self.calls), list(self.forwards), list(self.tested), list(self.accepted)]

    def details(
        self, target_rounds: int, target_tested: int, target_accepted: int, counts: list[list[int]] | None = None
    ) -> dict:
        """Per-level metrics, M0 first and the target last; ``counts`` (as :meth:`counts` gives) default to all
        the work these levels did."""
        calls, forwards, tested, accepted = self.counts() if counts is None else counts
        tested, accepted = tested + [target_tested], accepted + [target_accepted]
        return {
            "buffers": self.T,
            "calls_per_level": calls + [target_rounds],  # M0: Draft calls; Mi: requests; MK: rounds
            "forwards_per_level": forwards + [target_rounds],  # M0: drafted tokens; others: passes
            "acceptance_rate_per_level": [None] + [a / t if t else None for a, t in zip(accepted[1:], tested[1:])],
            "tested_per_level": tested,
            "accepted_per_level": accepted,
        }


def hsd(g: Generation, pools: dict[str, Pool], spec: SpeculativeConfig) -> GenerationResult:
    """HSD on pools "level0" .. "levelK" (M0 first, the target MK last) with ``spec.buffers`` T_0 .. T_{K-1}."""
    buffers = spec.buffers or ()
    levels = [pools[f"level{i}"] for i in range(len(buffers) + 1)]
    if len(levels) < 2:
        raise ConfigError("HSD needs at least one drafter level below the target")
    K = len(levels) - 1
    T = check_buffers(buffers, K)
    runtime, decoding = g.runtime, g.decoding
    below = DrafterLevels(lambda m, call: runtime.run(levels[m], call), T)
    rounds = 0
    while not g.done:
        proposal = (
            below.fill(K - 1, g.context(), g.stop - 1, decoding) if g.lookahead_at(len(g.out), 1) else Proposal([])
        )
        scores = runtime.run(levels[K], Score(g.context(proposal.tokens), len(proposal.tokens), decoding))
        rounds += 1
        g.verify(proposal, scores)
    result = g.result("hsd", lookahead=T[K - 1], sp_degree=1)
    result.target_forwards = result.verifications = rounds
    result.drafter_forwards = sum(below.forwards)  # every model below the target
    result.details = below.details(rounds, result.drafted, result.accepted)
    return result
