"""CLI subcommands, one module each (see specpar.cli)."""
