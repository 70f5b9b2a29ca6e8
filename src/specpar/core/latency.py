"""Latency profiles: how long a forward pass takes, in milliseconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specpar.core.errors import ConfigError
from specpar.core.numbers import is_number

MAX_LATENCY_MS = 1e9
"""The longest forward pass a profile may describe (about 12 days): beyond it, clock arithmetic overflows."""


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """Forward-pass latency of one model on one device, in ms.

    ttft_ms: time to first token: a forward pass on a cold cache (the prompt's prefill).
    tpot_ms: time per output token: a forward pass over one new token with the rest cached.
    per_token_ms: extra cost of each additional new token in the same forward pass
        (verifying k drafts costs tpot_ms + per_token_ms * k). 0 models a memory-bound GPU.
    """

    ttft_ms: float
    tpot_ms: float
    per_token_ms: float = 0.0
    # False when every pass costs the same whatever the server has cached (ttft = tpot, no per-token cost:
    # the paper's time-unit model). A server then need not compare a call's context with its cache to time it.
    cache_matters: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("ttft_ms", "tpot_ms", "per_token_ms"):
            v = getattr(self, name)
            if not is_number(v, 0, MAX_LATENCY_MS):
                raise ConfigError(f"latency {name} must be a number of ms in [0, {MAX_LATENCY_MS:g}], got {v!r}")
            if type(v) not in (int, float):  # a NumPy float: plain, so that every rule on it gives a plain bool
                object.__setattr__(self, name, float(v))
        object.__setattr__(self, "cache_matters", self.ttft_ms != self.tpot_ms or self.per_token_ms != 0)

    @classmethod
    def uniform(cls, ms: float) -> LatencyProfile:
        """Every forward pass takes ``ms`` (ttft = tpot), as in the paper's time-unit simulations."""
        return cls(ms, ms)

    def scaled(self, factor: float) -> LatencyProfile:
        """This profile times ``factor`` (a drafter at latency fraction c of a target: target.scaled(c))."""
        return LatencyProfile(self.ttft_ms * factor, self.tpot_ms * factor, self.per_token_ms * factor)

    def call_ms(self, call, cached: int) -> float:
        """Time of a Draft or Score call on a server whose cache holds the first ``cached`` tokens of its context:
        nothing cached, a prefill (TTFT); else one pass over the new tokens (at least the last); a draft of k tokens
        adds k - 1 one-token passes; tree nodes beyond one per pass (``extra_tokens``) cost per_token_ms each."""
        if call.kind == "verify":
            if cached == 0:
                return self.ttft_ms + self.per_token_ms * call.n_drafts
            n_new = len(call.context) + call.extra_tokens - cached  # a ScoreTree's nodes are not in its context
            return self.tpot_ms + self.per_token_ms * (n_new - 1) if n_new > 1 else self.tpot_ms
        if cached == 0:
            ms = self.ttft_ms
        else:  # written out, not a call: this runs once per task on the virtual clock
            n_new = len(call.context) - cached
            ms = self.tpot_ms + self.per_token_ms * (n_new - 1) if n_new > 1 else self.tpot_ms
        ms += (call.k - 1) * self.tpot_ms
        return ms + self.per_token_ms * call.extra_tokens if self.per_token_ms else ms


def line_through(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through ``points`` (sorted by x, distinct x): interpolated between them, the nearest
    segment's line outside them; one point: its y everywhere."""
    if len(points) == 1:
        return points[0][1]
    i = 1
    while i < len(points) - 1 and points[i][0] < x:
        i += 1
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@dataclass(frozen=True, slots=True)
class PassCosts:
    """Measured forward-pass costs of one model on one machine (a machine profile's, :mod:`specpar.prediction.machine`),
    in ms: :class:`LatencyProfile`'s contract (``call_ms``, ``cache_matters``, and a linear summary for Eq. 1).

    prefill: ((prompt_tokens, ms), ...), increasing lengths: a pass over a prompt on an empty cache
        (:func:`line_through` between and beyond the points).
    passes: (v(1), ..., v(K)): one pass over k new tokens on a warm cache; past K the line through the last two.
    call_ms_extra: added to every call (a runtime's round trip to the server: threads, Ray).
    """

    prefill: tuple[tuple[int, float], ...]
    passes: tuple[float, ...]
    call_ms_extra: float = 0.0
    cache_matters = True  # a class constant: a pass's cost always depends on what the server has cached

    def v(self, k: int) -> float:
        """One pass over ``k`` >= 1 new tokens on a warm cache (ms)."""
        v = self.passes
        if k <= len(v):
            return v[k - 1] if k > 0 else v[0]
        if len(v) == 1:
            return v[0] * k  # one measured point: proportional
        return v[-1] + (v[-1] - v[-2]) * (k - len(v))

    def prefill_ms(self, tokens: int) -> float:
        """A prefill of a prompt of ``tokens`` tokens (ms), never below 0."""
        return max(0.0, line_through(self.prefill, tokens))

    @property
    def ttft_ms(self) -> float:
        return self.prefill[0][1]

    @property
    def tpot_ms(self) -> float:
        return self.passes[0]

    @property
    def per_token_ms(self) -> float:
        """The mean cost of one more token in a pass, over the passes measured (0 with one)."""
        v = self.passes
        return max(0.0, (v[-1] - v[0]) / (len(v) - 1)) if len(v) > 1 else 0.0

    def call_ms(self, call, cached: int) -> float:
        """:meth:`LatencyProfile.call_ms` with the measured costs: on an empty cache a prefill of the context less its
        drafts plus what the drafts add to a one-token pass, else v(new tokens) (a linear profile's time exactly)."""
        v1 = self.passes[0]
        if call.kind == "verify":
            if cached == 0:
                d = call.n_drafts
                return (
                    self.prefill_ms(len(call.context) + call.extra_tokens - d) + self.v(1 + d) - v1 + self.call_ms_extra
                )
            return self.v(max(1, len(call.context) + call.extra_tokens - cached)) + self.call_ms_extra
        ms = self.prefill_ms(len(call.context)) if cached == 0 else self.v(max(1, len(call.context) - cached))
        ms += (call.k - 1) * v1 + self.call_ms_extra
        return ms + self.v(1 + call.extra_tokens) - v1 if call.extra_tokens else ms


def check_contention(factors) -> tuple[float, ...]:
    """Contention factors (f(1), f(2), ...) checked: numbers >= 1, the first 1.0; a ConfigError otherwise."""
    if isinstance(factors, (str, bytes)) or not isinstance(factors, Sequence) or not factors:
        raise ConfigError(f"contention must be slowdown factors for 1, 2, ... busy servers, got {factors!r}")
    for f in factors:
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 1.0 <= f <= MAX_LATENCY_MS:
            raise ConfigError(f"contention factors are numbers >= 1, got {f!r} in {factors!r}")
    if factors[0] != 1.0:
        raise ConfigError(f"the first contention factor (one busy server) is 1.0, got {factors!r}")
    return tuple(float(f) for f in factors)


def slowdown(factors: Sequence[float], busy: int) -> float:
    """f(busy): how many times longer a pass takes while ``busy`` servers run at once, from measured ``factors``
    (f(1), f(2), ...); past the last, in proportion to ``busy`` (the cores shared evenly)."""
    if busy <= len(factors):
        return factors[max(busy, 1) - 1]
    return factors[-1] * busy / len(factors)


STALL_FACTOR = 10.0
"""A call counts as stalled once it has run this many times as long as expected (see :func:`stall_limit_s`)."""
STALL_FLOOR_S = 10.0
"""... and never before this many seconds: a loaded machine, a garbage collection or torch's first call on a device
can delay a millisecond call by seconds without anything being wrong."""
UNMEASURED_LIMIT_S = 600.0
"""The limit of a call when nothing tells how long it should take (no latency profile, no call of its kind
measured on its pool yet): a cold prefill of a long prompt on a CPU takes tens of seconds."""


def stall_limit_s(expected_ms: float | None, factor: float = STALL_FACTOR, floor_s: float = STALL_FLOOR_S) -> float:
    """How long, in seconds, a call expected to take ``expected_ms`` may run before its server counts as stalled:
    ``factor`` x the expectation, at least ``floor_s``; UNMEASURED_LIMIT_S when nothing is known yet."""
    if expected_ms is None:
        return max(UNMEASURED_LIMIT_S, floor_s)
    return max(factor * expected_ms / 1000.0, floor_s)
