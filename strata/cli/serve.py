"""`strata serve MODEL`: an OpenAI-compatible server (/v1/completions, /v1/chat/completions,
/v1/embeddings, /v1/models, /tokenize, /detokenize, /health, /metrics) with continuous batching over the paged KV cache."""

from __future__ import annotations

import argparse

from strata.cli.args import add_allow_nonfinite, add_chat_template, add_model, add_target, bounded_int, knobs_of


def add(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API")
    add_model(p)
    add_target(p, run=True)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=bounded_int(0), default=8000, help="the port (default 8000)")
    p.add_argument("--max-num-seqs", type=bounded_int(1), default=8,
                   help="the most sequences stepped together (the program's rows; default 8)")
    p.add_argument("--max-num-batched-tokens", type=bounded_int(1), default=256,
                   help="the most tokens in one step: decode rows plus prompt chunks (default 256)")
    p.add_argument("--kv-pages", type=bounded_int(1), default=None,
                   help="KV cache pages (default: a full context for every row); PageSize is --set PageSize=N (default 16)")
    p.add_argument("--prefix-state-snapshots", type=bounded_int(0), default=64, metavar="N",
                   help="a hybrid family's (Qwen3.5, Qwen3-Next) prefix cache: the recurrent states kept at KV page "
                        "ends, each every linear-attention layer's (default 64; 0: its prefix cache is off)")
    p.add_argument("--max-waiting", type=bounded_int(1), default=256,
                   help="the most requests waiting; more are answered 429 with Retry-After (default 256)")
    p.add_argument("--api-key", default=None, metavar="KEY", help="require Authorization: Bearer KEY on /v1")
    p.add_argument("--shutdown-timeout", type=float, default=10.0, metavar="S",
                   help="on SIGTERM, seconds to let requests in flight finish before cancelling them (default 10)")
    p.add_argument("--max-body-bytes", type=bounded_int(1), default=None, metavar="N",
                   help="the largest request body; a larger one is answered 413 before it is read (default 8 MiB)")
    p.add_argument("--read-timeout", type=float, default=None, metavar="S",
                   help="seconds a request's head, then its body, may take to arrive: a slower body is answered 408, a "
                        "slower head's connection closed (default 30)")
    p.add_argument("--max-pending-events", type=bounded_int(1), default=None, metavar="N",
                   help="a stream whose client falls N events behind is cancelled (default 256)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                   help="/health answers 503 once a step has run S seconds with requests in flight (default 60)")
    p.add_argument("--pooling", choices=("last", "mean"), default="last",
                   help="/v1/embeddings: an input's vector is its last token's hidden state or the mean of all its "
                        "tokens' (default last); L2-normalised")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET-serve); "
                        "/v1/embeddings' entry beside it, in DIR-embeddings")
    add_chat_template(p)
    add_allow_nonfinite(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.serve import serve_model

    serve_model(args.model, args.target, knobs_of(args), host=args.host, port=args.port, api_key=args.api_key,
                shutdown_timeout=args.shutdown_timeout,
                http_limits={"max_body_bytes": args.max_body_bytes, "read_timeout": args.read_timeout,
                             "max_pending_events": args.max_pending_events, "stall_timeout": args.stall_timeout},
                max_num_seqs=args.max_num_seqs,
                max_batched_tokens=args.max_num_batched_tokens, kv_pages=args.kv_pages,
                prefix_state_snapshots=args.prefix_state_snapshots,
                max_waiting=args.max_waiting, cache_dir=args.cache_dir, interpret=getattr(args, "interpret", False),
                allow_nonfinite=args.allow_nonfinite, pooling=args.pooling, chat_template=args.chat_template)
    return 0
