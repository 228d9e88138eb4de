"""cpu-native-kernels: mark the op-level ops the cpu target computes with its native kernels.

The cpu target's native library (`strata.targets.cpu.native`) multiplies by weights in the
blocks a GGUF stores them in (memory-mapped, never dequantized), quantizing the activations to
the weight type's `vec_dot_type` as ggml-cpu does, and runs ggml-cpu's flash attention over a
float16 KV cache. This pass says which ops take that path, with `kernel = "native"`:

* an `op.param` of a weight type the library computes on (`NATIVE_WEIGHT_TYPES`: a block
  `format`, or float32 / float16 / bfloat16 values), read whole and as stored (no conversion,
  no split, no block order), every use of which, in every entry (a weight is bound once), is
  the weight of a MUL_MAT ([M, K]), the experts of a MUL_MAT_ID ([E, M, K]) or the table of a
  GET_ROWS ([R, C]); and those uses;
* FLASH_ATTN_EXT over float16 K and V;
* with `ggml_order = "repacked"`, the MUL_MATs whose sums llama.cpp takes in its repacked
  order (`ORDER_ATTR`);

and the module with `cpu.kernels = "native"`: its program loads the library.

The printer binds a marked param as its packed blocks and prints a marked op as a call of the
native kernel; every other op stays on the numpy kernels. A param whose store cannot give the
packed blocks falls back to the numpy kernels at load (the generated code checks).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from strata.dialects import op as O
from strata.ir.ggml_types import NATIVE_WEIGHT_TYPES, ggml_type

#: The attribute and its value on a marked op.
KERNEL_ATTR, NATIVE = "kernel", "native"
#: The module's attribute: its program loads the native library (and sizes its thread pool).
MODULE_ATTR = "cpu.kernels"
#: A MUL_MAT's attribute naming the order of ggml-cpu's sums it reproduces, where it is not
#: vec_dot's: "repacked", llama.cpp's CPU_REPACK on x86 (Q4_0, IQ4_NL and Q4_K weights of a multiple of
#: 8 rows that only MUL_MATs read: a tied embedding stays in llama.cpp's input buffer, unrepacked).
ORDER_ATTR, REPACKED = "ggml_order", "repacked"
REPACKED_TYPES = ("q4_0", "iq4_nl", "q4_K")


def native_weight_type(param: O.ParamOp) -> str | None:
    """The ggml type a native kernel reads `param` in (ggml's spelling), or None if it cannot."""
    if param.conversion is not None or param.piece is not None or param.block_order is not None:
        return None
    fmt = param.format_name
    if fmt is None:
        elem = O.elem_of(param.result)
        fmt = "f16" if isinstance(elem, Float16Type) else "bf16" if isinstance(elem, BFloat16Type) else \
            "f32" if isinstance(elem, Float32Type) else None
    if fmt not in NATIVE_WEIGHT_TYPES:
        return None
    shape = O.shape_of(param.result)
    return fmt if len(shape) >= 2 and shape[-1] % ggml_type(fmt).block == 0 else None


def _weight_use(op: Operation, index: int, rank: int) -> bool:
    """Whether operand `index` of `op` is a weight a native kernel takes (a rank-`rank` param)."""
    if isinstance(op, O.MulMatOp):
        return index == 0 and rank == 2
    if isinstance(op, O.MulMatIdOp):
        return index == 0 and rank == 3
    if isinstance(op, O.GetRowsOp):
        return index == 0 and rank == 2
    return False


def is_native(op: Operation) -> bool:
    """Whether `op` carries `kernel = "native"` (a module: `cpu.kernels = "native"`)."""
    attr = op.attributes.get(MODULE_ATTR if isinstance(op, ModuleOp) else KERNEL_ATTR)
    return isinstance(attr, StringAttr) and attr.data == NATIVE


@dataclass(frozen=True)
class CpuNativeKernelsPass(ModulePass):
    """Mark the params, products, gathers and f16 attention that the native kernels compute."""

    name = "cpu-native-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        op.attributes[MODULE_ATTR] = StringAttr(NATIVE)
        # A weight is bound once for every entry: it is native when every entry reads it so.
        params: dict[str, list[O.ParamOp]] = {}
        for inner in op.walk():
            if isinstance(inner, O.ParamOp):
                params.setdefault(inner.tensor_name.data, []).append(inner)
            elif isinstance(inner, O.FlashAttnExtOp):
                if all(isinstance(O.elem_of(v), Float16Type) for v in (inner.k, inner.v)):
                    inner.attributes[KERNEL_ATTR] = StringAttr(NATIVE)
        for reads in params.values():
            self._mark_weight(reads)

    @staticmethod
    def _mark_weight(reads: list[O.ParamOp]) -> None:
        kinds = {(native_weight_type(p), p.result.type) for p in reads}
        if len(kinds) != 1 or next(iter(kinds))[0] is None:
            return
        rank = len(O.shape_of(reads[0].result))
        uses = [u for p in reads for u in p.result.uses]
        if not uses or not all(_weight_use(u.operation, u.index, rank) for u in uses):
            return
        repacked = (native_weight_type(reads[0]) in REPACKED_TYPES and O.shape_of(reads[0].result)[0] % 8 == 0
                    and all(isinstance(u.operation, O.MulMatOp) for u in uses))
        for p in reads:
            p.attributes[KERNEL_ATTR] = StringAttr(NATIVE)
        for u in uses:
            u.operation.attributes[KERNEL_ATTR] = StringAttr(NATIVE)
            if repacked:
                u.operation.attributes[ORDER_ATTR] = StringAttr(REPACKED)
