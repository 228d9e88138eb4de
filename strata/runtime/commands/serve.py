"""`strata serve`: a model opened as a paged program and served over HTTP until SIGTERM.

    serve_model("models/tiny", port=8000, max_num_seqs=8, kv_pages=128)

The model is compiled (or its cached program reused, `MODEL/.strata-cache/cpu-serve`) with one
entry, `step_paged`, for `max_num_seqs` rows over `kv_pages` pages of the KV cache, and its
sampler; the flags are checked and the model's tokenizer loaded before anything is compiled.
/v1/embeddings runs the `hidden_packed` entry, a program of its own compiled the first time an
embedding is asked for (`open_embedder`: the serving cache's sibling, `...-serve-embeddings`).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strata.errors import say
from strata.runtime.serve.batch_engine import ServeEngine, ServeError
from strata.runtime.serve.embeddings import POOLINGS, Embedder
from strata.targets.target import KV_PAGE_SIZE

#: The KV page size of a served program unless --set PageSize says otherwise.
DEFAULT_PAGE_SIZE = KV_PAGE_SIZE


def is_recurrent(model: Any) -> bool:
    """Whether the model keeps per-sequence recurrent state (a hybrid family's Gated DeltaNet)."""
    return "linear_attention" in tuple(getattr(model.config, "layer_types", ()) or ())


def serving_knobs(model: Any, k: dict[str, Any], *, kv_pages: int | None, max_num_seqs: int) -> tuple[int, int]:
    """Make the resolved knobs `k` those of a program that serves `max_num_seqs` rows over
    `kv_pages` pages through one `step_paged` entry; (its page size, its pages). The KV cache
    holds Batch * ctx cells, so Batch is the rows of a full context those pages need; a family
    with recurrent state keeps a state slot per row, so it has at least as many."""
    ctx, page = int(k["ctx"]), int(k.get("PageSize") or DEFAULT_PAGE_SIZE)
    if ctx % page:
        raise ServeError(f"the context of {ctx} is not a whole number of KV pages of {page} (--set PageSize=...)")
    per_row = ctx // page
    kv_pages = kv_pages or max_num_seqs * per_row
    batch = -(-kv_pages // per_row)
    if is_recurrent(model):
        batch = max(batch, max_num_seqs)
    k.update(entries="step_paged", Batch=batch, Rows=max_num_seqs, PageSize=page, Pages=per_row)
    return page, kv_pages


def check_bind(host: str, port: int) -> None:
    """Refuse a port already taken, in one line, before the model is compiled."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def open_engine(model_path: str | Path, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None,
                **options: Any) -> ServeEngine:
    """The model's serving engine (not started), its program compiled or reused."""
    return open_serving(model_path, target_name, knobs, **options)[0]


def open_embedder(opened: Any, knobs: Mapping[str, Any], pooling: str, cache_dir: Path) -> Embedder:
    """/v1/embeddings' `Embedder`: the `hidden_packed` entry of the model with the server's
    resolved `knobs` (its context), compiled into `cache_dir` when first used."""
    embedding = opened.for_program({**knobs, "entries": "hidden_packed", "Batch": None, "Rows": None,
                                    "PageSize": None, "Pages": None}, cache_dir)
    return Embedder(lambda: embedding.program(), hidden_size=int(opened.model.config.hidden_size),
                    n_ctx=int(knobs["ctx"]), pooling=pooling)


def open_serving(model_path: str | Path, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                 max_num_seqs: int = 8, max_batched_tokens: int = 256, kv_pages: int | None = None,
                 prefix_state_snapshots: int = 64, max_waiting: int = 256, cache_dir: str | Path | None = None,
                 interpret: bool = False, allow_nonfinite: bool = False,
                 pooling: str = "last", chat_template: str | Path | None = None) -> tuple[ServeEngine, Embedder]:
    """The model's serving engine (not started) and its embedder (nothing compiled for it yet);
    `chat_template`: a Jinja file rendering its chats in place of the model's own template."""
    from strata.runtime.opener import open_model, target_of
    from strata.runtime.text import ChatTemplate

    for name, value in (("--max-num-seqs", max_num_seqs), ("--max-num-batched-tokens", max_batched_tokens),
                        ("--kv-pages", kv_pages or 1), ("--max-waiting", max_waiting)):
        if value < 1:
            raise ServeError(f"{name} must be at least 1, got {value}")
    if prefix_state_snapshots < 0:
        raise ServeError(f"--prefix-state-snapshots must be at least 0, got {prefix_state_snapshots}")
    if not target_of(target_name).compiles_entries:  # the scheduler steps the step_paged entry
        from strata.targets import TARGETS

        takes = ", ".join(f"--target {n}" for n, made in TARGETS.items() if made().compiles_entries)
        raise ServeError(f"strata serve runs on {takes}: the {target_name} target does not compile the "
                         "step_paged entry the scheduler batches with")
    template = ChatTemplate.from_option(chat_template)  # a bad file is refused before the model is read
    opened = open_model(model_path, target_name, knobs, interpret=interpret, cache_dir=cache_dir,
                        allow_nonfinite=allow_nonfinite)
    model = opened.model
    tokenizer = opened.tokenizer()
    if template is not None:
        tokenizer.use_chat_template(template)
    if pooling not in POOLINGS:
        raise ServeError(f"--pooling {pooling}: choose one of {', '.join(POOLINGS)}")
    served_knobs = dict(opened.knobs)
    page_size, num_pages = serving_knobs(model, opened.knobs, kv_pages=kv_pages, max_num_seqs=max_num_seqs)
    if cache_dir is None:
        opened.cache_dir = model.cache_root / f"{target_name}-serve"
    serve_cache = opened.cache_dir
    embedder = open_embedder(opened, served_knobs, pooling, serve_cache.with_name(serve_cache.name + "-embeddings"))
    program = opened.program()
    # A page holds attention KV only: a hybrid family's prefix cache also needs its recurrent
    # state at page ends, which the scheduler keeps through the program's read_slot / write_slot.
    prefix_cache = True
    if is_recurrent(model):
        prefix_cache = prefix_state_snapshots > 0 and bool(getattr(program, "read_slot", None) and program.read_slot(0))
        if not prefix_cache:
            say("prefix caching is off: the model keeps recurrent state a KV page does not hold"
                + (" (--prefix-state-snapshots 0)" if prefix_state_snapshots == 0 else
                   ", and its program cannot save it"))
    engine = ServeEngine(program, tokenizer, page_size=page_size, num_pages=num_pages, max_num_seqs=max_num_seqs,
                         max_batched_tokens=max_batched_tokens, prefix_cache=prefix_cache,
                         state_snapshots=prefix_state_snapshots, max_waiting=max_waiting)
    return engine, embedder


def serve_model(model_path: str | Path, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                shutdown_timeout: float = 10.0, http_limits: Mapping[str, Any] | None = None,
                **engine_options: Any) -> None:
    """Serve the model until SIGTERM (see `strata.runtime.serve.server`); `http_limits`: fields
    of `server.HttpLimits` (max_body_bytes, read_timeout, stall_timeout, ...) that differ from its defaults."""
    try:
        from strata.runtime.serve import server
    except ImportError as e:
        raise ServeError(f"strata serve needs the serve extra ({e.name} is missing): pip install -e '.[serve]'") from None
    if shutdown_timeout < 0:
        raise ServeError(f"--shutdown-timeout must be at least 0, got {shutdown_timeout}")
    for name, value in (http_limits or {}).items():
        if value is not None and not value > 0:  # NaN too
            raise ServeError(f"--{name.replace('_', '-')} must be above 0, got {value}")
    limits = server.HttpLimits(**{k: v for k, v in (http_limits or {}).items() if v is not None})
    check_bind(host, port)
    engine, embedder = open_serving(model_path, target_name, knobs, **engine_options)
    name = Path(model_path).name or str(model_path)
    app = server.create_app(engine, name, api_key, limits, embedder)
    say(f"serving {name} on http://{host}:{port}/v1 ({engine.describe()})")
    try:
        server.serve_forever(app, engine, host=host, port=port, shutdown_timeout=shutdown_timeout, limits=limits)
    finally:
        embedder.close()
    say("stopped")
