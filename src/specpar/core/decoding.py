"""Decoding settings and the position-keyed randomness every sampler uses.

Every random choice of a generation is a uniform in [0, 1) keyed by
``(seed, stream, position)`` instead of being drawn from a shared generator.
Positions are absolute indices in the token sequence (prompt included). Each
output position uses its own draws (draft sample, acceptance test, residual
sample, bonus sample), so losslessness is unaffected: the draws that decide
position ``i`` are fresh given the prefix, whatever happened on discarded branches.

What a seed reproduces depends on the coupling of draft and target (``Decoding.coupling``):

* ``"rejection"`` (default; Leviathan et al., the papers' algorithm and acceptance rate): a
  position's token is decided either by testing a draft there (acceptance test, residual
  sample) or, when no draft reached it first, by the target's own sample (bonus). Both are
  exact in distribution but give different tokens. SI, non-SI and HSD decide every position
  the same way whatever the timing, so the same seed gives the same tokens on every runtime.
  DSI and HSD-SP verify while drafting goes on: which of the two decides a position is a race
  between the drafter and the target servers, so the same seed gives the same tokens run after
  run on the virtual clock (its ties are broken deterministically), but can differ from run to
  run on threads (and from the virtual clock) where timings vary.
* ``"gumbel"`` (drafter-invariant coupling): the token at position ``i`` is
  ``argmax_v log p(v) + G_i(v)`` with Gumbel noise ``G_i`` keyed by (seed, i, v), the
  drafter drafts with the same noise on its own ``q``, and a draft is accepted iff it equals
  the target's token. The output is a function of the seed and the target alone: the same
  tokens on every runtime, for every algorithm, as non-SI's, whoever decides a position. The
  price is a lower acceptance: P(accept) >= (1 - TV) / (1 + TV) instead of rejection
  sampling's optimal 1 - TV (TV: the total variation distance between p and q).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specpar.core.errors import ConfigError
from specpar.core.logits_processors import LogitsProcessors

_MASK = (1 << 64) - 1

# Streams: independent uniforms for the different random choices at one position.
DRAFT, ACCEPT, RESIDUAL, BONUS, GUMBEL = 1, 2, 3, 4, 5
COUPLINGS = ("rejection", "gumbel")
_GOLD = 0x9E3779B97F4A7C15


def mix64(x: int) -> int:
    """splitmix64 finalizer: a bijective, well-mixed 64-bit hash of an integer."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, stream: int, position: int) -> float:
    """A uniform draw in [0, 1), a deterministic function of (seed, stream, position)."""
    h = mix64((seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03) & _MASK)
    return mix64((h + position * 0x9E3779B97F4A7C15) & _MASK) / 18446744073709551616.0


def uniforms(seed: int, stream: int, position: int, n: int) -> np.ndarray:
    """``n`` uniforms in (0, 1), one per token id, a deterministic function of (seed, stream, position, id)."""
    h = mix64((seed * _GOLD + stream * 0xD1B54A32D192ED03) & _MASK)
    key = mix64((h + position * _GOLD) & _MASK)
    x = np.arange(n, dtype=np.uint64) * np.uint64(_GOLD) + np.uint64(key)  # uint64 arrays wrap mod 2**64
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) / 9007199254740992.0


def gumbel_sample(dist: np.ndarray, seed: int, position: int) -> int:
    """A sample of ``dist`` [V] by the Gumbel-max trick with noise keyed by (seed, position): the token whose
    exponential clock -log(u_v) / dist[v] rings first (equivalent to argmax log dist + Gumbel, without the logs of
    zeros). Two distributions sampled at one position with one seed share the noise: the coupling."""
    with np.errstate(divide="ignore"):
        return int(np.argmin(-np.log(uniforms(seed, GUMBEL, position, len(dist))) / dist))


def sample(dist: np.ndarray, u: float) -> int:
    """Inverse-CDF sample of one token from a probability vector ``dist`` [V] with uniform ``u``."""
    cdf = np.cumsum(dist)
    i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(i, len(dist) - 1)


def check_temperature(temperature) -> float:
    """``temperature`` as a float if it is a finite number >= 0, else a ConfigError (inf and nan are refused)."""
    ok = not isinstance(temperature, bool) and isinstance(temperature, (int, float, np.floating, np.integer))
    if not ok or not 0 <= temperature < math.inf:
        raise ConfigError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    return float(temperature)


@dataclass(frozen=True, slots=True)
class Decoding:
    """How tokens are chosen.

    temperature: 0 means greedy (argmax, exact-match verification); > 0 means
        sampling from softmax(logits / temperature) with lossless rejection sampling.
    seed: keys every random draw (see module docstring).
    processors: the request's logits processors (top-k, top-p, min-p, repetition penalty), applied by every
        server, target and drafter alike, before rows leave it (:mod:`specpar.core.logits_processors`); None: none.
    coupling: "rejection" (rejection sampling, the papers') or "gumbel" (drafter-invariant: the same tokens for a
        seed on every runtime and algorithm); see the module docstring.
    logprobs: None (the default), or how many of the most likely tokens the generation records beside each output
        token's own log-probability: target servers then return log-probability rows
        (:class:`specpar.core.calls.Scores` says in which form).
    """

    temperature: float = 0.0
    seed: int = 0
    processors: LogitsProcessors | None = None
    coupling: str = "rejection"
    logprobs: int | None = None
    greedy: bool = field(init=False, repr=False, compare=False)  # temperature == 0, read once per token
    # servers must process rows: processors that change this decoding's rows (greedy: only a penalty does)
    reshapes: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.coupling not in COUPLINGS:
            raise ConfigError(f"coupling must be one of {COUPLINGS}, got {self.coupling!r}")
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))  # a NumPy integer would overflow in uniform()'s hash
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int)
                                          or self.logprobs < 0):  # fmt: skip
            raise ConfigError(f"logprobs must be None or an integer >= 0, got {self.logprobs!r}")
        greedy = self.temperature == 0.0
        object.__setattr__(self, "greedy", greedy)
        p = self.processors
        object.__setattr__(self, "reshapes", p is not None and (p.changes_argmax if greedy else p.active))

    def uniform(self, stream: int, position: int) -> float:
        return uniform(self.seed, stream, position)

    def draft(self, q: np.ndarray, position: int) -> int:
        """The drafter's token at ``position`` from its row ``q`` [V]."""
        if self.coupling == "gumbel":
            return gumbel_sample(q, self.seed, position)
        return sample(q, self.uniform(DRAFT, position))


GREEDY = Decoding()
