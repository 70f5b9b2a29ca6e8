"""``python -m specpar``: the command line (see specpar.cli)."""

from specpar.cli import entry

entry()
