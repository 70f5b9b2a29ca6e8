"""``specpar serve``: an OpenAI-compatible HTTP server over the Engine (``pip install 'specpar[serve]'``); docs/serve.md."""
