"""`strata export --format onnx` and `strata run --via onnxruntime` (the CLI side of strata.exporters.onnx)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from strata.cli import _knobs, _model, _say, check_finite, generate_with_progress, parse_prompt_ids, report_result
from strata.errors import StrataError

# ---------------------------------------------------------------------------------------------
# ONNX: strata export --format onnx, strata run --via onnxruntime


def _export_onnx(model, store, entry: str, tokens: int, knobs: dict):
    """One entry of `model` as an ONNX ModelProto: `tokens` tokens at any position (start unknown)."""
    from strata.exporters.onnx import export_onnx
    from strata.pipeline import entry_pipeline, lower
    from strata.semantics.op_interp import find_function

    spec = entry_pipeline(entry, tokens=tokens if entry == "prefill" else 0, start=-1, ctx=knobs["ctx"],
                          kv_pad=knobs["kv_pad"], flash_attn=knobs["flash_attn"])
    return export_onnx(find_function(lower(model, spec)), store)


def cmd_export_onnx(args: argparse.Namespace) -> int:
    from strata.exporters.onnx import check_onnx_file
    from strata.exporters.onnx_run import serialize_onnx
    from strata.outputs import check_output_path, write_output
    from strata.pipeline import resolve_knobs
    from strata.targets import target

    check_output_path(args.output)
    model = _model(args)
    knobs = resolve_knobs(target("cpu"), model, _knobs(args))
    tokens = args.tokens if args.entry == "prefill" else 1
    if tokens > knobs["ctx"]:
        raise StrataError(f"--tokens {tokens} exceeds the context of {knobs['ctx']} (--ctx)")
    t0 = time.perf_counter()
    proto = _export_onnx(model, model.open_weights(quiet=not sys.stderr.isatty()), args.entry, tokens, knobs)
    data_path = Path(args.output).with_name(Path(args.output).name + ".data")
    content, data = serialize_onnx(proto, data_path.name)
    if data is not None:
        check_output_path(data_path)
        write_output(data_path, data)
    write_output(args.output, content)
    if data is not None:  # too large to check in memory: checked as saved
        check_onnx_file(args.output)
    _say(f"exported the {args.entry} of {args.model} ({tokens} token{'s' * (tokens != 1)}, ctx {knobs['ctx']}) "
         f"to {args.output}{f' and {data_path.name}' if data is not None else ''} in {time.perf_counter() - t0:.2f} s")
    return 0


def run_via_onnxruntime(args: argparse.Namespace) -> int:
    """`strata run --via onnxruntime`: export the prefill (the prompt's length) and the decode,
    and generate with onnxruntime, printing what `strata run` prints."""
    from strata.exporters.onnx_run import OrtEntry, generate_ort
    from strata.outputs import check_output_path
    from strata.pipeline import resolve_knobs
    from strata.targets import target
    from strata.targets.cpu.driver import check_request

    prompt = parse_prompt_ids(args.prompt_ids)
    if args.dump_logits:
        check_output_path(args.dump_logits)
    model = _model(args)
    knobs = resolve_knobs(target(args.target), model, _knobs(args))
    check_request(prompt, args.max_new_tokens, model.config.vocab_size, knobs["ctx"])
    store = model.open_weights()
    check_finite(store, list(model.params()), args.allow_nonfinite)
    n = args.max_new_tokens
    t0 = time.perf_counter()
    prefill = OrtEntry(_export_onnx(model, store, "prefill", len(prompt), knobs))
    decode = OrtEntry(_export_onnx(model, store, "decode", 1, knobs)) if n > 1 else prefill
    _say(f"exported {model.root} to ONNX and loaded it in onnxruntime in {time.perf_counter() - t0:.2f} s")

    ids, logits = generate_with_progress(prompt, n, lambda on_token: generate_ort(prefill, decode, prompt, n,
                                                                                  on_token=on_token), "onnxruntime")
    report_result(ids, logits, args.dump_logits)
    return 0
