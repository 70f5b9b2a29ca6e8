"""``specpar serve``: the Engine behind an OpenAI-compatible HTTP API (completions, chat, streaming, metrics)."""

from __future__ import annotations

import os

from specpar.core.config import ALGORITHMS, SPECULATIVE_FIELDS
from specpar.core.errors import ConfigError
from specpar.entrypoints.cli.command_args import command_parser
from specpar.entrypoints.cli.pair_args import LATENCY_FIELDS, add_pair_arguments
from specpar.entrypoints.cli.runtime_args import REAL_TIME_FIELDS, add_runtime_arguments

DESCRIPTION = """\
Serve a target and drafter over HTTP with the OpenAI API: POST /v1/completions,
POST /v1/chat/completions (stream: true gives server-sent events), GET /v1/models,
/health and /metrics (Prometheus text, vLLM's spec-decode counter names). Requests
are served one at a time, first come first served; past --max-queue waiting, 429.
--simulated serves simulated models without weights: their text is token ids in
decimal separated by spaces (prompts: a list of ids, or such a string).
"""


def register(sub) -> None:
    from specpar.entrypoints.cli import real_models

    p = command_parser(sub, "serve", "an OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)",
                       DESCRIPTION)  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: env SPECPAR_API_KEY)")
    p.add_argument("--max-queue", type=int, default=64, help="requests that may wait; more get 429 (default 64)")
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the target's)")
    p.add_argument("--max-model-len", type=int, default=2048,
                   help="prompt + max_tokens limit for a target without a context window (default 2048)")  # fmt: skip
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds in-flight requests may take to finish on SIGTERM (default 30)")  # fmt: skip
    real_models.add_speculation_arguments(p, fields=SPECULATIVE_FIELDS, algorithms=ALGORITHMS)
    add_runtime_arguments(p, choices=("threads", "ray"), default="threads", fields=REAL_TIME_FIELDS)
    g = p.add_argument_group("simulated models")
    g.add_argument("--simulated", action="store_true", help="serve simulated models (no weights)")
    add_pair_arguments(g, fields=(*LATENCY_FIELDS, "acceptance_rate", "vocab_size", "seed"),
                       defaults={"target_tpot_ms": 2.0, "vocab_size": 32}, title=None)  # fmt: skip
    real_models.add_model_args(p)
    p.set_defaults(func=run)


def build_engine(args):
    """The Engine that ``args`` describe: simulated models on the threads runtime (wall time), or a real pair."""
    from specpar import Engine
    from specpar.spec.registry import ALGORITHMS as REGISTRY

    if args.port < 1:
        raise ConfigError(f"--port must be >= 1, got {args.port}")
    if args.max_queue < 0:
        raise ConfigError(f"--max-queue must be >= 0, got {args.max_queue}")
    if args.simulated:
        if args.target or args.drafter:
            raise ConfigError("give either --simulated or --target/--drafter, not both")
        target, drafter = args.pair.models()
        levels = REGISTRY[args.spec.algorithm].hierarchy  # HSD's drafter is a list of levels: here one
        engine = Engine(target, [drafter] if levels else drafter, speculative_config=args.spec,
                        runtime=args.runtime_config)  # fmt: skip
        return engine, "specpar-simulated"
    from specpar.entrypoints.cli.real_models import load

    _, _, engine = load(args, args.sp_degree, max_tokens=4096)
    return engine, args.target or engine.target_model.name


def run(args) -> int:
    try:
        from specpar.entrypoints.server.app import create_app, serve
    except ImportError as exc:
        raise ConfigError(f"specpar serve needs FastAPI and uvicorn: pip install 'specpar[serve]' ({exc})") from None
    engine, name = build_engine(args)
    api_key = args.api_key or os.environ.get("SPECPAR_API_KEY") or None
    app = create_app(engine, args.served_model_name or name, api_key=api_key, max_queue=args.max_queue,
                     max_model_len=args.max_model_len)  # fmt: skip
    print(f"specpar serve: {name} on http://{args.host}:{args.port}/v1 ({args.algorithm}, sp_degree {args.sp_degree})",
          flush=True)  # fmt: skip
    serve(app, args.host, args.port, args.shutdown_timeout)
    return 0
