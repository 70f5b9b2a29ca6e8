"""Deprecated flag spellings: for one release they still work, hidden from ``--help``, and say on stderr what
replaces them (one line per flag, printed by :func:`specpar.entrypoints.cli.main.main` when the command starts, so a
command that stops at a mistake prints only its one error line)."""

from __future__ import annotations

import argparse

NOTES = "_deprecated"  # the namespace attribute that holds the notes: {dest: (old spelling, new spelling)}


class DeprecatedFlag(argparse.Action):
    """An old spelling of ``canonical`` (an action of the same parser): parses and stores as it does, and notes
    the old spelling."""

    def __init__(self, option_strings, dest, canonical: argparse.Action, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.canonical = canonical

    def __call__(self, parser, namespace, values, option_string=None):
        new = self.canonical.option_strings[-1]
        note(namespace, self.dest, option_string, new)
        self.canonical(parser, namespace, values, new)


def add_deprecated(container, canonical: argparse.Action, *old: str) -> None:
    """Accept the spellings ``old`` for the option ``canonical`` (added to ``container``, a parser or a group)."""
    if not old:
        return
    container.add_argument(
        *old,
        action=DeprecatedFlag,
        canonical=canonical,
        dest=canonical.dest,
        nargs=canonical.nargs,
        type=canonical.type,
        choices=canonical.choices,
        metavar=canonical.metavar,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def note(namespace, dest: str, old: str, new: str) -> None:
    """Record that ``old`` was given where ``new`` is the spelling now (the last note for a dest wins)."""
    notes = getattr(namespace, NOTES, None)
    if notes is None:
        notes = {}
        setattr(namespace, NOTES, notes)
    notes[dest] = (old, new)


def notes(namespace) -> dict[str, tuple[str, str]]:
    """{dest: (old spelling, new spelling)} for the deprecated spellings the command line used."""
    return dict(getattr(namespace, NOTES, None) or {})


def warning(old: str, new: str) -> str:
    return f"{old} is deprecated and goes in the next release: use {new}"
