"""The ``specpar`` command line: one module per subcommand under specpar.commands.

Each command module has ``register(subparsers)`` that adds its parser and sets
``func``; heavy imports (torch, matplotlib) stay inside the command functions so
that ``specpar --help`` and ``specpar simulate`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from specpar.errors import SpecparError

COMMANDS = [
    "specpar.commands.simulate",
    "specpar.commands.plan",
    "specpar.commands.hsd_plan",
    "specpar.commands.heatmap",
    "specpar.commands.reproduce",
    "specpar.commands.table",
    "specpar.commands.generate",
    "specpar.commands.bench",
    "specpar.commands.profile",
    "specpar.commands.serve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specpar",
        description="Lossless speculative inference: non-SI, SI and DSI, on a virtual clock, threads or real models.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    for command in sub.choices.values():
        command.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="log to stderr: loading, server placement, lookahead choice, each request's metrics",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        logger = logging.getLogger("specpar")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        return args.func(args) or 0
    except SpecparError as exc:
        print(f"specpar {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
