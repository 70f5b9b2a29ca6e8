"""The OpenAI-compatible ASGI app over an :class:`~specpar.entrypoints.engine.Engine` (FastAPI), and running it (uvicorn).

    app = create_app(engine, model_name="specpar-sim", api_key=None, max_queue=64)
    serve(app, "127.0.0.1", 8000)

Requests take turns, first come first served (an asyncio lock, which is FIFO), each generated on a worker
thread so the event loop keeps answering; at most ``max_queue`` wait behind the running one, more get 429.
A streamed request whose client goes away closes its engine stream, which ends the generation at the next
verified tokens, and the next request starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException

from specpar.core.errors import ConfigError, SpecparError
from specpar.entrypoints.engine import Engine
from specpar.entrypoints.server.metrics import Metrics
from specpar.entrypoints.server.schemas import (
    ERROR_TYPES,
    RequestError,
    error_body,
    id_text,
    parse_id_text,
    read_request,
)

log = logging.getLogger(__name__)


class Served:
    """The engine's target as the API sees it: prompt encoding, chat template, context window, output text."""

    def __init__(self, engine: Engine, max_model_len: int | None = None):
        self.engine = engine
        model = engine.target_model
        self.tokenizer = engine.tokenizer
        self.vocab_size = getattr(model, "vocab_size", None)
        self.max_model_len = getattr(model, "context_window", None) or max_model_len

    def prompt_ids(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                return self.check_ids(parse_id_text(prompt, "prompt"), "prompt")
            return self.engine.target_model.encode(prompt)
        return self.check_ids(prompt, "prompt")

    def chat_ids(self, messages: list[dict]) -> list[int]:
        """The messages in the target's chat template, ending where the assistant speaks; without a
        tokenizer, the id text of every message's content, one after the other."""
        if self.tokenizer is None:
            return self.check_ids([t for m in messages for t in parse_id_text(m["content"], "messages")], "messages")
        if not getattr(self.tokenizer, "chat_template", None):
            raise RequestError("this model's tokenizer has no chat template: use /v1/completions", "messages")
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.engine.target_model.encode(text)

    def check_ids(self, ids: list[int], param: str) -> list[int]:
        if self.vocab_size is not None and any(t < 0 or t >= self.vocab_size for t in ids):
            raise RequestError(f"token ids must be in [0, {self.vocab_size})", param)
        return list(ids)

    def check_length(self, prompt_len: int, max_tokens: int) -> None:
        if self.max_model_len is not None and prompt_len + max_tokens > self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} for the completion).",
                "max_tokens",
                code="context_length_exceeded",
            )
        try:
            self.engine.check_length(prompt_len, max_tokens)
        except ConfigError as exc:
            raise RequestError(str(exc), "max_tokens", code="context_length_exceeded") from None

    def text(self, piece) -> str:
        """A streamed piece (text, or token ids without a tokenizer) as text."""
        return piece if isinstance(piece, str) else id_text(piece)


