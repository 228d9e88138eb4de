"""Serving many requests at once: the scheduler (continuous batching over a paged program, the
page allocator and its prefix cache) and the engine that runs it on a thread; the HTTP server
(`server.py`, FastAPI) is the only part that imports the `serve` extra."""
