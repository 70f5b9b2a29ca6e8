"""``specpar serve``: the Engine behind an OpenAI-compatible HTTP API (completions, chat, streaming, metrics)."""

from __future__ import annotations

import argparse
import os
import socket

from specpar.core.config import ALGORITHMS, AUTO, SPECULATIVE_FIELDS
from specpar.core.errors import ConfigError
from specpar.entrypoints.cli import arguments
from specpar.planning.load import POLICIES

DESCRIPTION = """\
Serve a target and drafter over HTTP with the OpenAI API: POST /v1/completions,
POST /v1/chat/completions (stream: true gives server-sent events), GET /v1/models,
/health and /metrics (Prometheus text, vLLM's spec-decode counter names). Requests
run at once: the engine's scheduler gives each a share of --units processing units
(DSI when there is room, fewer target replicas, SI or non-SI when there is not) and
queues first come first served those that do not fit; past --max-queue in the
server (generating or waiting), 429. POST /tokenize and /detokenize, GET /version.
--simulated serves simulated models without weights: their text is token ids in
decimal separated by spaces (prompts: a list of ids, or such a string).
"""


MAX_SERVE_SERVERS = 64  # target servers (threads on the threads runtime; a KV cache each on real models)
MAX_SERVE_LOOKAHEAD = 64


