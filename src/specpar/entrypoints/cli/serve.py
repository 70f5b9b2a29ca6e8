"""``specpar serve``: the Engine behind an OpenAI-compatible HTTP API (completions, chat, streaming, metrics)."""

from __future__ import annotations

import argparse
import os

from specpar.core.errors import ConfigError

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

    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--algo", choices=("nonsi", "si", "dsi"), default="dsi", help="algorithm (default dsi)")
    p.add_argument("-k", "--lookahead", type=int, default=5, help="draft tokens per verification (default 5)")
    p.add_argument("--sp-degree", type=int, default=2, help="target servers (default 2)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: env SPECPAR_API_KEY)")
    p.add_argument("--max-queue", type=int, default=64, help="requests that may wait; more get 429 (default 64)")
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the target's)")
    p.add_argument("--max-model-len", type=int, default=2048,
                   help="prompt + max_tokens limit for a target without a context window (default 2048)")  # fmt: skip
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds in-flight requests may take to finish on SIGTERM (default 30)")  # fmt: skip
    g = p.add_argument_group("simulated models")
    g.add_argument("--simulated", action="store_true", help="serve simulated models (no weights)")
    g.add_argument("--vocab", type=int, default=32, help="simulated vocabulary size (default 32)")
    g.add_argument("--acceptance", type=float, default=0.8, help="simulated drafter acceptance rate (default 0.8)")
    g.add_argument("--target-ms", type=float, default=2.0, help="simulated target forward pass, ms (default 2)")
    g.add_argument("--drafter-ms", type=float, default=0.2, help="simulated drafter forward pass, ms (default 0.2)")
    real_models.add_model_args(p)
    p.set_defaults(func=run)


def build_engine(args):
    """The Engine that ``args`` describe: simulated models on the threads runtime (wall time), or a real pair."""
    from specpar import Engine, LatencyProfile, SimulatedModel

    for name in ("sp_degree", "lookahead", "port"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_queue < 0:
        raise ConfigError(f"--max-queue must be >= 0, got {args.max_queue}")
    common = dict(sp_degree=args.sp_degree, algorithm=args.algo, lookahead=args.lookahead)
    if args.simulated:
        if args.target or args.drafter:
            raise ConfigError("give either --simulated or --target/--drafter, not both")
        target = SimulatedModel(args.vocab, seed=0, latency=LatencyProfile.uniform(args.target_ms))
        drafter = target.drafter(args.acceptance, LatencyProfile.uniform(args.drafter_ms))
        return Engine(target, drafter, runtime="threads", **common), "specpar-simulated"
    from specpar.entrypoints.cli.real_models import devices

    engine = Engine(args.target, args.drafter, devices=devices(args), dtype=args.dtype, backend=args.backend, **common)
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
    print(f"specpar serve: {name} on http://{args.host}:{args.port}/v1 ({args.algo}, sp_degree {args.sp_degree})",
          flush=True)  # fmt: skip
    serve(app, args.host, args.port, args.shutdown_timeout)
    return 0
