"""Decoding settings and the position-keyed randomness every sampler uses.

Every random choice of a generation is a uniform in [0, 1) keyed by ``(seed, stream, position)`` (positions absolute,
prompt included), never drawn from a shared generator: the draws that decide position ``i`` are fresh given the
prefix, whatever happened on discarded branches, so losslessness is unaffected.

What a seed reproduces depends on the coupling (``Decoding.coupling``). Greedy decoding needs no seed: every algorithm
gives the target's greedy tokens on every runtime. A request's :class:`~specpar.core.params.SamplingParams` samples
with ``"gumbel"`` when it has a seed and ``"rejection"`` when it has none, unless its ``coupling`` says otherwise.

* ``"rejection"`` (Leviathan et al., the papers' algorithm and acceptance rate): a position's token is decided by a
  test of a draft there (acceptance test, residual sample) or by the target's own sample (bonus); both are exact in
  distribution but give different tokens, so the tokens are a function of the seed *and the configuration*. Non-SI,
  SI and HSD give the same tokens on every runtime; DSI and HSD-SP verify while drafting goes on, so which of the
  two decides a position is a race, broken deterministically on the virtual clock and not in real time: their
  tokens may differ from run to run on threads and Ray (each run still exact in distribution). Measured with
  ``python -m benchmarks seed_serial_runs`` (a tiny transformers pair, DSI on threads, 5 serial runs of one seed,
  4 processes, load 11-15 on 2 cores): 3, 2, 3, 1 distinct outputs per 5 runs.
* ``"gumbel"`` (drafter-invariant coupling): the token at position ``i`` is ``argmax_v log p(v) + G_i(v)`` with
  Gumbel noise keyed by (seed, i, v); the drafter drafts with the same noise on its own ``q`` and a draft is
  accepted iff it equals the target's token. The output is non-SI's tokens for the seed for every algorithm,
  drafter, lookahead, tree and sp_degree, on every runtime (1 distinct output in 5 runs in each process above). The
  price is a lower acceptance: P(accept) >= (1 - TV) / (1 + TV) instead of rejection sampling's 1 - TV.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from specpar.core.errors import ConfigError
from specpar.core.logits_processors import LogitsProcessors
from specpar.core.numbers import is_int, is_number

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


def _key(seed: int, stream: int, position: int) -> int:
    """A 64-bit hash of (seed, stream, position)."""
    h = mix64((seed * _GOLD + stream * 0xD1B54A32D192ED03) & _MASK)
    return mix64((h + position * _GOLD) & _MASK)


def uniform(seed: int, stream: int, position: int) -> float:
    """A uniform draw in [0, 1), a deterministic function of (seed, stream, position)."""
    return _key(seed, stream, position) / 18446744073709551616.0


def uniforms(seed: int, stream: int, position: int, n: int) -> np.ndarray:
    """``n`` uniforms in (0, 1), one per token id, a deterministic function of (seed, stream, position, id)."""
    key = _key(seed, stream, position)
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


MIN_TEMPERATURE = sys.float_info.min
"""The smallest temperature > 0, the smallest normal float64. Servers scale logits as (logits - their maximum) / T
(:func:`specpar.core.logits_processors.scaled`), exact at any T >= MIN_TEMPERATURE; below it T is subnormal, which
GPUs flush to zero. Such a temperature samples the argmax anyway: temperature 0 gives the same output."""


def check_temperature(temperature) -> float:
    """``temperature`` as a float if it is 0 or a finite number >= MIN_TEMPERATURE, else a ConfigError naming the
    problem (inf, nan, a negative or a subnormal temperature)."""
    if not is_number(temperature, 0, math.inf, hi_open=True, numpy=True):
        raise ConfigError(f"temperature must be a finite number >= 0 (0 means greedy), got {temperature!r}")
    if 0 < temperature < MIN_TEMPERATURE:
        raise ConfigError(
            f"temperature {temperature!r} is below {MIN_TEMPERATURE!r}, the smallest normal float, where logits / "
            "temperature cannot be computed reliably; so small a temperature samples the most likely token: give 0 "
            "(greedy decoding) for that"
        )
    return float(temperature)


@dataclass(frozen=True, slots=True)
class Decoding:
    """How tokens are chosen (every server call of a request carries one).

    temperature: 0: greedy (exact-match verification); > 0: sampling from softmax(logits / temperature). seed: keys
    every random draw. processors: the request's logits processors, applied by every server before rows leave it.
    coupling: "rejection" or "gumbel" (module docstring). logprobs: None, or how many most likely tokens to record
    beside each output token's log-probability (target servers then return log-probability rows: :class:`Scores`).
    prompt_len: the request's prompt length (0: not given), which servers may prefill in their own fastest passes
    when every server of the request does it alike (:mod:`specpar.backends.llama.prefill`).
    """

    temperature: float = 0.0
    seed: int = 0
    processors: LogitsProcessors | None = None
    coupling: str = "rejection"
    logprobs: int | None = None
    prompt_len: int = 0
    greedy: bool = field(init=False, repr=False, compare=False)  # temperature == 0, read once per token
    # servers must process rows: processors that change this decoding's rows (greedy: only a penalty does)
    reshapes: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.coupling not in COUPLINGS:
            raise ConfigError(f"coupling must be one of {COUPLINGS}, got {self.coupling!r}")
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        if not is_int(self.seed, numpy=True):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))  # a NumPy integer would overflow in uniform()'s hash
        if self.logprobs is not None and not is_int(self.logprobs, 0):
            raise ConfigError(f"logprobs must be None or an integer >= 0, got {self.logprobs!r}")
        if not is_int(self.prompt_len, 0):
            raise ConfigError(f"prompt_len must be an integer >= 0, got {self.prompt_len!r}")
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
