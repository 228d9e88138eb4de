"""The sampler function (`@sample_logits`, one `op.sample` over its arguments) at the blueprint
level: the same arguments as edges, one `blueprint.sample` node.

    func.func @sample_logits(%logits: !blueprint.edge<"n", "vocab", f32>, %key: !blueprint.edge<"1", "2", i64>,
                             %step: !blueprint.edge<"1", "1", i32>, %temperature: !blueprint.edge<"n", "1", f32>,
                             ..., %output_counts: !blueprint.edge<"n", "vocab", i32>)
        -> !blueprint.edge<"n", "1", i32> attributes {blueprint.mode = "decode", blueprint.rows = R,
                                                       blueprint.dims = #blueprint.dims<vocab = V>, ...}

A per-row parameter given once for every row ([1] at the op level) is a one-row edge ("1").
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i32, i64
from xdsl.ir import Block, BlockArgument, Region, SSAValue

from strata.dialects import blueprint as B
from strata.dialects import op as O
from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.facts import DimsAttr, WeightsAttr
from strata.passes.convert_op_to_blueprint.graph import ConversionError


def is_sampler(fn: func.FuncOp) -> bool:
    """Whether `fn` is a sampler function: its only compute op is one `op.sample`."""
    ops = [op for op in fn.body.block.ops if not isinstance(op, func.ReturnOp)]
    return len(ops) == 1 and isinstance(ops[0], O.SampleOp)


def convert_sampler(fn: func.FuncOp) -> func.FuncOp:
    """The blueprint function of the sampler function `fn` (the module docstring's)."""
    (sample,) = [op for op in fn.body.block.ops if isinstance(op, O.SampleOp)]
    name = fn.sym_name.data
    if any(not isinstance(v, BlockArgument) for v in sample.operands):
        raise ConversionError(f"convert-op-to-blueprint: @{name}: op.sample must read the function's arguments")
    rows, vocab = sample.logits.type.get_shape()  # type: ignore[attr-defined]
    if rows < 1:
        raise ConversionError(f"convert-op-to-blueprint: @{name}: the sampler needs a static number of rows")

    def edge_of(v: SSAValue) -> EdgeType:
        shape = v.type.get_shape()  # type: ignore[attr-defined]
        elem = v.type.get_element_type()  # type: ignore[attr-defined]
        if v is sample.logits or v is sample.prompt_counts or v is sample.output_counts:
            return EdgeType("n", "vocab", elem)
        if v is sample.mask:
            return EdgeType("n", "vocab_words", elem)
        if v is sample.key:
            return EdgeType("1", "2", i64)
        if v is sample.step:
            return EdgeType("1", "1", elem)
        return EdgeType("1" if shape[0] == 1 else "n", "1", elem)

    args = list(fn.body.block.args)
    types = [edge_of(a) for a in args]
    block = Block(arg_types=types)
    for old, new in zip(args, block.args):
        new.name_hint = old.name_hint
    by_old = dict(zip(args, block.args))
    operands = [by_old[v] for v in sample.operands]
    node = B.SampleOp.build(operands=operands, result_types=[EdgeType("n", "1", i32)],
                            attributes={"node": StringAttr("sampler.sample")})
    node.results[0].name_hint = "ids"
    block.add_ops([node, func.ReturnOp(node.results[0])])
    out = func.FuncOp(name, (types, [node.results[0].type]), Region(block))
    out.attributes.update({
        "blueprint.mode": StringAttr("decode"),
        "blueprint.rows": IntegerAttr(rows, i64),
        "blueprint.layers": ArrayAttr([]),
        "blueprint.dims": DimsAttr({"vocab": vocab, "vocab_words": -(-vocab // 32)}),
        "blueprint.weights": WeightsAttr([]),
        "blueprint.state": DictionaryAttr({}),
    })
    return out
