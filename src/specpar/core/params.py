"""``SamplingParams``: a request's controls, with vLLM's names, checked once when they are made."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from specpar.core.config import SEED_HELP, flag
from specpar.core.decoding import COUPLINGS, Decoding, check_temperature
from specpar.core.errors import ConfigError
from specpar.core.logits_processors import LogitsProcessors
from specpar.core.numbers import is_int, is_number
from specpar.core.stopping import Stopping

MAX_TOKENS = 2**31 - 1  # the most new tokens a request may ask for (a C size, as the command line's -N takes)


@dataclass(frozen=True)
class SamplingParams:
    """How one request chooses and stops its tokens: vLLM's names, defaults and meanings.

    temperature: 1.0 by default; 0: greedy. top_k: the k most likely tokens (0, -1 or None: all). top_p: in (0, 1].
    min_p: in [0, 1]. presence_penalty, frequency_penalty: in [-2, 2], against tokens already in the output.
    repetition_penalty: > 0, against tokens already in the prompt or output (1: off). logit_bias: {token id: bias in
    [-100, 100]} added to the raw logits. max_tokens: new tokens at most (16, as vLLM's). min_tokens: no end of text,
    stop id or stop string before this many output tokens. stop: strings that end the output (the text stops before
    the string; needs a tokenizer). stop_token_ids: ids that end the output (kept as its last token).
    include_stop_str_in_output: the text goes on to the end of the stop string. ignore_eos: go on past the model's
    end-of-text tokens. seed: an integer >= 0 keying every random draw (:mod:`specpar.core.decoding`); None: fresh
    randomness. logprobs: None, or how many most likely tokens to report beside each output token's log-probability.
    coupling: specpar's own, "rejection" (the papers', the higher acceptance rate) or "gumbel" (a seed gives the same
    tokens on every runtime and for every algorithm); None: "gumbel" with a seed, else "rejection".

    Where it differs from vLLM's: no ``n``, ``best_of`` or prompt logprobs (the server's ``n`` calls once per
    sample); no ``bad_words``, ``allowed_token_ids``, ``truncate_prompt_tokens`` or structured outputs; a negative
    seed is refused. The processors reshape the target's and the drafter's rows alike before verification, so the
    output is the processed target's: greedy token for token, sampled in distribution.
    """

    temperature: float = field(
        default=1.0,
        metadata=flag("--temperature", "0: greedy, token for token the target's; > 0: sampling", metavar="T"),
    )
    top_k: int | None = field(
        default=0, metadata=flag("--top-k", "keep the k most likely tokens (0: all)", metavar="K")
    )
    top_p: float = field(
        default=1.0, metadata=flag("--top-p", "keep the most likely tokens up to this probability", metavar="P")
    )
    min_p: float = field(
        default=0.0,
        metadata=flag("--min-p", "drop tokens below P x the top token's probability", metavar="P", advanced=True),
    )
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = field(
        default=1.0,
        metadata=flag("--repetition-penalty", "> 1 makes tokens already seen less likely", metavar="R", advanced=True),
    )
    logit_bias: Mapping[int, float] | None = None
    max_tokens: int = field(
        default=16,
        metadata=flag("--max-tokens", "new tokens to generate", short="-N", aliases=("--max-new-tokens",), metavar="N"),
    )
    min_tokens: int = 0
    stop: str | Sequence[str] | None = field(
        default=None, metadata=flag("--stop", "stop at this text (repeatable)", metavar="TEXT")
    )
    stop_token_ids: Sequence[int] | None = field(
        default=None, metadata=flag("--stop-token-id", "stop at this token (repeatable)", metavar="ID", advanced=True)
    )
    include_stop_str_in_output: bool = False
    ignore_eos: bool = field(
        default=False, metadata=flag("--ignore-eos", "go on past the model's end-of-text tokens", advanced=True)
    )
    seed: int | None = field(default=None, metadata=flag("--seed", SEED_HELP, metavar="S"))
    logprobs: int | None = None
    coupling: str | None = field(
        default=None,
        metadata=flag(
            "--coupling",
            "how a sampled draft is judged",
            default="gumbel with a seed (it then reproduces on every runtime), else rejection",
            choices={
                "rejection": "the papers' rejection sampling",
                "gumbel": "drafter-invariant: a seed gives non-SI's tokens for every algorithm and runtime; a lower "
                "acceptance rate",
            },
            advanced=True,
        ),
    )

    def __post_init__(self):
        object.__setattr__(self, "temperature", check_temperature(self.temperature))
        _number(self, "top_p", 0.0, 1.0, "(0, 1]", lo_open=True)
        _number(self, "min_p", 0.0, 1.0, "[0, 1]")
        _number(self, "presence_penalty", -2.0, 2.0, "[-2, 2]")
        _number(self, "frequency_penalty", -2.0, 2.0, "[-2, 2]")
        _number(self, "repetition_penalty", 0.0, math.inf, "(0, inf)", lo_open=True)
        top_k = 0 if self.top_k is None or self.top_k == -1 else self.top_k
        if not is_int(top_k, 0):
            raise ConfigError(f"top_k must be an integer >= 0 (0 or -1: no limit), got {self.top_k!r}")
        object.__setattr__(self, "top_k", top_k)
        n = self.max_tokens
        if not is_int(n, 1):
            raise ConfigError(f"max_tokens (max_new_tokens) must be a positive integer, got {n!r}")
        if n > MAX_TOKENS:
            raise ConfigError(
                f"max_tokens (max_new_tokens) must be at most {MAX_TOKENS} (as on the command line), got {n!r}"
            )
        m = self.min_tokens
        if not is_int(m, 0, n):
            raise ConfigError(f"min_tokens must be an integer in [0, max_tokens = {n}], got {m!r}")
        object.__setattr__(self, "logit_bias", _bias(self.logit_bias))
        if self.stop is not None and not isinstance(self.stop, (str, Sequence)):
            raise ConfigError(f"stop must be a string or a list of strings, got {self.stop!r}")
        stop = () if self.stop is None else (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        for s in stop:
            if not isinstance(s, str) or not s:
                raise ConfigError(f"stop strings must be non-empty strings, got {s!r}")
        object.__setattr__(self, "stop", stop)
        if self.stop_token_ids is not None and (
            isinstance(self.stop_token_ids, (str, bytes)) or not isinstance(self.stop_token_ids, Sequence)
        ):
            raise ConfigError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
        ids = () if self.stop_token_ids is None else tuple(self.stop_token_ids)
        for t in ids:
            if not is_int(t, 0):
                raise ConfigError(f"stop_token_ids must be token ids (integers >= 0), got {t!r}")
        object.__setattr__(self, "stop_token_ids", ids)
        for name in ("ignore_eos", "include_stop_str_in_output"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.seed is not None and not is_int(self.seed, 0):
            what = "an integer >= 0" if is_int(self.seed) else "an integer"
            raise ConfigError(f"seed must be {what}, got {self.seed!r} (None: fresh randomness)")
        lp = self.logprobs
        if lp is not None and not is_int(lp, 0):
            raise ConfigError(f"logprobs must be None or an integer >= 0 (the top tokens to report), got {lp!r}")
        if self.coupling is not None and self.coupling not in COUPLINGS:
            raise ConfigError(
                f"coupling must be one of {COUPLINGS} (or None: gumbel with a seed), got {self.coupling!r}"
            )

    @property
    def resolved_coupling(self) -> str:
        """The coupling this request samples with: ``coupling``, else "gumbel" with a seed and "rejection" without."""
        if self.coupling is not None:
            return self.coupling
        return "gumbel" if self.seed is not None else "rejection"

    @classmethod
    def from_kwargs(cls, **kwargs) -> SamplingParams:
        """SamplingParams(**kwargs), with an unknown keyword a ConfigError naming the known ones."""
        for name in kwargs:
            if name not in SAMPLING_FIELDS:
                raise ConfigError(f"unknown sampling parameter {name!r}: known ones are {', '.join(SAMPLING_FIELDS)}")
        return cls(**kwargs)

    @property
    def processors(self) -> LogitsProcessors | None:
        """The processors of a request whose prompt length does not matter (see :meth:`processors_for`)."""
        return self.processors_for()

    def processors_for(self, prompt_len: int | None = None, end_of_text: Iterable[int] = ()) -> LogitsProcessors | None:
        """The request's logits processors (None when they change nothing). presence_penalty, frequency_penalty
        and min_tokens count the output, so they need ``prompt_len``; min_tokens holds back ``end_of_text`` (the
        model's end-of-text ids, unless ignore_eos) and the stop_token_ids."""
        counts_output = self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.min_tokens > 0
        if counts_output and prompt_len is None:
            raise ConfigError("presence_penalty, frequency_penalty and min_tokens need the prompt's length")
        p = LogitsProcessors(
            self.repetition_penalty, self.top_k, self.top_p, self.min_p, self.presence_penalty,
            self.frequency_penalty, self.logit_bias, self.min_tokens, tuple(sorted(self._stop_ids(end_of_text))),
            prompt_len or 0,
        )  # fmt: skip
        return p if p.active else None

    def decoding(self, prompt_len: int | None = None, end_of_text: Iterable[int] = ()) -> Decoding:
        """The :class:`Decoding` every server call of this request carries (a fresh seed when ``seed`` is None).

        prompt_len, end_of_text: the request's prompt length and its model's end-of-text ids
        (see :meth:`processors_for`)."""
        seed = secrets.randbits(63) if self.seed is None else self.seed
        procs = self.processors_for(prompt_len, end_of_text)
        return Decoding(self.temperature, seed, procs, self.resolved_coupling, self.logprobs, prompt_len or 0)

    def stopping(self, prompt_ids: Sequence[int], end_of_text: Iterable[int] = (), tokenizer=None) -> Stopping | None:
        """The request's stop conditions: its model's ``end_of_text`` ids (unless ignore_eos), its stop ids, and its
        stop strings, found in ``tokenizer``'s text of the output after ``prompt_ids``; None when it has none."""
        ids = self._stop_ids(end_of_text)
        if not ids and not self.stop:
            return None
        return Stopping(ids, self.stop, tokenizer, prompt_ids, self.min_tokens)

    def _stop_ids(self, end_of_text: Iterable[int]) -> set[int]:
        """The ids that end the output: the stop ids and, unless ignore_eos, the model's end-of-text ids."""
        return set(self.stop_token_ids) | (set() if self.ignore_eos else set(end_of_text))


SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))


def _number(params: SamplingParams, name: str, lo: float, hi: float, bounds: str, lo_open: bool = False) -> None:
    """Check a real-valued field is in its interval (``bounds`` says it in words) and store it as a float."""
    v = getattr(params, name)
    if type(v) not in (int, float) or not (lo < v if lo_open else lo <= v) or not v <= hi or v == math.inf:
        if type(v) not in (int, float) or not math.isfinite(v):
            raise ConfigError(f"{name} must be a finite number, got {v!r}")
        raise ConfigError(f"{name} must be in {bounds}, got {v!r}")
    object.__setattr__(params, name, float(v))


def _bias(bias) -> tuple[tuple[int, float], ...]:
    """logit_bias as sorted (token id, bias) pairs, each checked."""
    if bias is None:
        return ()
    pairs = bias.items() if isinstance(bias, Mapping) else bias
    out = {}
    for t, b in pairs:
        if not is_int(t, 0):
            raise ConfigError(f"logit_bias keys must be token ids (integers >= 0), got {t!r}")
        if not is_number(b, -100, 100):
            raise ConfigError(f"logit_bias values must be numbers in [-100, 100], got {b!r} for token {t}")
        out[t] = float(b)
    return tuple(sorted(out.items()))
