"""Device loops: an entry that runs a step function many times, feeding each step the token
the previous one chose (the module level's generate, sample and generate_until).

The step is a `func.func` of the same module (its `op.call` is a decode's: one token per row
at one position) that returns the chosen ids, one per row; it writes the KV cache and the
recurrent state as a decode does. The loop calls it with the entry's call, the tokens
replaced by the last choice and the position advanced by one per step; a step that samples
reads the entry's key and temperature, and its step number.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, SymbolRefAttr
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, SymbolTable

from strata.dialects.op.base import OpBase, elem_of, fmt_shape, require, shape_of, shapes_eq
from strata.ir.dtypes import FloatTensor, IntTensor, is_int


class _LoopOp(OpBase):
    def _verify_loop(self) -> None:
        name = self.name
        t, p, r = shape_of(self.tokens), shape_of(self.start), shape_of(self.ids)
        n = self.steps.value.data
        require(n >= 1, f"{name}: steps must be at least 1, got {n}")
        require(len(t) == 1 and is_int(elem_of(self.tokens), 32), f"{name}: tokens must be [Batch] i32, got {self.tokens.type}")
        require(p == (1,), f"{name}: start must hold one position, got {fmt_shape(p)}")
        require(shapes_eq(r, (t[0], n)) and is_int(elem_of(self.ids), 32),
                f"{name}: the ids must be tensor<{fmt_shape((t[0], n))}xi32>, got {self.ids.type}")
        module = self.parent_op()
        while module is not None and not isinstance(module, ModuleOp):
            module = module.parent_op()
        if module is None:
            return  # a loop outside a module (a fragment being built) is checked when it is placed
        step = SymbolTable.lookup_symbol(module, self.callee)
        require(isinstance(step, func.FuncOp), f"{name}: no step function {self.callee}")
        outs = step.function_type.outputs.data  # type: ignore[union-attr]
        ok = len(outs) == 1 and shapes_eq(shape_of(outs[0]), t) and is_int(elem_of(outs[0]), 32)
        require(ok, f"{name}: the step {self.callee} must return the chosen ids tensor<{fmt_shape(t)}xi32>")


@irdl_op_definition
class GenerateOp(_LoopOp):
    """`steps` steps of `callee` from `tokens` [Batch] at position `start` [1]: step i runs
    the previous step's ids (the tokens, for step 0) at position start + i; the result
    [Batch, steps] i32 holds every step's ids.

        %ids = op.generate @greedy_step %t, %p {steps = 8 : i64} : tensor<1xi32>, tensor<1xi32> -> tensor<1x8xi32>
    """

    name = "op.generate"
    callee = attr_def(SymbolRefAttr)
    steps = attr_def(IntegerAttr)
    tokens = operand_def(IntTensor)
    start = operand_def(IntTensor)
    ids = result_def(IntTensor)
    # The steps read and write the KV cache and the recurrent state.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = "$callee $tokens `,` $start attr-dict `:` type($tokens) `,` type($start) `->` type($ids)"

    def verify_(self) -> None:
        self._verify_loop()


@irdl_op_definition
class GenerateUntilOp(_LoopOp):
    """`op.generate` that stops once every row has chosen `eos` [1] (or after `steps`): the
    ids [Batch, steps] (a row's ids after its eos, and every column past the stop, are eos)
    and the number of steps run, `count` (i32, a scalar tensor).

        %ids, %n = op.generate_until @greedy_step %t, %p, %e {steps = 8 : i64}
            : tensor<1xi32>, tensor<1xi32>, tensor<1xi32> -> tensor<1x8xi32>, tensor<i32>
    """

    name = "op.generate_until"
    callee = attr_def(SymbolRefAttr)
    steps = attr_def(IntegerAttr)
    tokens = operand_def(IntTensor)
    start = operand_def(IntTensor)
    eos = operand_def(IntTensor)
    ids = result_def(IntTensor)
    count = result_def(IntTensor)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = ("$callee $tokens `,` $start `,` $eos attr-dict `:` type($tokens) `,` type($start) `,` type($eos)"
                       " `->` type($ids) `,` type($count)")

    def verify_(self) -> None:
        self._verify_loop()
        require(shape_of(self.eos) == (1,), f"op.generate_until: eos must hold one id, got {fmt_shape(shape_of(self.eos))}")
        c = shape_of(self.count)
        require(c == () and is_int(elem_of(self.count), 32), f"op.generate_until: count must be tensor<i32>, got {self.count.type}")


@irdl_op_definition
class GenerateSampledOp(_LoopOp):
    """`op.generate` whose step draws with the sampler: step i runs `callee` on the previous
    ids at position start + i with the entry's `key` [2] i64 and `temperature` [1] f32, and
    the draw's counter start + i + 1 (the position the drawn token takes, as the runtime's
    loop counts it), so that the loop draws what the runtime's one loop draws.

        %ids = op.generate_sampled @sample_step %t, %p, %k, %temp {steps = 8 : i64}
            : tensor<1xi32>, tensor<1xi32>, tensor<2xi64>, tensor<1xf32> -> tensor<1x8xi32>
    """

    name = "op.generate_sampled"
    callee = attr_def(SymbolRefAttr)
    steps = attr_def(IntegerAttr)
    tokens = operand_def(IntTensor)
    start = operand_def(IntTensor)
    key = operand_def(IntTensor)
    temperature = operand_def(FloatTensor)
    ids = result_def(IntTensor)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    assembly_format = ("$callee $tokens `,` $start `,` $key `,` $temperature attr-dict `:` type($tokens) `,` "
                       "type($start) `,` type($key) `,` type($temperature) `->` type($ids)")

    def verify_(self) -> None:
        self._verify_loop()
        require(shape_of(self.key) == (2,) and is_int(elem_of(self.key), 64),
                f"op.generate_sampled: key must be tensor<2xi64>, got {self.key.type}")
        require(shape_of(self.temperature) == (1,) and str(elem_of(self.temperature)) == "f32",
                f"op.generate_sampled: temperature must be tensor<1xf32>, got {self.temperature.type}")


__all__ = ["GenerateOp", "GenerateUntilOp", "GenerateSampledOp"]
