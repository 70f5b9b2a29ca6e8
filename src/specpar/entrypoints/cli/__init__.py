"""The ``specpar`` command: one module per subcommand (parse, call, print); :mod:`.main` dispatches."""

from specpar.entrypoints.cli.main import entry, main

__all__ = ["entry", "main"]