def api_key(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an API key must not be empty (leave --api-key out to serve without one)")
    return text


def register(sub) -> None:
    what = "an OpenAI-compatible HTTP server (completions, chat, streaming, /metrics)"
    p = arguments.command_parser(sub, "serve", what, DESCRIPTION)
    what = "the target model, as `vllm serve MODEL`: a GGUF file or a local directory (default: the default pair)"
    model = p.add_argument("target", nargs="?", default=argparse.SUPPRESS, metavar="MODEL", help=what)
    arguments.add_deprecated(p, model, "--target")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ranged = arguments.ranged
    p.add_argument("--port", type=ranged(int, 0, 65535), default=8000,
                   help="port (default 8000; 0: a free one, which the line printed at start names)")  # fmt: skip
    p.add_argument("--api-key", type=api_key, default=None,
                   help="require 'Authorization: Bearer KEY' (default: env SPECPAR_API_KEY)")  # fmt: skip
    p.add_argument("--max-queue", type=ranged(int, 1, 1 << 20), default=64,
                   help="requests in the server at once (generating or waiting); more get 429 (default 64)")  # fmt: skip
    p.add_argument("--units", type=ranged(int, 1, MAX_SERVE_SERVERS + 1), default=None,
                   help="processing units the requests share, each with a target and a drafter server (default: "
                        "--sp-degree + 1; 1: one request at a time on every server)")  # fmt: skip
    p.add_argument("--policy", choices=POLICIES, default="adaptive",
                   help="how requests share the units: adaptive (each its fastest option on its share, shares for "
                        "the most tokens per second), or the same option for all: dsi, si, nonsi (default "
                        "adaptive)")  # fmt: skip
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: the target's)")
    p.add_argument("--max-model-len", type=ranged(int, 1, arguments.MAX_INTEGER), default=2048,
                   help="prompt + max_tokens limit for a target without a context window (default 2048)")  # fmt: skip
    timeout = p.add_argument("--shutdown-timeout", type=ranged(float, 0, 86400), default=30.0,
                             help="seconds in-flight requests may take to finish on SIGTERM (default 30)")  # fmt: skip
    arguments.advanced_flag(timeout)
    arguments.add_speculation_arguments(p, fields=SPECULATIVE_FIELDS, algorithms=(*ALGORITHMS, AUTO), advanced=True,
                                        simulated=True)  # fmt: skip
    arguments.add_runtime_arguments(p, choices=("threads", "ray"), default="threads", fields=arguments.REAL_TIME_FIELDS)
    g = p.add_argument_group("simulated models (numbers: --help=all)")
    g.add_argument("--simulated", action="store_true", help="serve simulated models (no weights)")
    pair = (*arguments.LATENCY_FIELDS, "acceptance_rate", "vocab_size", "seed")
    defaults = {"target_tpot_ms": 2.0, "vocab_size": 32}
    arguments.add_pair_arguments(g, fields=pair, defaults=defaults, title=None, advanced=True)
    arguments.add_model_args(p, target=False, advanced=("--drafter",))
    arguments.add_machine_profile(p)
    p.set_defaults(func=run)


def build_engine(args):
    """The Engine that ``args`` describe: simulated models on the threads runtime (wall time), or a real pair;
    with the speculation and runtime the flags give (HSD's drafter: a list of one level)."""
    from specpar.entrypoints.cli.real_models import load, make_engine

    args.target = getattr(args, "target", None)  # MODEL, when given
    args.spec = served_spec(args)
    if args.simulated:
        target, drafter = args.pair.models()
        return make_engine(args, args.spec, target, drafter, units=args.units, policy=args.policy), "specpar-simulated"

    _, _, engine = load(args, args.sp_degree, max_model_len=4096, units=args.units, policy=args.policy)
    return engine, args.target or engine.target_model.name


def served_spec(args):
    """The requests' default speculation: the flags', with none of the settings "auto" chooses itself."""
    spec = args.spec
    return spec.for_request(algorithm=AUTO, sp_degree=spec.sp_degree) if spec.algorithm == AUTO else spec


def check(args) -> tuple[str | None, socket.socket]:
    """What the flags leave to check before anything loads; returns the API key (None: open) and the socket bound to
    the address, which the server then listens on (so no other process takes the port meanwhile)."""
    args.target = getattr(args, "target", None)  # MODEL, when given
    if args.simulated and (args.target or args.drafter):
        raise ConfigError("give either --simulated or a MODEL (or --drafter), not both")
    if args.simulated and args.exact is not None:
        raise ConfigError("--exact/--no-exact choose llama.cpp's mode: simulated models have none")
    if args.sp_degree > MAX_SERVE_SERVERS:
        raise ConfigError(f"--sp-degree must be at most {MAX_SERVE_SERVERS} to serve, got {args.sp_degree}")
    if isinstance(args.lookahead, int) and args.lookahead > MAX_SERVE_LOOKAHEAD:
        raise ConfigError(f"--lookahead must be at most {MAX_SERVE_LOOKAHEAD} to serve, got {args.lookahead}")
    from specpar.entrypoints.cli.real_models import check_common, check_servers

    if args.simulated:
        check_servers(args)
    else:
        check_common(args)
    key = args.api_key if args.api_key is not None else os.environ.get("SPECPAR_API_KEY")
    if key is not None and not key.strip():
        raise ConfigError("SPECPAR_API_KEY is set but empty: unset it to serve without a key")
    try:  # the address, before the model loads: bound now, listened on once the engine is up
        family = socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((args.host, args.port))
        except BaseException:
            sock.close()
            raise
    except OSError as exc:
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return key, sock


def run(args) -> int:
    try:
        from specpar.entrypoints.server.app import create_app, serve
    except ImportError as exc:
        raise ConfigError(
            f"specpar serve needs FastAPI, uvicorn, pydantic and prometheus_client: pip install 'specpar[serve]' ({exc})"
        ) from None
    api_key, sock = check(args)
    try:
        return _serve(args, api_key, sock, create_app, serve)
    finally:
        sock.close()


def _serve(args, api_key, sock, create_app, serve) -> int:
    if args.runtime == "ray":
        # Ray now, in the main thread, before uvicorn takes SIGTERM: started by the first request's worker thread,
        # Ray's own SIGTERM handler (a stack dump) came after uvicorn's and ended the server at once, without
        # draining requests or stopping the local Ray (its agents were left running)
        from specpar.entrypoints.cli.main import ray_cpus
        from specpar.runtimes.ray_cluster import connect

        connect(args.ray_address, ray_cpus(args))
    engine, name = build_engine(args)
    app = create_app(engine, args.served_model_name or name, api_key=api_key, max_queue=args.max_queue,
                     max_model_len=args.max_model_len)  # fmt: skip
    port = sock.getsockname()[1]
    print(f"specpar serve: {name} on http://{args.host}:{port}/v1 ({args.algorithm}, sp_degree {args.sp_degree}, "
          f"{len(engine.units)} processing units, {args.policy})", flush=True)  # fmt: skip
    serve(app, args.host, port, args.shutdown_timeout, sock=sock)
    return 0
