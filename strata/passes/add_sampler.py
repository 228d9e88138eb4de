"""add-sampler{rows=1}: append the program's sampler, `@sample_logits`, to an op-level module.

The runtime asks a compiled program for the next token of a step (`strata.runtime.program`);
with sampling parameters the program draws it with its own compiled sampler, this function, on
the logits the step returned, where those logits are (on the device for cuda). Its inputs are
its arguments, given by the caller at each step:

    func.func @sample_logits(%logits: tensor<RxVxf32>, %key: tensor<2xi64>, %step: tensor<1xi32>,
                             %temperature: tensor<Rxf32>, %top_k: tensor<Rxi32>, %top_p: tensor<Rxf32>,
                             %min_p: tensor<Rxf32>, %repetition_penalty: tensor<Rxf32>,
                             %presence_penalty: tensor<Rxf32>, %frequency_penalty: tensor<Rxf32>,
                             %prompt_counts: tensor<RxVxi32>, %output_counts: tensor<RxVxi32>,
                             %mask: tensor<RxWxi32>) -> tensor<Rxi32> {
      %ids = op.sample %logits, %key, %step, %temperature, ... counts %prompt_counts, %output_counts mask %mask : ...
      func.return %ids : tensor<Rxi32>
    }

V and the logits' element type are those of the module's entries (which must agree); R is
`rows` (the rows of one step's logits: 1 for one sequence); W = ceil(V / 32), the words of the
token mask (a grammar's allowed tokens, one bit each; all ones for a row with no constraint). In a tensor-parallel module the
sampler carries the entries' `op.ranks`: every rank holds the whole logits and draws the same id.
Its `op.sample` records the model's block instance (`op.block` of the root, as the entries'
host inputs do): the draw is the model's, not one layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute
from xdsl.passes import ModulePass

from strata.dialects.op.origin import ORIGIN, BlockOriginAttr, origin_of
from strata.dialects.op.sampling import SAMPLER, SampleOp, sampler_function
from strata.errors import StrataError


class AddSamplerError(StrataError):
    """A module that cannot take a sampler (no entry, entries of different vocabularies)."""


def _logits_type(module: ModuleOp) -> TensorType:
    """The [rows, V] logits type the module's entries return (V and the element type agree)."""
    found: dict[tuple[int, Attribute], str] = {}
    for fn in module.ops:
        if not isinstance(fn, func.FuncOp) or fn.sym_name.data == SAMPLER:
            continue
        outs = fn.function_type.outputs.data
        if len(outs) != 1 or not isinstance(outs[0], TensorType) or len(outs[0].get_shape()) != 2:
            raise AddSamplerError(f"add-sampler: @{fn.sym_name.data} does not return logits [rows, vocab]")
        found.setdefault((outs[0].get_shape()[1], outs[0].get_element_type()), fn.sym_name.data)
    if not found:
        raise AddSamplerError("add-sampler: the module holds no op-level entry (lower it with convert-module-to-op first)")
    if len(found) > 1:
        raise AddSamplerError("add-sampler: the entries return logits of different vocabularies or types ("
                              + ", ".join(f"@{n}: {v}x{t}" for (v, t), n in found.items()) + ")")
    ((vocab, elem),) = found
    return TensorType(elem, [1, vocab])


@dataclass(frozen=True)
class AddSamplerPass(ModulePass):
    """Append `@sample_logits` (`rows` rows) after the module's entries."""

    name = "add-sampler"

    rows: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 1:
            raise AddSamplerError(f"add-sampler: rows must be a positive integer, got {self.rows!r}")
        if any(isinstance(f, func.FuncOp) and f.sym_name.data == SAMPLER for f in op.ops):
            raise AddSamplerError(f"add-sampler: the module already has @{SAMPLER}")
        typ = _logits_type(op)
        sampler = sampler_function(typ.get_shape()[1], self.rows, typ.get_element_type())
        ranks = {f.attributes["op.ranks"] for f in op.ops if isinstance(f, func.FuncOp) and "op.ranks" in f.attributes}
        if len(ranks) == 1:  # a tensor-parallel program: every rank draws the same id from the same logits
            sampler.attributes["op.ranks"] = ranks.pop()
        model = _model_origin(op)
        if model is not None:
            for sample in sampler.walk():
                if isinstance(sample, SampleOp):
                    sample.attributes[ORIGIN] = model
        op.body.block.add_op(sampler)


def _model_origin(module: ModuleOp) -> BlockOriginAttr | None:
    """The record of the model (the root instance, path "") in the module's entries, if any."""
    for fn in module.ops:
        if isinstance(fn, func.FuncOp):
            for op in fn.walk():
                origin = origin_of(op)
                if origin is not None and origin.instance == "":
                    return origin
    return None
