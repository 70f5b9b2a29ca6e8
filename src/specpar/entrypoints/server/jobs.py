"""A validated OpenAI request read into the generations it asks for: one :class:`Job` per choice.

Choices are numbered as OpenAI does: prompt i's sample j is choice ``i * n + j``. Sample j of a seeded request
has seed ``seed + j`` (so n = 1 reproduces the seed itself); without a seed every sample draws a fresh one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specpar.core.errors import ConfigError
from specpar.core.model import as_model
from specpar.core.params import SamplingParams
from specpar.entrypoints.server.schemas import ChatCompletionRequest, CompletionRequest, RequestError
from specpar.entrypoints.server.served import Served

MAX_CHOICES = 64  # generations in one request (prompts x n)
DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's for completions (chat: what fits in the context window)


@dataclass
class Job:
    """One choice to generate: its index, prompt and SamplingParams, and the prompt text it echoes first."""

    index: int
    prompt_ids: list[int]
    params: SamplingParams
    echo: str | None = None


@dataclass
class Plan:
    """Every generation of one request, and how to answer it."""

    chat: bool
    jobs: list[Job]
    n: int = 1  # samples per prompt
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # top tokens per output token; None: no logprobs
    speculative: dict = field(default_factory=dict)  # algorithm, lookahead, sp_degree (SpeculativeConfig's fields)

    @property
    def prompt_tokens(self) -> int:
        """Each prompt's tokens, counted once however many samples it has."""
        return sum(len(j.prompt_ids) for j in self.jobs if j.index % self.n == 0)


def completion_plan(req: CompletionRequest, served: Served) -> Plan:
    """The jobs of a /v1/completions request."""
    many = isinstance(req.prompt, list) and bool(req.prompt) and isinstance(req.prompt[0], (str, list))
    prompts = req.prompt if many else [req.prompt]
    if len(prompts) * req.n > MAX_CHOICES:
        raise RequestError(f"at most {MAX_CHOICES} choices (prompts x n) in one request", "n")
    ids = [served.prompt_ids(p) for p in prompts]
    max_tokens = req.max_tokens or DEFAULT_MAX_TOKENS
    jobs = []
    for i, (prompt, prompt_ids) in enumerate(zip(prompts, ids)):
        echo = (prompt if isinstance(prompt, str) else served.decode(prompt_ids)) if req.echo else None
        for j, params in enumerate(samples(req, served, len(prompt_ids), max_tokens, req.logprobs)):
            jobs.append(Job(i * req.n + j, prompt_ids, params, echo))
    return _plan(req, False, jobs, req.logprobs, served)


def chat_plan(req: ChatCompletionRequest, served: Served) -> Plan:
    """The jobs of a /v1/chat/completions request (one prompt: the messages in the chat template)."""
    prompt_ids = served.chat_ids(req.messages)
    max_tokens = req.max_completion_tokens or req.max_tokens or served.room(len(prompt_ids)) or DEFAULT_MAX_TOKENS
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    jobs = [Job(j, prompt_ids, p) for j, p in enumerate(samples(req, served, len(prompt_ids), max(1, max_tokens),
                                                                logprobs))]  # fmt: skip
    return _plan(req, True, jobs, logprobs, served)


def check_exact_field(exact: bool | None, engine_exact: bool | None) -> None:
    """A request's ``exact`` against the mode the server's models run in (``serve --no-exact``: the fast mode):
    exact=false is always honoured (an exact output is one the fast mode may give), exact=true refused (400) in the
    fast mode (loading the weights again in the other mode would take seconds and a second copy's memory)."""
    if exact and engine_exact is False:
        raise RequestError(
            "exact=true: this server's models run llama.cpp's fast mode (serve --no-exact), whose greedy outputs may "
            "differ from the target's own; ask without exact, or send it to a server started without --no-exact",
            "exact",
        )


def _plan(req, chat: bool, jobs: list[Job], logprobs, served: Served) -> Plan:
    check_exact_field(req.exact, as_model(served.engine.target_model).exact_mode)
    options = req.stream_options
    if options is not None and not req.stream:
        raise RequestError("stream_options is only allowed when stream is true", "stream_options")
    spec = req.speculative
    speculative = {} if spec is None else {k: v for k, v in spec.model_dump().items() if v is not None}
    try:
        request_spec = served.engine.spec.for_request(**speculative)
    except ConfigError as exc:  # fields that do not go together (an n-gram proposer for non-SI)
        raise RequestError(str(exc), "speculative") from None
    if served.engine.drafters is None and request_spec.uses_drafter:
        raise RequestError("this server has no drafter: only algorithm 'nonsi', or proposer 'ngram'", "speculative")
    sp = speculative.get("sp_degree")
    if sp is not None and sp > served.engine.sp_degree:
        raise RequestError(f"speculative.sp_degree is at most the server's, {served.engine.sp_degree}", "speculative")
    return Plan(chat, jobs, req.n, bool(req.stream), bool(options and options.include_usage), logprobs, speculative)


def samples(req, served: Served, prompt_len: int, max_tokens: int, logprobs: int | None) -> list[SamplingParams]:
    """The SamplingParams of a prompt's ``req.n`` samples (checked against the model: stop strings, the context
    window, logit_bias' token ids)."""
    if req.stop and served.tokenizer is None:
        raise RequestError("stop strings need a model with a tokenizer: use stop_token_ids", "stop")
    bias = None
    if req.logit_bias:
        bias = dict(zip(served.check_ids([int(k) for k in req.logit_bias], "logit_bias"), req.logit_bias.values()))
    served.check_length(prompt_len, max_tokens)
    given = {k: getattr(req, k) for k in OPTIONAL if getattr(req, k) is not None}
    out = []
    for j in range(req.n):
        seed = None if req.seed is None else (req.seed + j) % 2**63
        try:
            out.append(SamplingParams(**given, logit_bias=bias, max_tokens=max_tokens, min_tokens=req.min_tokens,
                                      ignore_eos=req.ignore_eos, seed=seed, logprobs=logprobs, coupling=req.coupling,
                                      include_stop_str_in_output=req.include_stop_str_in_output))  # fmt: skip
        except ConfigError as exc:
            raise RequestError(str(exc), _param_named(str(exc))) from None
    return out


# request fields passed to SamplingParams as they are when given (left out: SamplingParams' default, vLLM's)
OPTIONAL = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
            "stop", "stop_token_ids")  # fmt: skip


def _param_named(message: str) -> str | None:
    """The request field a SamplingParams error names (its message starts with the field's name)."""
    for name in (*OPTIONAL, "min_tokens", "max_tokens", "logit_bias", "seed"):
        if message.startswith(name):
            return name
    return None
