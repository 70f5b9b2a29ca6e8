"""``python -m specpar``: the command line (see specpar.entrypoints.cli)."""

from specpar.entrypoints.cli import entry

entry()
