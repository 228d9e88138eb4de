"""`strata bench MODEL [-p 512] [-n 128] [-b 1,8,32] [-r 3] [-o md|json]`: prompt processing and
generation tokens/s per batch size on the cpu target (decode_rows for a batch), as llama-bench's table."""

from __future__ import annotations

import argparse

from strata.cli.args import add_allow_nonfinite, add_entries_target, add_model, add_threads, bounded_int, entries_target_knobs


def add(sub) -> None:
    p = sub.add_parser("bench", help="prompt processing and generation speed per batch size, as llama-bench")
    add_model(p)
    add_threads(p)
    add_entries_target(p)
    p.add_argument("-p", "--n-prompt", type=bounded_int(0), default=512,
                   help="prompt tokens per sequence (the ppN test; 0: none; default 512)")
    p.add_argument("-n", "--n-gen", type=bounded_int(0), default=128,
                   help="generated tokens per sequence (the tgN test; 0: none; default 128)")
    p.add_argument("-b", "--batch", default="1,8,32", metavar="B,B,...",
                   help="sequences run together, comma-separated (default 1,8,32; above 1: prefill_slots and "
                        "decode_rows)")
    p.add_argument("-r", "--repetitions", type=bounded_int(1), default=3, help="timed runs per test (default 3)")
    p.add_argument("-o", "--output", choices=["md", "json"], default="md",
                   help="a markdown table (default) or JSON (llama-bench's avg_ts, stddev_ts, samples_ts)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a knob of the target (cpu: kv_pad, kv_type, ...), as strata compile --set")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled programs are kept, one per batch size (default: MODEL/.strata-cache/cpu-bench-bB)")
    add_allow_nonfinite(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.bench import bench, format_json, format_table, parse_batches

    knobs = entries_target_knobs(args, ("ctx", "entries", "Batch"), "the bench")
    rows = bench(args.model, n_prompt=args.n_prompt, n_gen=args.n_gen, batches=parse_batches(args.batch),
                 repetitions=args.repetitions, knobs=knobs, cache_dir=args.cache_dir,
                 allow_nonfinite=args.allow_nonfinite, target_name=args.target, interpret=args.interpret)
    print(format_json(rows) if args.output == "json" else format_table(rows))
    return 0
