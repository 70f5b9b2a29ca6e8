"""OpenAI request bodies read into a prompt and SamplingParams, and OpenAI-style error bodies.

Requests are plain JSON objects checked field by field here (not pydantic models), so that every refusal
names its field the way OpenAI's API does: ``{"error": {"message", "type", "param", "code"}}``.

A target without a tokenizer (a simulated model) reads and writes *id text*: its text is its token ids in
decimal, each preceded by a space (" 4 17 3"), so a prompt is a list of ids or such a string, streamed pieces
join to the whole output, and a chat prompt is its messages' ids one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from specpar.core.errors import ConfigError
from specpar.core.params import SamplingParams


class RequestError(Exception):
    """A request the server refuses: its HTTP status and the OpenAI error body's fields."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    @property
    def type(self) -> str:
        return ERROR_TYPES.get(self.status, "invalid_request_error")

    def body(self) -> dict:
        return error_body(str(self), self.type, self.param, self.code)


ERROR_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error", 500: "server_error"}


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass
class Request:
    """One generation asked for: the prompt's token ids, its SamplingParams, and how to answer."""

    prompt_ids: list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage


# Fields an OpenAI client may send that change nothing here when left at these values; any other value is refused
NEUTRAL = {
    "n": (1, None),
    "best_of": (1, None),
    "echo": (False, None),
    "logprobs": (None, False, 0),
    "top_logprobs": (None, 0),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logit_bias": (None,),
    "suffix": (None,),
    "tools": (None,),
    "tool_choice": (None, "none"),
    "functions": (None,),
    "function_call": (None, "none"),
    "response_format": (None,),
    "parallel_tool_calls": (None,),
}
IGNORED = {"model", "user", "stream", "stream_options", "prompt", "messages", "metadata", "store", "service_tier"}
# OpenAI's and vLLM's names of SamplingParams fields: (the field, the JSON types accepted)
SAMPLING = {
    "max_tokens": ("max_tokens", (int,)),
    "max_completion_tokens": ("max_tokens", (int,)),
    "temperature": ("temperature", (int, float)),
    "top_p": ("top_p", (int, float)),
    "top_k": ("top_k", (int,)),
    "min_p": ("min_p", (int, float)),
    "repetition_penalty": ("repetition_penalty", (int, float)),
    "seed": ("seed", (int,)),
    "stop": ("stop", (str, list)),
    "stop_token_ids": ("stop_token_ids", (list,)),
    "ignore_eos": ("ignore_eos", (bool,)),
}
DEFAULTS = {"max_tokens": 16, "temperature": 1.0}  # OpenAI's defaults


def read_request(body, served, model_name: str, chat: bool) -> Request:
    """The Request in an OpenAI /v1/completions (``chat`` False) or /v1/chat/completions body.

    served: the :class:`~specpar.entrypoints.server.app.Served` model (prompt encoding, chat template, context window).
    """
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise RequestError(f"The model `{model}` does not exist.", "model", 404, "model_not_found")
    for name, value in body.items():
        if name in NEUTRAL:
            if value not in NEUTRAL[name]:
                raise RequestError(f"{name}={value!r} is not supported by this server", name)
        elif name not in SAMPLING and name not in IGNORED:
            raise RequestError(f"unsupported field {name!r}", name)
    sampling = dict(DEFAULTS)
    for name, (field, types) in SAMPLING.items():
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            kinds = " or ".join({int: "an integer", float: "a number", str: "a string", list: "a list"}.get(t, t.__name__)
                                for t in types)  # fmt: skip
            raise RequestError(f"{name} must be {kinds}, got {value!r}", name)
        sampling[field] = value
    stream = _flag(body, "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", "stream_options")
    include_usage = _flag(options, "include_usage")
    prompt_ids = served.chat_ids(_messages(body)) if chat else served.prompt_ids(_prompt(body))
    if not prompt_ids:
        raise RequestError("the prompt is empty: give at least one token", "messages" if chat else "prompt")
    try:
        params = SamplingParams.from_kwargs(**sampling)
    except ConfigError as exc:
        raise RequestError(str(exc), _param_named(str(exc), body)) from None
    served.check_length(len(prompt_ids), params.max_tokens)
    return Request(prompt_ids, params, stream, include_usage)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be true or false, got {value!r}", name)
    return value


def _prompt(body: dict):
    """The one prompt of a completions body: a string or a list of token ids (or a list holding one of those)."""
    if "prompt" not in body:
        raise RequestError("prompt is required", "prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # the batch form with one prompt
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if prompt and isinstance(prompt[0], list):
            raise RequestError("give one prompt per request (a batch of prompts is not supported)", "prompt")
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        raise RequestError("give one prompt per request (a batch of prompts is not supported)", "prompt")
    raise RequestError("prompt must be a string or a list of token ids (integers)", "prompt")


def _messages(body: dict) -> list[dict]:
    """The chat messages, each {"role": str, "content": str} (content parts of type "text" are joined)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string role", "messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: only text ones
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):  # fmt: skip
                raise RequestError(f"messages[{i}].content: only text parts are supported", "messages")
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string", "messages")
        out.append({"role": m["role"], "content": content})
    return out


def _param_named(message: str, body: dict) -> str | None:
    """The request field a SamplingParams error names (its message starts with the field's name)."""
    for name, (field, _) in SAMPLING.items():
        if message.startswith(field) and name in body:
            return name
    return None


def id_text(ids) -> str:
    """Token ids as id text: " 4 17 3"."""
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
