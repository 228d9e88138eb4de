"""`strata perplexity MODEL -f TEXT [--ctx N] [--batch B]`: a text's perplexity by llama-perplexity's
method (chunks of N tokens, the second half of each scored), on the cpu target's log_probs_packed;
`--kl-divergence-base FILE [--kl-divergence]` saves the f32 model's distributions, or judges
another precision of it against them."""

from __future__ import annotations

import argparse

from strata.cli.args import add_allow_nonfinite, add_entries_target, add_model, add_threads, bounded_int, entries_target_knobs


def add(sub) -> None:
    p = sub.add_parser("perplexity", help="a text's perplexity, as llama.cpp's llama-perplexity computes it")
    add_model(p)
    add_threads(p)
    add_entries_target(p)
    p.add_argument("-f", "--file", required=True, metavar="TEXT", help="the text file to score (read as UTF-8)")
    p.add_argument("-c", "--ctx", type=bounded_int(1), default=None,
                   help="tokens per chunk: the first half is context, the second half scored "
                        "(default: 512, or the model's context if smaller)")
    p.add_argument("-b", "--batch", type=bounded_int(1), default=4, help="chunks run per call (default 4)")
    p.add_argument("--chunks", type=bounded_int(1), default=None, help="score at most this many chunks (default: all)")
    p.add_argument("--kl-divergence-base", metavar="FILE", default=None,
                   help="save every scored position's f32 log-probs here (.npz), or with --kl-divergence compare with "
                        "the ones saved: mean KL divergence, delta-p, same top token")
    p.add_argument("--kl-divergence", action="store_true",
                   help="judge MODEL against the base saved in --kl-divergence-base (same model shape, vocabulary, text)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a knob of the target (cpu: kv_pad, kv_type, ...), as strata compile --set")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET)")
    add_allow_nonfinite(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.perplexity import perplexity

    knobs = entries_target_knobs(args, ("ctx", "entries"), "perplexity")
    perplexity(args.model, args.file, ctx=args.ctx, batch=args.batch, knobs=knobs, cache_dir=args.cache_dir,
               max_chunks=args.chunks, kl_base=args.kl_divergence_base, kl_divergence=args.kl_divergence,
               allow_nonfinite=args.allow_nonfinite, target_name=args.target, interpret=args.interpret)
    return 0
