"""``SamplingParams``: a request's controls, with vLLM's names, checked once when they are made."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from specpar.core.decoding import COUPLINGS, Decoding, check_temperature
from specpar.core.errors import ConfigError
from specpar.core.logits_processors import LogitsProcessors


@dataclass(frozen=True)
class SamplingParams:
    """How one request chooses and stops its tokens (vLLM's names and meanings).

    temperature: 0 greedy (the default); > 0 samples from softmax(logits / temperature).
    top_k: keep the k most likely tokens; 0 (or None): all.
    top_p: keep the smallest most likely set with probability >= top_p, in (0, 1]; 1: all.
    min_p: drop tokens below min_p x the top token's probability, in [0, 1]; 0: none.
    repetition_penalty: > 0; tokens already in the prompt or output are made less likely (> 1) or
        more (< 1); 1: off.
    max_tokens: new tokens at most.
    stop: strings that end the output (the text stops before the string; needs a tokenizer).
    stop_token_ids: token ids that end the output (the id is the last output token).
    ignore_eos: keep generating past the model's end-of-text tokens.
    seed: keys every random draw (what a seed reproduces on which runtime: :mod:`specpar.core.decoding`).
    coupling: specpar's own: "rejection" (rejection sampling, the default) or "gumbel" (drafter-invariant: a seed
        gives the same tokens on every runtime and for every algorithm; a lower acceptance rate).

    Every processor reshapes the target's and the drafter's distributions alike before verification, so
    the output is the processed target's: greedy token for token, sampled in distribution.
    """

    temperature: float = 0.0
    top_k: int | None = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 64
    stop: str | Sequence[str] | None = None
    stop_token_ids: Sequence[int] | None = None
    ignore_eos: bool = False
    seed: int = 0
    coupling: str = "rejection"

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        _number(self, "top_p", 0.0, 1.0, "(0, 1]", lo_open=True)
        _number(self, "min_p", 0.0, 1.0, "[0, 1]")
        _number(self, "repetition_penalty", 0.0, math.inf, "(0, inf)", lo_open=True)
        top_k = 0 if self.top_k is None else self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0: no limit), got {self.top_k!r}")
        object.__setattr__(self, "top_k", top_k)
        n = self.max_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"max_tokens (max_new_tokens) must be a positive integer, got {n!r}")
        stop = () if self.stop is None else (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ConfigError(f"stop strings must be non-empty strings, got {s!r}")
        object.__setattr__(self, "stop", stop)
        ids = () if self.stop_token_ids is None else tuple(self.stop_token_ids)
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                raise ConfigError(f"stop_token_ids must be token ids (integers >= 0), got {t!r}")
        object.__setattr__(self, "stop_token_ids", ids)
        if not isinstance(self.ignore_eos, bool):
            raise ConfigError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, got {self.seed!r}")
        if self.coupling not in COUPLINGS:
            raise ConfigError(f"coupling must be one of {COUPLINGS}, got {self.coupling!r}")

    @classmethod
    def from_kwargs(cls, **kwargs) -> SamplingParams:
        """SamplingParams(**kwargs), with an unknown keyword a ConfigError naming the known ones."""
        for name in kwargs:
            if name not in SAMPLING_FIELDS:
                raise ConfigError(f"unknown sampling parameter {name!r}: known ones are {', '.join(SAMPLING_FIELDS)}")
        return cls(**kwargs)

    @property
    def processors(self) -> LogitsProcessors | None:
        p = LogitsProcessors(self.repetition_penalty, self.top_k, self.top_p, self.min_p)
        return p if p.active else None

    def decoding(self) -> Decoding:
        """The :class:`Decoding` every server call of this request carries."""
        return Decoding(self.temperature, self.seed, self.processors, self.coupling)


SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))


def _number(params: SamplingParams, name: str, lo: float, hi: float, bounds: str, lo_open: bool = False) -> None:
    """Check a real-valued field is in its interval (``bounds`` says it in words) and store it as a float."""
    v = getattr(params, name)
    if type(v) not in (int, float) or not (lo < v if lo_open else lo <= v) or not v <= hi or v == math.inf:
        if type(v) not in (int, float) or not math.isfinite(v):
            raise ConfigError(f"{name} must be a finite number, got {v!r}")
        raise ConfigError(f"{name} must be in {bounds}, got {v!r}")
    object.__setattr__(params, name, float(v))
