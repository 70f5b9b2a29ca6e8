"""Speculative algorithms (docs/design.md, layer 3): each a scheduler of tasks on servers, run unchanged on every
runtime; :mod:`.registry` names them and runs one generation; :mod:`.verification` is the pure verifier."""
