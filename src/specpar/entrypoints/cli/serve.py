"""``specpar serve``: the Engine behind an OpenAI-compatible HTTP API (completions, chat, streaming, metrics)."""

from __future__ import annotations

import argparse
import os
import socket

from specpar.core.errors import ConfigError
from specpar.entrypoints.cli.options import MAX_INTEGER, integer, number

DESCRIPTION = """\
Serve a target and drafter over HTTP with the OpenAI API: POST /v1/completions,
POST /v1/chat/completions (stream: true gives server-sent events), GET /v1/models,
/health and /metrics (Prometheus text, vLLM's spec-decode counter names). Requests
are served one at a time, first come first served; past --max-queue in the server
(generating or waiting), 429. POST /tokenize and /detokenize, GET /version.
--simulated serves simulated models without weights: their text is token ids in
decimal separated by spaces (prompts: a list of ids, or such a string).
"""


MAX_SERVE_SERVERS = 64  # target servers (threads on the threads runtime; a KV cache each on real models)


def ranged(kind, lo, hi=None, what: str | None = None):
    """An argparse type: an integer or a finite number (``kind`` int or float) in [lo, hi], else one line."""

    def parse(text: str):
        value = integer(text) if kind is int else number(text)
        if value < lo or (hi is not None and value > hi):
            bounds = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise argparse.ArgumentTypeError(f"{what or 'must be'} {bounds}, got {text!r}")
        return value

    return parse


def api_key(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an API key must not be empty (leave --api-key out to serve without one)")
    return text


def register(sub) -> None:
    from specpar.entrypoints.cli import real_models

    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--algorithm", "--algo", dest="algo", choices=("nonsi", "si", "dsi"), default="dsi",
                   help="algorithm (default dsi)")  # fmt: skip
    p.add_argument("-k", "--lookahead", type=ranged(int, 1, 64), default=5,
                   help="draft tokens per verification (default 5)")  # fmt: skip
    p.add_argument("--sp-degree", type=ranged(int, 1, MAX_SERVE_SERVERS), default=2, help="target servers (default 2)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=ranged(int, 1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--api-key", type=api_key, default=None,
                   help="require 'Authorization: Bearer KEY' (default: env SPECPAR_API_KEY)")  # fmt: skip
    p.add_argument("--max-queue", type=ranged(int, 1, 1 << 20), default=64,
                   help="requests in the server at once (generating or waiting); more get 429 (default 64)")  # fmt: skip
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the target's)")
    p.add_argument("--max-model-len", type=ranged(int, 1, MAX_INTEGER), default=2048,
                   help="prompt + max_tokens limit for a target without a context window (default 2048)")  # fmt: skip
    p.add_argument("--shutdown-timeout", type=ranged(float, 0, 86400), default=30.0,
                   help="seconds in-flight requests may take to finish on SIGTERM (default 30)")  # fmt: skip
    g = p.add_argument_group("simulated models")
    g.add_argument("--simulated", action="store_true", help="serve simulated models (no weights)")
    g.add_argument("--vocab", type=ranged(int, 2, 1 << 16), default=32, help="simulated vocabulary size (default 32)")
    g.add_argument("--acceptance", type=ranged(float, 0, 1), default=0.8,
                   help="simulated drafter acceptance rate (default 0.8)")  # fmt: skip
    g.add_argument("--target-ms", type=ranged(float, 0, 60000), default=2.0,
                   help="simulated target forward pass, ms (default 2)")  # fmt: skip
    g.add_argument("--drafter-ms", type=ranged(float, 0, 60000), default=0.2,
                   help="simulated drafter forward pass, ms (default 0.2)")  # fmt: skip
    real_models.add_model_args(p)
    p.set_defaults(func=run)


def build_engine(args):
    """The Engine that ``args`` describe: simulated models on the threads runtime (wall time), or a real pair."""
    from specpar import Engine, LatencyProfile, SimulatedModel

    common = dict(sp_degree=args.sp_degree, algorithm=args.algo, lookahead=args.lookahead)
    if args.simulated:
        target = SimulatedModel(args.vocab, seed=0, latency=LatencyProfile.uniform(args.target_ms))
        drafter = target.drafter(args.acceptance, LatencyProfile.uniform(args.drafter_ms))
        return Engine(target, drafter, runtime="threads", **common), "specpar-simulated"
    from specpar.entrypoints.cli.real_models import devices

    engine = Engine(args.target, args.drafter, devices=devices(args), dtype=args.dtype, **common)
    return engine, args.target or engine.target_model.name


def check(args) -> str | None:
    """What the flags leave to check before anything loads; returns the API key (None: open)."""
    if args.simulated and (args.target or args.drafter):
        raise ConfigError("give either --simulated or --target/--drafter, not both")
    key = args.api_key if args.api_key is not None else os.environ.get("SPECPAR_API_KEY")
    if key is not None and not key.strip():
        raise ConfigError("SPECPAR_API_KEY is set but empty: unset it to serve without a key")
    try:  # the address, before the model loads (uvicorn binds it again once the engine is up)
        family = socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((args.host, args.port))
    except OSError as exc:
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return key


def run(args) -> int:
    try:
        from specpar.entrypoints.server.app import create_app, serve
    except ImportError as exc:
        raise ConfigError(
            f"specpar serve needs FastAPI, uvicorn, pydantic and prometheus_client: pip install 'specpar[serve]' ({exc})"
        ) from None
    api_key = check(args)
    engine, name = build_engine(args)
    app = create_app(engine, args.served_model_name or name, api_key=api_key, max_queue=args.max_queue,
                     max_model_len=args.max_model_len)  # fmt: skip
    print(f"specpar serve: {name} on http://{args.host}:{args.port}/v1 ({args.algo}, sp_degree {args.sp_degree})",
          flush=True)  # fmt: skip
    serve(app, args.host, args.port, args.shutdown_timeout)
    return 0
