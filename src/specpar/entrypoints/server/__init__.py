"""``specpar serve``: an OpenAI-compatible HTTP server over the Engine (``pip install 'specpar[serve]'``).

app: the ASGI app (routes, error handlers, body limit) and running it; schemas: the OpenAI request bodies as
pydantic models, error bodies; jobs: a request read into its generations; handlers: generating them, whole or
streamed; admission: backpressure (requests in the server); responses: the OpenAI response bodies;
served: the model as the API sees it; metrics: Prometheus metrics (prometheus_client).
"""
