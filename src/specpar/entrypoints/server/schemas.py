"""The OpenAI request bodies as pydantic models, and OpenAI-style error bodies.

Fields OpenAI refuses are refused (``extra="forbid"``), values checked strictly (``"8"`` is not a number); a refusal's
``param`` is the field pydantic names (:func:`param_of`). Fields a client may send that this server cannot honour
are declared and refused with a reason unless neutral. Beside vLLM's extra sampling fields, specpar's own:
``coupling`` ("rejection" or "gumbel", :mod:`specpar.core.decoding`; default "gumbel" with a seed, so that a seed
reproduces for every algorithm), ``speculative`` (per-request speculation, like llama.cpp's ``speculative.n_max``)
and ``exact`` (:func:`specpar.entrypoints.server.jobs.check_exact_field`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MAX_N = 16  # samples per prompt (n)
MAX_LOGPROBS = 20  # top log-probabilities per token (vLLM's default max_logprobs)
MAX_PROMPTS = 64  # prompts in one completions request


class RequestError(Exception):
    """A request the server refuses: its HTTP status and the OpenAI error body's fields."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def body(self) -> dict:
        return error_body(str(self), ERROR_TYPES.get(self.status, "invalid_request_error"), self.param, self.code)


ERROR_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
               503: "server_error"}  # fmt: skip


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def param_of(error: dict) -> str | None:
    """The request field a pydantic error names: the first key of its location after "body"."""
    loc = [x for x in error.get("loc", ()) if x != "body"]
    return loc[0] if loc and isinstance(loc[0], str) else None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Speculative(Strict):
    """Per-request speculation (each field: the server's own when left out)."""

    algorithm: Literal["nonsi", "si", "dsi", "auto"] | None = None
    lookahead: Annotated[int, Field(ge=1, le=64)] | None = None
    sp_degree: Annotated[int, Field(ge=1)] | None = None
    proposer: str | None = None  # "drafter", "ngram[:MIN:MAX]", either with "+drafter" (SpeculativeConfig.proposer)

    @field_validator("proposer")
    @classmethod
    def _proposer(cls, value):
        from specpar.core.config import parse_proposer
        from specpar.core.errors import ConfigError

        if value is None:
            return value
        try:
            return str(parse_proposer(value))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


class StreamOptions(Strict):
    include_usage: bool | None = False
    continuous_usage_stats: Literal[False] | None = None


def _refused(reason: str, neutral=(None,)):
    """A field validator that refuses any value but the neutral ones, with ``reason``."""

    def check(cls, value):
        if value not in neutral:
            raise ValueError(reason)
        return value

    return check


class SamplingRequest(Strict):
    """What completions and chat share: vLLM's sampling and stopping fields, streaming, specpar's extras."""

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=100)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0, le=1)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0, le=100)] | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    seed: Annotated[int, Field(ge=0, lt=2**63)] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    ignore_eos: bool = False
    min_tokens: Annotated[int, Field(ge=0)] = 0
    include_stop_str_in_output: bool = False
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    coupling: Literal["rejection", "gumbel"] | None = None
    speculative: Speculative | None = None
    exact: bool | None = None

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys(cls, bias):
        for key in bias or {}:
            if not key.isdigit():
                raise ValueError(f"logit_bias keys must be token ids (strings of integers >= 0), got {key!r}")
        return bias

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop):
        if any(not s for s in ([stop] if isinstance(stop, str) else stop or [])):
            raise ValueError("stop strings must not be empty")
        return stop


class CompletionRequest(SamplingRequest):
    """POST /v1/completions."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool | None = False
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    best_of: Annotated[int, Field(ge=1)] | None = None
    suffix: str | None = None

    _suffix = field_validator("suffix")(_refused("suffix (insertion) is not supported by this server"))

    @field_validator("prompt", mode="wrap")
    @classmethod
    def _prompt(cls, value, handler):
        try:
            prompt = handler(value)
        except ValidationError:
            raise ValueError("prompt must be a string, a list of token ids, or a list of either") from None
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)) and len(prompt) > MAX_PROMPTS:
            raise ValueError(f"at most {MAX_PROMPTS} prompts in one request")
        return prompt

    @model_validator(mode="after")
    def _combinations(self):
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of must equal n (every sample is returned)")
        if self.echo and self.logprobs is not None:
            raise ValueError("echo with logprobs (the prompt's log-probabilities) is not supported")
        return self


class TextPart(Strict):
    type: Literal["text"]
    text: str


Content = str | list[TextPart]


class SystemMessage(Strict):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class UserMessage(Strict):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(Strict):
    """An earlier reply. OpenAI lets ``content`` be null only beside ``tool_calls`` (or ``function_call``), which this
    server does not take: null content is refused (it was read as an empty reply)."""

    role: Literal["assistant"]
    content: Content | None = None
    name: str | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _content(self):
        if self.content is None:
            raise ValueError(
                "an assistant message needs content (null is OpenAI's only beside tool_calls, and tools are not "
                "supported by this server)"
            )
        return self


class ToolMessage(Strict):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]

_TOOLS = "tools and function calling are not supported by this server"


class ChatCompletionRequest(SamplingRequest):
    """POST /v1/chat/completions."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    _tools = field_validator("tools", "functions")(_refused(_TOOLS))
    _choice = field_validator("tool_choice", "function_call")(_refused(_TOOLS, (None, "none")))

    @field_validator("response_format")
    @classmethod
    def _format(cls, fmt):
        if fmt is not None and fmt != {"type": "text"}:
            raise ValueError('response_format: only {"type": "text"} (structured outputs are not supported)')
        return fmt

    @model_validator(mode="after")
    def _combinations(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self


class TokenizeRequest(Strict):
    """POST /tokenize: a prompt, or chat messages (vLLM's)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = None
    add_generation_prompt: bool = True

    @model_validator(mode="after")
    def _one(self):
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either prompt or messages")
        return self


class DetokenizeRequest(Strict):
    """POST /detokenize."""

    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


def id_text(ids) -> str:
    """Token ids as id text (a target without a tokenizer): " 4 17 3"."""
    return "".join(f" {t}" for t in ids)


def parse_id_text(text: str, param: str) -> list[int]:
    """The token ids of id text ("4 17 3"); a RequestError naming ``param`` for anything else."""
    try:
        ids = [int(w) for w in text.split()]
    except ValueError:
        raise RequestError(
            "this model has no tokenizer: give the prompt as token ids, or as id text (ids separated by spaces)",
            param,
        ) from None
    if any(t < 0 for t in ids):
        raise RequestError("token ids must be >= 0", param)
    return ids
