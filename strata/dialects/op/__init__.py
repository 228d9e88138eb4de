"""The `op` dialect: ggml-like tensor operations (the ggml ops of llama.cpp's graph).

Every op has ggml's semantics, but shapes are ordinary row-major tensor types:
ggml's `{4096, 5, 1, 1}` (fastest dimension first) is `tensor<5x4096xf32>` here.
The trace exporter (`strata.exporters.trace`) converts back to ggml order. Where a
ggml op takes a dimension number (CONCAT), the IR stores the row-major axis instead.

Leaves are ops too: `op.param` names a weight in the weight store, `op.state` a
persistent buffer (the KV cache, a recurrent state), `op.input` a value the host
prepares for an entry (tokens, positions, cache rows, mask, output rows, state slots),
`op.constant` a small derived table. Every op may carry a `name` attribute: the ggml
tensor name (`Qcur-0`), and an `op.block` attribute: the module-level block instance it
was expanded from (`origin`).

Types are builtin tensors so that the later levels can refine them in place: a
quantized weight (kbp-graph/v1's fp8 block128x128, Chimera's int4 block-128 asymmetric)
is a tensor whose `encoding` names its format, and a FixedPoint32<frac> value (Quadric
Chimera's) is a tensor of a fixed-point element type; shapes, names and op semantics stay.

State is a buffer, as in ggml: `op.set_rows` writes rows into an `op.state` and
returns the written tensor, `op.cpy` into an `op.view` of one writes it whole; later
ops that read the same `op.state` value see the write because ops execute in program
order. The effects say so to every pass: `op.state` reads memory, `op.set_rows` and
`op.cpy` write it, and every other op is `Pure`, so xDSL's generic `cse` and `dce`
keep the order of reads and writes.

Element types come from the one dtype table (`strata.ir.dtypes`): "float" admits f32,
f16, bf16 and fp8; a weight may also be an integer or packed int4 tensor.

The ops live in files by theme: `base` (shape helpers, abstract bases), `leaves`,
`elementwise`, `reduce` (row-wise), `layout` (views, REPEAT, CONCAT, GET_ROWS),
`matmul` (MUL_MAT, MUL_MAT_ID), `state` (the writes), `attention` (SOFT_MAX, ROPE,
FLASH_ATTN_EXT), `ssm` (SSM_CONV, GATED_DELTA_NET and its many-sequence form), `loops` (the
device loops of generate, sample and generate_until), `collective` (ALL_REDUCE, ALL_GATHER and the
vocabulary-parallel GET_ROWS of a tensor-parallel entry) and `sampling` (`op.sample`: the
runtime's sampler, which llama.cpp runs outside its graph).
"""

from __future__ import annotations

from xdsl.ir import Dialect

from strata.dialects.op.attention import MULTI_ROPE_MODES, ROPE_MODES, FlashAttnExtOp, RopeOp, SoftMaxOp
from strata.dialects.op.base import (
    BinaryOp,
    ElementwiseBinaryOp,
    ElementwiseUnaryOp,
    LeafOp,
    OpBase,
    UnaryOp,
    can_repeat,
    check_float,
    dim_eq,
    fmt_shape,
    numel,
    shapes_eq,
)
from strata.dialects.op.collective import (
    COLLECTIVE_OPS,
    GROUPS,
    AllGatherOp,
    AllReduceOp,
    CollectiveOp,
    GetRowsShardedOp,
    MulMatIdShardedOp,
    group_attrs,
)
from strata.dialects.op.elementwise import (
    AddOp,
    ClampOp,
    DivOp,
    MulOp,
    ScaleOp,
    SigmoidOp,
    SiluOp,
    SoftplusOp,
    SwigluOp,
)
from strata.dialects.op.layout import (
    ConcatOp,
    ContOp,
    GetRowsOp,
    PermuteOp,
    RepeatOp,
    ReshapeLikeOp,
    ReshapeOp,
    TransposeOp,
    ViewOp,
)
from strata.dialects.op.leaves import INPUT_KINDS, LEAF_OPS, PARAM_CONVERSIONS, ConstantOp, InputOp, ParamOp, StateOp
from strata.dialects.op.loops import GenerateOp, GenerateSampledOp, GenerateUntilOp
from strata.dialects.op.matmul import MulMatIdOp, MulMatOp, TargetLogProbsOp
from strata.dialects.op.origin import ORIGIN, BlockOriginAttr, origin_of
from strata.dialects.op.reduce import SORT_ORDERS, ArgmaxOp, ArgsortOp, RmsNormOp, SumRowsOp
from strata.dialects.op.sampling import SAMPLE_PARAMS, SAMPLER, SampleOp, sampler_function
from strata.dialects.op.ssm import GatedDeltaNetOp, GatedDeltaNetSeqOp, SsmConvOp
from strata.dialects.op.state import CpyOp, SetRowsOp
from strata.ir.checks import elem_of, require, shape_of

