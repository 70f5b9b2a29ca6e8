"""The parser of a command and the plain flags several commands share (-N, -n, --repeats, --json), each written once."""

from __future__ import annotations

import argparse

from specpar.entrypoints.cli.options import integer


def command_parser(sub, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The subcommand ``name``: ``help`` in the list of commands, ``description`` (lines of at most 80 columns,
    kept as written) atop its --help."""
    return sub.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_max_new_tokens(p, default: int, what: str) -> None:
    p.add_argument(
        "-N", "--max-new-tokens", type=integer, default=default, metavar="N", help=f"{what} (default {default})"
    )


def add_repeats(p, default: int, what: str) -> None:
    p.add_argument("--repeats", type=integer, default=default, metavar="R", help=f"{what} (default {default})")


def add_json(p, what: str = "print one JSON object instead of a table") -> None:
    p.add_argument("--json", action="store_true", help=what)


def add_prompt_count(p, default: int, what: str) -> None:
    p.add_argument("-n", "--prompts", type=integer, default=default, metavar="N", help=f"{what} (default {default})")
