"""The OpenAI-compatible ASGI app over an :class:`~specpar.entrypoints.engine.Engine` (FastAPI), and running it
(uvicorn): ``serve(create_app(engine, model_name="specpar-sim"), "127.0.0.1", 8000)``.

Routes: POST /v1/completions and /v1/chat/completions (:mod:`.handlers`), GET /v1/models, POST /tokenize and
/detokenize (vLLM's), GET /version, /health, /metrics and /openapi.json. Every refusal is OpenAI's error body with
the field in ``param``; bodies over ``max_body_bytes`` get 413, bodies nested too deep to parse 400.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from specpar import __version__
from specpar.entrypoints.engine import Engine
from specpar.entrypoints.server import handlers
from specpar.entrypoints.server.admission import Admission
from specpar.entrypoints.server.jobs import chat_plan, completion_plan
from specpar.entrypoints.server.metrics import CONTENT_TYPE, Metrics
from specpar.entrypoints.server.schemas import (
    ERROR_TYPES,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    RequestError,
    TokenizeRequest,
    error_body,
    param_of,
)
from specpar.entrypoints.server.served import Served

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 << 20
ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize")
ERRORS = {400: {"description": "A refused request (OpenAI's error body; the field in error.param)"},
          401: {"description": "A missing or wrong API key"}, 404: {"description": "An unknown model"},
          429: {"description": "The server is full: retry later"}}  # fmt: skip


def create_app(
    engine: Engine,
    model_name: str = "specpar",
    *,
    api_key: str | None = None,
    max_queue: int = 64,
    max_model_len: int | None = 2048,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    """The ASGI app serving ``engine`` as ``model_name``; it closes the engine when it shuts down.

    api_key: the /v1 routes, /tokenize and /detokenize ask for ``Authorization: Bearer <api_key>`` (None: open).
    max_queue: requests in the server at once (:mod:`.admission`; more are answered 429). max_model_len: the prompt +
    max_tokens limit of a target without a context window of its own. max_body_bytes: larger bodies are answered 413.
    """
    metrics = Metrics(model_name, {s.name for s in engine.targets.servers}, engine.sp_degree, engine.load_metrics)
    ctx = handlers.Context(engine, Served(engine, max_model_len), metrics, Admission(max_queue), model_name,
                           int(time.time()))  # fmt: skip

    @asynccontextmanager
    async def lifespan(app):
        yield
        await anyio.to_thread.run_sync(engine.close)  # after the running requests, if any
        log.info("stopped: requests finished, engine closed")

    app = FastAPI(title="specpar", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.state.engine, app.state.metrics, app.state.context = engine, metrics, ctx
    add_error_handlers(app, metrics)
    app.include_router(open_routes(ctx))
    app.include_router(model_routes(ctx), dependencies=[Depends(key_check(api_key))], responses=ERRORS)
    return app


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 (OpenAI's error body) when its
    Content-Length says so, and fails to parse (400) when a chunked body runs past it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_bytes:
            message = f"the request body is over {self.max_bytes} bytes" if length.isdigit() else "bad Content-Length"
            response = JSONResponse(error_body(message, "invalid_request_error"), status_code=413)
            return await response(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise RequestError(f"the request body is over {self.max_bytes} bytes", status=413)
            return message

        await self.app(scope, counted, send)


def key_check(api_key: str | None):
    """A dependency that refuses a request without ``Authorization: Bearer <api_key>`` (401)."""

    def check(request: Request) -> None:
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            raise RequestError("Incorrect or missing API key (Authorization: Bearer <key>).", status=401,
                               code="invalid_api_key")  # fmt: skip

    return check


def open_routes(ctx: handlers.Context) -> APIRouter:
    """The routes without a key: health, version, metrics."""
    router = APIRouter()

    @router.get("/health")
    async def health() -> Response:
        return Response("ok", media_type="text/plain")

    @router.get("/version")
    async def version() -> dict:
        return {"version": __version__}

    @router.get("/metrics")
    async def metrics() -> Response:
        return Response(ctx.metrics.text(), media_type=CONTENT_TYPE)

    return router


def model_routes(ctx: handlers.Context) -> APIRouter:
    """The routes that reach the model (behind the API key)."""
    router, served = APIRouter(), ctx.served

    @router.get("/v1/models")
    async def models() -> dict:
        card = {"id": ctx.model_name, "object": "model", "created": ctx.created, "owned_by": "specpar",
                "max_model_len": served.max_model_len}  # fmt: skip
        return {"object": "list", "data": [card]}

    async def generate(body, request: Request, plan, endpoint: str):
        arrival = time.perf_counter()
        check_model(body.model, ctx.model_name)
        return await handlers.answer(ctx, request, plan(body, served), endpoint, arrival)

    @router.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await generate(body, request, completion_plan, "/v1/completions")

    @router.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        return await generate(body, request, chat_plan, "/v1/chat/completions")

    @router.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict:
        check_model(body.model, ctx.model_name)
        if body.prompt is not None:
            ids = served.prompt_ids(body.prompt) if body.prompt else []
        else:
            ids = served.chat_ids(body.messages, body.add_generation_prompt)
        return {"count": len(ids), "max_model_len": served.max_model_len, "tokens": ids}

    @router.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict:
        check_model(body.model, ctx.model_name)
        return {"prompt": served.decode(served.check_ids(body.tokens, "tokens"))}

    return router


def check_model(model: str | None, model_name: str) -> None:
    if model is not None and model != model_name:
        raise RequestError(f"The model `{model}` does not exist.", "model", 404, "model_not_found")


def add_error_handlers(app: FastAPI, metrics: Metrics) -> None:
    """Every error as OpenAI's body, counted by endpoint and status."""

    def reply(request: Request, status: int, body: dict) -> JSONResponse:
        path = request.url.path
        metrics.error(path if path in ENDPOINTS else "other", status)
        return JSONResponse(body, status_code=status)

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        return reply(request, exc.status, exc.body())

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        param = param_of(first)
        message = first.get("msg", "invalid request").removeprefix("Value error, ")
        if first.get("type") == "json_invalid":
            param, message = None, f"malformed JSON in the request body: {first.get('ctx', {}).get('error')}"
        elif param is None and first.get("type") == "missing":
            message = "the request body must be a JSON object"
        if param is None and not _json_media(request.headers.get("content-type")):
            given = request.headers.get("content-type") or "none"
            message = f"the request body must be JSON sent with Content-Type: application/json (got {given})"
        body = error_body(f"{param}: {message}" if param else message, "invalid_request_error", param)
        return reply(request, 400, body)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):  # unknown routes, wrong methods, bodies too large
        kind = ERROR_TYPES.get(exc.status_code, "invalid_request_error")
        return reply(request, exc.status_code, error_body(str(exc.detail), kind))

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception):  # a bug or a failed server: still OpenAI's body
        log.exception("request failed")
        return reply(request, 500, error_body(f"{type(exc).__name__}: {exc}", "server_error"))


def _json_media(content_type: str | None) -> bool:
    """Whether FastAPI parses a body with this Content-Type as JSON (application/json, a +json type; not none)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, shutdown_timeout: float = 30.0, sock=None) -> None:
    """Run ``app`` with uvicorn until SIGINT/SIGTERM: then it stops accepting, lets in-flight requests finish
    for up to ``shutdown_timeout`` seconds, ends those left as OpenAI errors (:mod:`.shutdown`), and closes the
    engine. sock: a socket already bound to the address, to listen on (host and port are then its)."""
    import uvicorn

    from specpar.entrypoints.server.shutdown import server

    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server(config, app.state.context.shutdown, shutdown_timeout).run(sockets=None if sock is None else [sock])
