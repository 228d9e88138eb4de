"""quantize-w4a16{block=128}: choose the weights that become int4 (w4a16: 4-bit weights, float
activations) on the op level; `quantize_weights` carries the choice out with ONNX Runtime's
block-wise asymmetric formula and MatMulNBits' packing (`strata.ir.int4`): `strata.quant.w4a16`.

The pass decides and records, as `smoothquant` does (weights never enter the IR): on each
op-level function, `w4a16.block` and `w4a16.weights`, the llama.cpp names of every projection
and the LM head (every `op.mul_mat` whose weight is a 2-D `op.param`), in program order. A
weight is left out, and listed in `w4a16.skipped` with the reason, when it is read through a
conversion or also read by something other than a mul_mat's weight operand (a tied embedding:
quantizing it would change the lookup too). MatMulNBits needs the block to be a power of two
>= 16.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr, i64

from strata.dialects import op as O
from strata.errors import StrataError
from strata.passes.options import StrataPass

__all__ = ["QuantizeW4A16Pass", "W4A16Error", "check_block", "targets_of", "plan_of"]


class W4A16Error(StrataError):
    """A w4a16 plan that cannot be made or carried out."""


def check_block(block: int) -> int:
    if isinstance(block, bool) or not isinstance(block, int) or block < 16 or block & (block - 1):
        raise W4A16Error(f"quantize-w4a16: block must be a power of two >= 16 (MatMulNBits), got {block!r}")
    return block


def targets_of(fn: func.FuncOp) -> tuple[list[str], list[tuple[str, str]]]:
    """(the weights of `fn` to quantize, [(weight, why it is left out)])."""
    readers: dict[str, list[O.ParamOp]] = {}
    for op in fn.walk():
        if isinstance(op, O.ParamOp):
            readers.setdefault(op.stored_name, []).append(op)
    names: list[str] = []
    skipped: dict[str, str] = {}
    for op in fn.walk():
        if not (isinstance(op, O.MulMatOp) and isinstance(op.operands[0].owner, O.ParamOp)):
            continue
        p = op.operands[0].owner
        name = p.tensor_name.data
        if name in names or name in skipped:
            continue
        uses = [u for q in readers[p.stored_name] for u in q.result.uses]
        if p.conversion is not None or p.source is not None:
            skipped[name] = f"read from '{p.stored_name}'" + (" through a conversion" if p.conversion else "")
        elif len(p.result.type.get_shape()) != 2:  # type: ignore[attr-defined]
            skipped[name] = "not a 2-D weight"
        elif any(not (isinstance(u.operation, O.MulMatOp) and u.index == 0) for u in uses):
            other = next(u.operation.name for u in uses if not (isinstance(u.operation, O.MulMatOp) and u.index == 0))
            skipped[name] = f"also read by {other}"
        else:
            names.append(name)
    # A tied weight read as both a lookup and a head is skipped once, under the head's name.
    return names, list(skipped.items())


def plan_of(fn: func.FuncOp) -> tuple[list[str], int]:
    """The weights and block the pass recorded on `fn`."""
    names = fn.attributes.get("w4a16.weights")
    block = fn.attributes.get("w4a16.block")
    if not isinstance(names, ArrayAttr) or not isinstance(block, IntegerAttr):
        raise W4A16Error(f"@{fn.sym_name.data}: no w4a16 plan (run the quantize-w4a16 pass)")
    return [s.data for s in names.data], int(block.value.data)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class QuantizeW4A16Pass(StrataPass):
    """Record which weights become int4 (block-wise asymmetric, MatMulNBits) on every op-level function."""

    name = "quantize-w4a16"

    block: int = 128

    def check(self) -> None:
        check_block(self.block)

    def apply(self, ctx: Context, module: ModuleOp) -> None:  # noqa: D102
        block = check_block(self.block)
        for fn in module.walk():
            if not isinstance(fn, func.FuncOp) or not any(isinstance(o, O.MulMatOp) for o in fn.walk()):
                continue
            names, skipped = targets_of(fn)
            fn.attributes["w4a16.block"] = IntegerAttr(block, i64)
            fn.attributes["w4a16.weights"] = ArrayAttr([StringAttr(n) for n in names])
            if skipped:
                fn.attributes["w4a16.skipped"] = ArrayAttr(
                    [ArrayAttr([StringAttr(n), StringAttr(why)]) for n, why in skipped])
