"""Simulated model stacks for HSD: models M0 < M1 < ... < MK (MK the target) with pairwise acceptance rates.

``alpha[i][j]`` (i < j) is the probability that Mj accepts a token of Mi (``1 - TV(q_i, q_j)`` when sampling, that
their greedy tokens agree when greedy). The construction is a Markov chain from the target down: at prefix hash
``h`` the target has mode ``m(h)`` and K *junk* tokens ``j_0(h), ..., j_{K-1}(h)`` (distinct, not the mode,
probability 0 under the target); with the chain rates ``b_i = alpha[i][i+1]``:

* sampling: ``q_K = p`` and ``q_i = b_i q_{i+1} + (1 - b_i) onehot(j_i)``;
* greedy: ``g_K = m(h)``, and ``g_i = g_{i+1}`` when a hash of (stack, level i, h) falls below ``b_i``, else
  ``j_i(h)``.

Then ``alpha[i][j] = b_i b_{i+1} ... b_{j-1}`` exactly, and each link decides once, so in every sub-hierarchy the
acceptances of adjacent levels are independent (greedy: two adjacent pairs use disjoint links; sampling: Mj accepts
iff the token is not junk, and the residual is q_j itself), which is what the HSD latency model
L = sum_i c_i prod_{j>=i} R_j assumes (:mod:`specpar.planning.hsd_latency`). It holds for the matrices with
``alpha[i][k] = alpha[i][j] * alpha[j][k]``; :meth:`SimulatedStack.from_matrix` refuses others (another construction
would realise them only with correlated acceptances). As for
:class:`~specpar.backends.simulated.SimulatedDrafter`, the greedy token and the sampling distribution are specified
separately; each alone has the stated rates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from specpar.backends.simulated import _GOLD, _MASK, _TWO64, SimulatedLM, peaked_probs
from specpar.core.decoding import mix64
from specpar.core.errors import ConfigError
from specpar.core.latency import LatencyProfile
from specpar.core.numbers import is_int
from specpar.planning.hsd_latency import check_alpha, check_rate

_JUNK_SALT = 0x7F4A7C159E3779B9
_LINK_SALT = 0xC2B2AE3D27D4EB4F
FEASIBLE_TOL = 1e-6


class SimulatedStack:
    """K + 1 simulated models over one vocabulary, ordered from the smallest drafter to the target.

    chain: [K] acceptance rates of adjacent models, ``chain[i] = alpha[i][i+1]``.
    latencies: [K + 1] latency profiles, M0 first, the target last.
    vocab_size: V >= K + 2 (the target's support keeps V - K >= 2 tokens; K junk tokens).
    seed: selects the stack (target distributions and every link's coin).
    spread: logit range of the target (as in SimulatedModel).
    """

    def __init__(
        self,
        chain: Sequence[float],
        latencies: Sequence[LatencyProfile],
        vocab_size: int = 16,
        seed: int = 0,
        spread: float = 3.0,
    ):
        chain = [check_rate(b, f"chain acceptance rate alpha[{i}][{i + 1}]") for i, b in enumerate(chain)]
        k = len(chain)
        if k < 1:
            raise ConfigError("a stack needs at least one drafter below the target (chain of length >= 1)")
        if len(latencies) != k + 1:
            raise ConfigError(f"a stack of {k + 1} models needs {k + 1} latency profiles, got {len(latencies)}")
        if not is_int(vocab_size, k + 2):
            raise ConfigError(
                f"vocab_size must be an integer >= K + 2 = {k + 2} for a stack of {k + 1} models "
                f"(K junk tokens plus at least 2 target tokens), got {vocab_size!r}"
            )
        self.chain = chain
        self.vocab_size = vocab_size
        self.seed = seed
        self.spread = float(spread)
        self.h0 = mix64((seed * _GOLD + 0x7654321) & _MASK)
        self._link_salts = [mix64((seed * _GOLD + (i + 1) * _LINK_SALT) & _MASK) for i in range(k)]
        self.models = [StackModel(self, i, lat) for i, lat in enumerate(latencies)]

    @classmethod
    def from_matrix(cls, alpha, latencies: Sequence[LatencyProfile], **kw) -> SimulatedStack:
        """A stack realising the acceptance matrix ``alpha`` [K+1, K+1] (entries above the diagonal are used); a
        ConfigError unless alpha[i][k] == alpha[i][j] * alpha[j][k] for all i < j < k."""
        a = check_alpha(alpha)
        n = len(a)
        if len(latencies) != n:
            raise ConfigError(
                f"alpha is {n} x {n} but {len(latencies)} models (latency profiles) are given: give one row per model"
            )
        for i, j, k in itertools.combinations(range(n), 3):
            if abs(a[i, k] - a[i, j] * a[j, k]) > FEASIBLE_TOL:
                raise ConfigError(
                    f"alpha is not realisable by a simulated stack: alpha[{i}][{k}] = {a[i, k]:g} but "
                    f"alpha[{i}][{j}] * alpha[{j}][{k}] = {a[i, j] * a[j, k]:g}. A stack with independent "
                    "acceptances at every level (what the HSD latency model assumes) needs "
                    "alpha[i][k] = alpha[i][j] * alpha[j][k]; give the superdiagonal as a chain instead"
                )
        return cls([a[i, i + 1] for i in range(n - 1)], latencies, **kw)

    @property
    def target(self) -> StackModel:
        return self.models[-1]

    @property
    def drafters(self) -> list[StackModel]:
        return self.models[:-1]

    @property
    def alpha(self) -> np.ndarray:
        """[K+1, K+1] pairwise acceptance rates (symmetric, ones on the diagonal)."""
        n = len(self.models)
        a = np.ones((n, n))
        for i, j in itertools.combinations(range(n), 2):
            a[i, j] = a[j, i] = math.prod(self.chain[i:j])
        return a

    @property
    def costs(self) -> list[float]:
        """Each model's time per forward pass (tpot, ms): the c_i of the HSD latency model."""
        return [m.latency.tpot_ms for m in self.models]

    # The distributions, shared by the models of the stack.
    def mode(self, h: int) -> int:
        return (h >> 8) % self.vocab_size

    def junk(self, h: int) -> list[int]:
        """The K junk tokens at this position: distinct, never the mode, probability 0 under the target."""
        v, m, k = self.vocab_size, self.mode(h), len(self.chain)
        off = mix64(h ^ _JUNK_SALT) % (v - 1)
        return [(m + 1 + (off + i) % (v - 1)) % v for i in range(k)]

    def target_probs(self, h: int, temperature: float) -> np.ndarray:
        return peaked_probs(h, self.vocab_size, self.spread, self.mode(h), self.junk(h), temperature)

    def probs(self, level: int, h: int, temperature: float) -> np.ndarray:
        """q_level = b_level q_{level+1} + (1 - b_level) onehot(j_level), down from q_K = p."""
        q = self.target_probs(h, temperature)
        junk = self.junk(h)
        for i in range(len(self.chain) - 1, level - 1, -1):
            q *= self.chain[i]
            q[junk[i]] += 1.0 - self.chain[i]
        return q

    def greedy(self, level: int, h: int) -> int:
        """g_level: the token above it in the chain while every link's coin keeps it, else the level's junk token."""
        token = self.mode(h)
        junk = self.junk(h)
        for i in range(len(self.chain) - 1, level - 1, -1):
            if mix64(h ^ self._link_salts[i]) / _TWO64 >= self.chain[i]:
                token = junk[i]
        return token


class StackModel(SimulatedLM):
    """Model ``level`` of a :class:`SimulatedStack` (level K is the target); serves like any simulated model."""

    def __init__(self, stack: SimulatedStack, level: int, latency: LatencyProfile):
        if not isinstance(latency, LatencyProfile):
            raise ConfigError(f"latency of model {level} must be a LatencyProfile, got {latency!r}")
        self.stack = stack
        self.level = level
        self.latency = latency
        self.vocab_size = stack.vocab_size
        self.h0 = stack.h0

    def argmax(self, h: int) -> int:
        return self.stack.greedy(self.level, h)

    def probs(self, h: int, temperature: float = 1.0) -> np.ndarray:
        return self.stack.probs(self.level, h, temperature)

    def __repr__(self) -> str:
        return f"StackModel(level {self.level} of {len(self.stack.models)})"
