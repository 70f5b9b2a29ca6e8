"""Decoding settings and the position-keyed randomness every sampler uses.

Every random choice of a generation is a uniform in [0, 1) keyed by
``(seed, stream, position)`` instead of being drawn from a shared generator.
Positions are absolute indices in the token sequence (prompt included). Each
output position uses its own draws (draft sample, acceptance test, residual
sample, bonus sample), so

* the tokens do not depend on the order in which tasks finish: the virtual
  clock and real threads produce the same sampled output for the same seed;
* losslessness is unaffected: the draws that decide position ``i`` are fresh
  given the prefix, whatever happened on discarded branches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specpar.errors import ConfigError

_MASK = (1 << 64) - 1

# Streams: independent uniforms for the different random choices at one position.
DRAFT, ACCEPT, RESIDUAL, BONUS = 1, 2, 3, 4


def mix64(x: int) -> int:
    """splitmix64 finalizer: a bijective, well-mixed 64-bit hash of an integer."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def uniform(seed: int, stream: int, position: int) -> float:
    """A uniform draw in [0, 1), a deterministic function of (seed, stream, position)."""
    h = mix64((seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03) & _MASK)
    return mix64((h + position * 0x9E3779B97F4A7C15) & _MASK) / 18446744073709551616.0


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
    """

    temperature: float = 0.0
    seed: int = 0
    greedy: bool = field(init=False, repr=False, compare=False)  # temperature == 0, read once per token

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))  # a NumPy integer would overflow in uniform()'s hash
        object.__setattr__(self, "greedy", self.temperature == 0.0)

    def uniform(self, stream: int, position: int) -> float:
        return uniform(self.seed, stream, position)


GREEDY = Decoding()
