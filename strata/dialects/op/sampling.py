"""Token sampling: one id per row of logits, drawn by the counter-based sampler of
`strata.semantics.sampling` (penalties, temperature, top-k, top-p, min-p, Philox 4x32-10)."""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType, f32, i32, i64
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.irdl import AttrSizedOperandSegments, irdl_op_definition, operand_def, opt_operand_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.op.base import OpBase, check_float, dim_eq, elem_of, fmt_shape, require, shape_of, shapes_eq
from strata.ir.dtypes import AnyTensor, FloatTensor, IntTensor, is_int

#: The name of a program's sampler function (`sampler_function`).
SAMPLER = "sample_logits"
#: The per-row parameters of `op.sample`, in operand order, with their element kind.
SAMPLE_PARAMS = (("temperature", "f32"), ("top_k", "i32"), ("top_p", "f32"), ("min_p", "f32"),
                 ("repetition_penalty", "f32"), ("presence_penalty", "f32"), ("frequency_penalty", "f32"))


@irdl_op_definition
class SampleOp(OpBase):
    """Sample one token id per row of `logits` [R, V]: int32 [R].

    The semantics are `strata.semantics.sampling.sample` (its docstring defines them): per row,
    the repetition, frequency and presence penalties over the token counts, then temperature
    (0: greedy, the first index of the maximum), top-k, top-p and min-p, then one draw by the
    inverse CDF from the 32-bit Philox 4x32-10 word of (key, step, row):
    `tl.randint(key[0], key[1] + step * 2**32 + row)`. The op is stateless (the same operands
    give the same ids), hence `Pure`.

    Operands: `key` [2] i64 (the module level's `key: Tensor[2; i64]`); `step` [1] (an integer below
    2**31: the draw's counter, a generation's step); then the per-row parameters, each [R] or
    [1] (one value for every row): `temperature`, `top_k` (i32, <= 0: off), `top_p`, `min_p`,
    `repetition_penalty`, `presence_penalty`, `frequency_penalty` (f32); optionally `counts`:
    `prompt_counts` and `output_counts` [R, V] i32, how often each token occurs in each row's
    prompt and output so far (absent: no token has occurred, the penalties do nothing);
    optionally `mask` [R, ceil(V/32)] i32, the tokens each row may draw (a grammar's; bit j of
    word w allows token 32 * w + j, as llguidance and xgrammar write it), applied first: a
    disallowed token's logit is -inf (absent: every token is allowed).

        %ids = op.sample %logits, %key, %step, %t, %k, %p, %m, %rep, %pres, %freq
            : tensor<1x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>,
              tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32> -> tensor<1xi32>
        %ids = op.sample %logits, %key, %step, %t, %k, %p, %m, %rep, %pres, %freq counts %pc, %oc
            : tensor<4x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<4xf32>, tensor<1xi32>, tensor<1xf32>,
              tensor<1xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>, tensor<4x48xi32>, tensor<4x48xi32>
            -> tensor<4xi32>
        %ids = op.sample %logits, %key, %step, %t, %k, %p, %m, %rep, %pres, %freq mask %allowed
            : tensor<1x48xf32>, tensor<2xi64>, tensor<1xi32>, tensor<1xf32>, tensor<1xi32>, tensor<1xf32>,
              tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32> mask tensor<1x2xi32> -> tensor<1xi32>
    """

    name = "op.sample"
    logits = operand_def(FloatTensor)
    key = operand_def(IntTensor)
    step = operand_def(IntTensor)
    temperature = operand_def(FloatTensor)
    top_k = operand_def(IntTensor)
    top_p = operand_def(FloatTensor)
    min_p = operand_def(FloatTensor)
    repetition_penalty = operand_def(FloatTensor)
    presence_penalty = operand_def(FloatTensor)
    frequency_penalty = operand_def(FloatTensor)
    prompt_counts = opt_operand_def(IntTensor)
    output_counts = opt_operand_def(IntTensor)
    mask = opt_operand_def(IntTensor)
    result = result_def(AnyTensor)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$logits `,` $key `,` $step `,` $temperature `,` $top_k `,` $top_p `,` $min_p `,` $repetition_penalty `,` "
        "$presence_penalty `,` $frequency_penalty (`counts` $prompt_counts^ `,` $output_counts)? (`mask` $mask^)? attr-dict "
        "`:` type($logits) `,` type($key) `,` type($step) `,` type($temperature) `,` type($top_k) `,` type($top_p) "
        "`,` type($min_p) `,` type($repetition_penalty) `,` type($presence_penalty) `,` type($frequency_penalty) "
        "(`,` type($prompt_counts)^ `,` type($output_counts))? (`mask` type($mask)^)? `->` type($result)"
    )

    @property
    def params(self) -> tuple[SSAValue, ...]:
        """The per-row parameters, in `SAMPLE_PARAMS` order."""
        return (self.temperature, self.top_k, self.top_p, self.min_p, self.repetition_penalty,
                self.presence_penalty, self.frequency_penalty)

    def verify_(self) -> None:
        lg = shape_of(self.logits)
        require(len(lg) == 2, f"op.sample: logits must be [rows, vocab], got {fmt_shape(lg)}")
        check_float(self, self.logits, "logits")
        rows = lg[0]
        require(shape_of(self.key) == (2,) and is_int(elem_of(self.key), 64), "op.sample: key must be tensor<2xi64>")
        require(shape_of(self.step) == (1,) and is_int(elem_of(self.step)) and elem_of(self.step).width.data in (32, 64),
                "op.sample: step must be tensor<1xi32> or tensor<1xi64>")
        for (name, kind), v in zip(SAMPLE_PARAMS, self.params):
            s = shape_of(v)
            require(len(s) == 1 and (s[0] == 1 or dim_eq(s[0], rows)),
                    f"op.sample: {name} must be [1] or one value per row [{fmt_shape((rows,))}], got {fmt_shape(s)}")
            ok = is_int(elem_of(v), 32) if kind == "i32" else str(elem_of(v)) == "f32"
            require(ok, f"op.sample: {name} must be {kind}, got {elem_of(v)}")
        counts = (self.prompt_counts, self.output_counts)
        require((counts[0] is None) == (counts[1] is None), "op.sample: prompt_counts and output_counts go together")
        for name, c in zip(("prompt_counts", "output_counts"), counts):
            if c is not None:
                require(shapes_eq(shape_of(c), lg) and is_int(elem_of(c), 32),
                        f"op.sample: {name} must be tensor<{fmt_shape(lg)}xi32>, got {c.type}")
        if self.mask is not None:
            words = (rows, -(-lg[1] // 32) if lg[1] != DYNAMIC_INDEX else DYNAMIC_INDEX)
            require(shapes_eq(shape_of(self.mask), words) and is_int(elem_of(self.mask), 32),
                    f"op.sample: mask must be tensor<{fmt_shape(words)}xi32> (a bit per token), got {self.mask.type}")
        r = shape_of(self.result)
        require(len(r) == 1 and dim_eq(r[0], rows) and is_int(elem_of(self.result), 32),
                f"op.sample: result must be tensor<{fmt_shape((rows,))}xi32>")


def sampler_function(vocab: int, rows: int = 1, logits_elem: Attribute = f32) -> func.FuncOp:
    """A program's sampler, `@sample_logits`: `op.sample` over its arguments (the logits [rows,
    vocab], the key, the step, each per-row parameter [rows], both counts [rows, vocab] and the
    token mask [rows, ceil(vocab/32)], all ones for an unconstrained row), returning the ids
    [rows] (the IR is in `strata.passes.add_sampler`'s docstring)."""
    per_row = {"f32": TensorType(f32, [rows]), "i32": TensorType(i32, [rows])}
    counts = TensorType(i32, [rows, vocab])
    args: list[tuple[str, Attribute]] = [("logits", TensorType(logits_elem, [rows, vocab])),
                                         ("key", TensorType(i64, [2])), ("step", TensorType(i32, [1]))]
    args += [(name, per_row[kind]) for name, kind in SAMPLE_PARAMS]
    args += [("prompt_counts", counts), ("output_counts", counts), ("mask", TensorType(i32, [rows, -(-vocab // 32)]))]
    block = Block(arg_types=[t for _, t in args])
    for (name, _), arg in zip(args, block.args):
        arg.name_hint = name
    sample = SampleOp.build(operands=list(block.args), result_types=[TensorType(i32, [rows])])
    sample.results[0].name_hint = "ids"
    block.add_ops([sample, func.ReturnOp(sample.results[0])])
    return func.FuncOp(SAMPLER, ([t for _, t in args], [sample.results[0].type]), Region(block))