def create_app(
    engine: Engine,
    model_name: str = "specpar",
    *,
    api_key: str | None = None,
    max_queue: int = 64,
    max_model_len: int | None = 2048,
) -> FastAPI:
    """The ASGI app serving ``engine`` as ``model_name``; it closes the engine when it shuts down.

    api_key: the /v1 routes ask for ``Authorization: Bearer <api_key>`` (None: open).
    max_queue: requests that may wait behind the running one; more are answered 429.
    max_model_len: prompt + max_tokens limit for a target without a context window of its own.
    """
    served = Served(engine, max_model_len)
    metrics = Metrics({s.name for s in engine.targets.servers}, engine.sp_degree)
    turn = asyncio.Lock()  # FIFO: requests generate in the order they arrived
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        yield
        await anyio.to_thread.run_sync(engine.close)  # after the running request, if any
        log.info("stopped: requests finished, engine closed")

    app = FastAPI(title="specpar", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.engine, app.state.metrics = engine, metrics

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        metrics.count(request.url.path, str(exc.status))
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):  # unknown routes (404), wrong methods (405)
        return JSONResponse(error_body(str(exc.detail), ERROR_TYPES.get(exc.status_code, "invalid_request_error")),
                            status_code=exc.status_code)  # fmt: skip

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception):  # a bug or a failed server: still OpenAI's body
        metrics.count(request.url.path, "500")
        return JSONResponse(error_body(f"{type(exc).__name__}: {exc}", "server_error"), status_code=500)

    def check_key(request: Request) -> None:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            raise RequestError("Incorrect or missing API key (Authorization: Bearer <key>).", status=401,
                               code="invalid_api_key")  # fmt: skip

    async def body_of(request: Request):
        check_key(request)
        try:
            return json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"malformed JSON in the request body: {exc}") from None

    @app.get("/health")
    async def health():
        return PlainTextResponse("ok")

    @app.get("/metrics")
    async def get_metrics():
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models(request: Request):
        check_key(request)
        card = {"id": model_name, "object": "model", "created": created, "owned_by": "specpar",
                "max_model_len": served.max_model_len}  # fmt: skip
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await answer(request, chat=True)

    @asynccontextmanager
    async def taking_turn():
        """The engine, first come first served: counted waiting, then running, whatever ends the request."""
        metrics.waiting += 1
        try:
            await turn.acquire()
        finally:
            metrics.waiting -= 1
        metrics.running += 1
        try:
            yield
        finally:
            metrics.running -= 1
            turn.release()

    async def answer(request: Request, chat: bool):
        arrival = time.perf_counter()
        req = read_request(await body_of(request), served, model_name, chat)
        if req.params.stop and served.tokenizer is None:
            raise RequestError("stop strings need a model with a tokenizer: use stop_token_ids", "stop")
        if metrics.waiting + metrics.running > max_queue:  # the running one and max_queue waiting
            raise RequestError(f"the server's queue is full ({max_queue} waiting): retry later", status=429,
                               code="queue_full")  # fmt: skip
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        shape = Shape(rid, model_name, chat, created=int(time.time()))
        if req.stream:
            return StreamingResponse(stream(request, req, shape, arrival), media_type="text/event-stream")
        first: list[float] = []

        def work():
            r = engine.generate(req.prompt_ids, req.params, stream=lambda _: first or first.append(time.perf_counter()))
            _ = r.timeline  # built here, not on the event loop (the metrics read it)
            return r

        try:
            async with taking_turn():
                result = await anyio.to_thread.run_sync(work)
        except SpecparError as exc:
            raise RequestError(str(exc), status=400 if isinstance(exc, ConfigError) else 500) from None
        ttft = first[0] - arrival if first else None
        metrics.observe(request.url.path, len(req.prompt_ids), result, time.perf_counter() - arrival, ttft)
        text = result.text if result.text is not None else id_text(result.tokens)
        return shape.whole(text, result, len(req.prompt_ids))

    async def stream(request: Request, req, shape: Shape, arrival: float):
        """Server-sent events: a chunk per verified piece, the finish reason, usage if asked, [DONE]."""
        async with taking_turn():
            pieces = engine.stream(req.prompt_ids, req.params)
            result, ttft, errored = None, None, False
            try:
                if shape.chat:
                    yield shape.event(shape.chunk({"role": "assistant", "content": ""}))
                while True:
                    done, value = await anyio.to_thread.run_sync(_next, pieces)
                    if done:
                        result = value
                        break
                    if ttft is None:
                        ttft = time.perf_counter() - arrival
                    yield shape.event(shape.chunk(served.text(value)))
                    if await request.is_disconnected():
                        break
            except Exception as exc:  # after the 200 went out: an error event, then the end
                errored = True
                kind = "invalid_request_error" if isinstance(exc, ConfigError) else "server_error"
                metrics.count(request.url.path, "error")
                yield shape.event(error_body(str(exc), kind))
                yield "data: [DONE]\n\n"
            finally:
                with anyio.CancelScope(shield=True):  # a client gone cancels us: still end the generation
                    await anyio.to_thread.run_sync(pieces.close)
            if result is None:  # the client left (or the generation failed: counted above)
                if not errored:
                    metrics.count(request.url.path, "abort")
                return
            metrics.observe(request.url.path, len(req.prompt_ids), result, time.perf_counter() - arrival, ttft)
            yield shape.event(shape.chunk(None if shape.chat else "", result.finish_reason))
            if req.include_usage:
                yield shape.event(shape.usage_chunk(result, len(req.prompt_ids)))
            yield "data: [DONE]\n\n"

    return app


def _next(iterator):
    """(False, the next item) or (True, the generator's return value)."""
    try:
        return False, next(iterator)
    except StopIteration as stop:
        if stop.value is not None:
            _ = stop.value.timeline  # built on this worker thread, not on the event loop (the metrics read it)
        return True, stop.value


class Shape:
    """The OpenAI response bodies of one request: whole, or as stream chunks."""

    def __init__(self, rid: str, model: str, chat: bool, created: int):
        self.rid, self.model, self.chat, self.created = rid, model, chat, created
        self.object = "chat.completion" if chat else "text_completion"

    def head(self, object: str) -> dict:
        return {"id": self.rid, "object": object, "created": self.created, "model": self.model}

    @staticmethod
    def usage(result, prompt_len: int) -> dict:
        n = len(result.tokens)
        return {"prompt_tokens": prompt_len, "completion_tokens": n, "total_tokens": prompt_len + n}

    def whole(self, text: str, result, prompt_len: int) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = result.finish_reason
        choice["token_ids"] = result.tokens  # vLLM's extension: the output's token ids
        return {**self.head(self.object), "choices": [choice], "usage": self.usage(result, prompt_len)}

    def chunk(self, piece, finish_reason: str | None = None) -> dict:
        if self.chat:
            delta = piece if isinstance(piece, dict) else {} if piece is None else {"content": piece}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return {**self.head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish_reason}
        return {**self.head("text_completion"), "choices": [choice]}

    def usage_chunk(self, result, prompt_len: int) -> dict:
        object = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self.head(object), "choices": [], "usage": self.usage(result, prompt_len)}

    @staticmethod
    def event(data: dict) -> str:
        return f"data: {json.dumps(data)}\n\n"


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, shutdown_timeout: float = 30.0) -> None:
    """Run ``app`` with uvicorn until SIGINT/SIGTERM: then it stops accepting, lets in-flight requests finish
    for up to ``shutdown_timeout`` seconds, and closes the engine."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=shutdown_timeout)
    uvicorn.Server(config).run()
