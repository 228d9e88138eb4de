"""Export one op-level entry (prefill or decode) as an ONNX model of standard ops (opset 21).

    model = export_onnx(fn, store)            # an onnx.ModelProto, checked by onnx.checker
    save_onnx(model, "m.onnx")                # inline weights, or m.onnx.data beside it when large

The graph's inputs are the entry's host inputs, one per kind (`tokens`, `positions`, `kv_rows`,
`kq_mask`, `mrope_positions`, `state_copy`, `out_ids`, as `strata.semantics.kernels.host_input`
makes them), then every `op.state` buffer (the KV cache, the recurrent states) under its
sanitized name; the outputs are `logits`, then each buffer as updated by the call
(`<name>_out`), to be fed back as the next call's input. `metadata_props` records the
mapping (`strata.inputs`, `strata.states`, JSON) and the entry's `n_kv`.

How the op level's in-place state maps onto ONNX's values: each buffer has a current version (a
tensor name). `op.set_rows` and `op.cpy` into a state make a new version (ScatterND, or a
Concat of slices); views, reshapes and permutations of a state are aliases, evaluated against
the version current where a compute op reads them, so a read after a write sees it, as in
the interpreter. A recurrent state reads as zeros when the call starts at position 0 (a new
sequence): `Where(start == 0, 0, state)`, with start taken from the positional input.

Each op class registers its translation in `ONNX_EXPORT`. Every translation uses ONNX's own
ops (no `com.microsoft` op is needed: Scan carries Gated DeltaNet's recurrence, TopK gives
ARGSORT's stable order, primitive ops give RMS_NORM, ROPE and FLASH_ATTN_EXT) and computes in
float32 as the numpy kernels do (`strata.semantics.kernels`), in their order of operations
where it matters (ROPE's angles in float64, SILU as x / (1 + exp(-x)), CLAMP's NaN rule).

With `int4=` (a w4a16 stage, `strata.quant.w4a16.W4A16Weights`), each of its int4 weights that
the entry reads only as a 2-D MUL_MAT weight becomes ONNX Runtime's
`com.microsoft.MatMulNBits` on the stage's packed bytes (bits 4, the stage's block); the
model then imports the `com.microsoft` opset too. Pass the stage as `weights` as well, so that
the other params (and an int4 weight read another way, a tied embedding) are the stage's.

Shapes must be static: lower the entry with a token count (`tokens=N`). onnx is imported only
when this module is used.
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType

from strata.exporters import onnx_ops  # noqa: F401  (fills ONNX_EXPORT with the translations)
from strata.exporters.onnx_graph import ONNX_EXPORT, Exporter, OnnxExportError, describe, onnx_module

__all__ = ["INLINE_LIMIT", "ONNX_EXPORT", "OnnxExportError", "check_onnx_file", "export_onnx", "initializer_bytes"]

#: A model whose initializers hold more than this is saved with its weights in a separate
#: file (protobuf's limit is 2 GiB for one message).
INLINE_LIMIT = 1 << 30


def initializer_bytes(model) -> int:
    return sum(len(t.raw_data) for t in model.graph.initializer)


def _check(model_or_path, what: str) -> None:
    onnx = onnx_module()
    try:
        onnx.checker.check_model(model_or_path, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxExportError(f"{what}: the exported model fails onnx.checker: {first}") from None


def check_onnx_file(path) -> None:
    """onnx.checker (full_check) on a saved model, its external data beside it."""
    _check(str(path), str(path))


def export_onnx(fn: func.FuncOp, weights: Any, *, check: bool = True, int4: Any = None):
    """The op-level function `fn` (one entry) as an ONNX ModelProto; `weights` maps the params'
    stored names to arrays (a WeightStore). Checked with onnx.checker (full_check) unless told
    not, or unless its weights exceed INLINE_LIMIT: the checker then needs the saved files
    (`check_onnx_file`), as protobuf cannot hold it in one message."""
    for op in fn.walk():
        for r in op.results:
            if isinstance(r.type, TensorType) and DYNAMIC_INDEX in r.type.get_shape():
                raise OnnxExportError(f"@{fn.sym_name.data}: {describe(op)} has a dynamic shape ({r.type}); "
                                      "the ONNX export needs a static token count (lower with tokens=N)")
    model = Exporter(fn, weights, int4).run()
    if check and initializer_bytes(model) <= INLINE_LIMIT:
        _check(model, f"@{fn.sym_name.data}")
    return model
