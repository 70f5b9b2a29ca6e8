"""Entry points (docs/design.md, layer 1): the Engine, ``generate``, the OpenAI-compatible server and the CLI."""
