"""``specpar serve``: an OpenAI-compatible HTTP server over the Engine (``pip install 'specpar[serve]'``).

app: the ASGI app and running it; schemas: OpenAI request bodies into SamplingParams, error bodies;
metrics: the Prometheus text of /metrics.
"""
