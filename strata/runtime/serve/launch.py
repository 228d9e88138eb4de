"""`strata serve`: a model opened as a paged program and served over HTTP until SIGTERM.

    serve_model("models/tiny", port=8000, max_num_seqs=8, kv_pages=128)

The model is compiled (or its cached program reused, `MODEL/.strata-cache/cpu-serve`) with one
entry, `step_paged`, for `max_num_seqs` rows over `kv_pages` pages of the KV cache, and its
sampler; the flags are checked and the model's tokenizer loaded before anything is compiled.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strata.errors import say
from strata.runtime.serve.engine import ServeEngine, ServeError, is_recurrent, serving_knobs


def check_bind(host: str, port: int) -> None:
    """Refuse a port already taken, in one line, before the model is compiled."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def open_engine(model_path: str | Path, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                max_num_seqs: int = 8, max_batched_tokens: int = 256, kv_pages: int | None = None,
                max_waiting: int = 256, cache_dir: str | Path | None = None, interpret: bool = False) -> ServeEngine:
    """The model's serving engine (not started), its program compiled or reused."""
    from strata.pipeline import load_model
    from strata.runtime.engine import check_tokenizer_fits, model_tokenizer, open_program, prepare_device

    for name, value in (("--max-num-seqs", max_num_seqs), ("--max-num-batched-tokens", max_batched_tokens),
                        ("--kv-pages", kv_pages or 1), ("--max-waiting", max_waiting)):
        if value < 1:
            raise ServeError(f"{name} must be at least 1, got {value}")
    prepare_device(target_name, interpret)
    model = load_model(model_path)
    tokenizer = model_tokenizer(model)
    check_tokenizer_fits(tokenizer, int(model.config.vocab_size))
    k, page_size, num_pages = serving_knobs(model, target_name, knobs, kv_pages=kv_pages, max_num_seqs=max_num_seqs)
    if cache_dir is None:
        cache_dir = model.cache_root / f"{target_name}-serve"
    program = open_program(model, target_name, k, cache_dir=cache_dir, interpret=interpret)
    # A page holds attention KV only: a hybrid family's recurrent state (in the row's slot) at
    # a page boundary is not kept, so its prefix cache is off.
    prefix_cache = not is_recurrent(model)
    if not prefix_cache:
        say("prefix caching is off: the model keeps recurrent state a KV page does not hold")
    return ServeEngine(program, tokenizer, page_size=page_size, num_pages=num_pages, max_num_seqs=max_num_seqs,
                       max_batched_tokens=max_batched_tokens, prefix_cache=prefix_cache, max_waiting=max_waiting)


def serve_model(model_path: str | Path, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                shutdown_timeout: float = 10.0, **engine_options: Any) -> None:
    """Serve the model until SIGTERM (see `strata.runtime.serve.server`)."""
    try:
        from strata.runtime.serve import server
    except ImportError as e:
        raise ServeError(f"strata serve needs the serve extra ({e.name} is missing): pip install -e '.[serve]'") from None
    if shutdown_timeout < 0:
        raise ServeError(f"--shutdown-timeout must be at least 0, got {shutdown_timeout}")
    check_bind(host, port)
    engine = open_engine(model_path, target_name, knobs, **engine_options)
    name = Path(model_path).name or str(model_path)
    app = server.create_app(engine, name, api_key)
    s = engine.scheduler
    say(f"serving {name} on http://{host}:{port}/v1 ({s.max_num_seqs} rows, {s.pages.num_pages} KV pages of "
        f"{s.page_size}, context {engine.program.n_ctx}, up to {s.max_batched_tokens} tokens a step)")
    server.serve_forever(app, engine, host=host, port=port, shutdown_timeout=shutdown_timeout)
    say("stopped")