Op = Dialect(
    "op",
    [
        ParamOp,
        StateOp,
        InputOp,
        ConstantOp,
        GetRowsOp,
        RmsNormOp,
        MulOp,
        AddOp,
        MulMatOp,
        ReshapeOp,
        ViewOp,
        PermuteOp,
        TransposeOp,
        ContOp,
        ScaleOp,
        CpyOp,
        ArgmaxOp,
        SwigluOp,
        SetRowsOp,
        SoftMaxOp,
        RopeOp,
        FlashAttnExtOp,
        # The hybrid and MoE families (Qwen3-MoE, Qwen3.5, Qwen3-Next).
        DivOp,
        ClampOp,
        SiluOp,
        SigmoidOp,
        SoftplusOp,
        SumRowsOp,
        ArgsortOp,
        RepeatOp,
        ConcatOp,
        MulMatIdOp,
        SsmConvOp,
        GatedDeltaNetOp,
        # Tensor parallelism (see `collective`).
        AllReduceOp,
        AllGatherOp,
        GetRowsShardedOp,
        MulMatIdShardedOp,
        # Batches of sequences, packed segments, scores and device loops (the module level's entries).
        GatedDeltaNetSeqOp,
        TargetLogProbsOp,
        GenerateOp,
        GenerateUntilOp,
        GenerateSampledOp,
        # Sampling (the runtime's sampler, in the program).
        SampleOp,
    ],
    [BlockOriginAttr],
)

__all__ = [
    "INPUT_KINDS", "LEAF_OPS", "PARAM_CONVERSIONS", "MULTI_ROPE_MODES", "ROPE_MODES", "SORT_ORDERS", "Op",
    "OpBase", "LeafOp", "UnaryOp", "BinaryOp", "ElementwiseUnaryOp", "ElementwiseBinaryOp", "ReshapeLikeOp",
    "shape_of", "elem_of", "fmt_shape", "dim_eq", "shapes_eq", "numel", "can_repeat", "require", "check_float",
    "ParamOp", "StateOp", "InputOp", "ConstantOp",
    "GetRowsOp", "RmsNormOp", "MulOp", "AddOp", "MulMatOp", "ReshapeOp", "ViewOp", "PermuteOp", "TransposeOp",
    "ContOp", "ScaleOp", "CpyOp", "ArgmaxOp", "SwigluOp", "SetRowsOp", "SoftMaxOp", "RopeOp", "FlashAttnExtOp",
    "DivOp", "ClampOp", "SiluOp", "SigmoidOp", "SoftplusOp", "SumRowsOp", "ArgsortOp", "RepeatOp", "ConcatOp",
    "MulMatIdOp", "SsmConvOp", "GatedDeltaNetOp", "SAMPLE_PARAMS", "SAMPLER", "SampleOp", "sampler_function",
    "COLLECTIVE_OPS", "GROUPS", "CollectiveOp", "AllReduceOp", "AllGatherOp", "GetRowsShardedOp", "MulMatIdShardedOp",
    "group_attrs", "GatedDeltaNetSeqOp", "TargetLogProbsOp", "GenerateOp", "GenerateUntilOp",
    "GenerateSampledOp", "ORIGIN", "BlockOriginAttr", "origin_of",
]
