"""The parser of a command and the plain flags several commands share (-N, -n, --repeats, --json), each written once."""

from __future__ import annotations

import argparse
import textwrap

from specpar.entrypoints.cli.options import integer


class Formatter(argparse.HelpFormatter):
    """argparse's help, with descriptions filled to the terminal's width paragraph by paragraph (a blank line
    ends a paragraph), so that ``--help`` reads well in 80 columns and wider."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
        return "\n\n".join(textwrap.fill(p, width, initial_indent=indent, subsequent_indent=indent) for p in paragraphs)


def command_parser(sub, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The subcommand ``name``: ``help`` in the list of commands, ``description`` atop its --help."""
    return sub.add_parser(name, help=help, description=description, formatter_class=Formatter)


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
