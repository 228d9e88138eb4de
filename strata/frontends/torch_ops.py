"""Lower a `torch.export` graph's ATen ops directly to Strata's op level (one `func.func`).

    from strata.frontends.torch_ops import capture_ops, weights_of
    module_ir = capture_ops(model, (ids,))             # func @forward of op.* ops
    fn = find_function(module_ir)
    logits = run_function(fn, weights_of(model), {}, ids[0].numpy(), 0)   # strata.semantics.op_interp

This is the path for a token-id module that is not a causal LM of recognised blocks
(`strata.frontends.torch.capture` takes those to the module level): every ATen op is
mapped to ggml-like ops, for the shapes of the example input (batch 1, static sequence).
The token ids are the function's `op.input "tokens"`; the module's parameters are
`op.param`s named by their state_dict keys (`weights_of` gives their values).

Supported ATen ops (anything else is a one-line `CaptureError` naming the op and its
module path):

| ATen | op level |
|---|---|
| embedding | GET_ROWS (then RESHAPE to [1, S, H]) |
| linear | MUL_MAT (+ ADD of the bias) |
| matmul, bmm, mm | MUL_MAT of the lhs by the transposed rhs (PERMUTE, CONT) |
| add, mul, div (tensors, broadcasting the smaller) | ADD, MUL, DIV |
| add, sub, mul, div by a scalar; neg | SCALE (add/sub of a non-zero scalar is unsupported) |
| sub (tensors) | ADD of SCALE(-1) |
| pow(x, 2) | MUL(x, x) |
| mean over the last dim, keepdim | SUM_ROWS, SCALE(1/n) |
| silu, sigmoid | SILU, SIGMOID |
| softmax over the last dim | SOFT_MAX |
| view, reshape, flatten, unflatten, unsqueeze, squeeze | CONT, RESHAPE |
| transpose, permute | PERMUTE, CONT |
| to (same dtype), clone, contiguous, detach, alias, dropout (eval) | (nothing) |

Ops on values that do not depend on the tokens are not lowered: such a value must be a
parameter (or a view of one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseArrayBase, FloatAttr, ModuleOp, TensorType, f32, f64, i32, i64
from xdsl.ir import Block, Operation, SSAValue

from strata.dialects import op as O
from strata.frontends.torch_graph import CaptureError, Graph, full_op_name, module_stack, op_name, shape

__all__ = ["capture_ops", "weights_of", "SUPPORTED"]

_IDENTITY = frozenset({"to", "_to_copy", "clone", "contiguous", "detach", "alias", "dropout", "lift_fresh_copy",
                       "type_as"})
_RESHAPE = frozenset({"view", "reshape", "_unsafe_view", "flatten", "unflatten", "unsqueeze", "squeeze"})
SUPPORTED = sorted(_IDENTITY | _RESHAPE | {"embedding", "linear", "matmul", "bmm", "mm", "add", "sub", "mul", "div",
                                           "neg", "pow", "mean", "silu", "sigmoid", "softmax", "_softmax",
                                           "transpose", "t", "permute", "_assert_tensor_metadata"})


def weights_of(module: Any) -> dict[str, np.ndarray]:
    """The module's parameters as float32 arrays, by state_dict key (what capture_ops names)."""
    return {k: v.detach().float().cpu().numpy() for k, v in module.state_dict().items()}


def capture_ops(module: Any, example_inputs: tuple) -> ModuleOp:
    """The op level of `module` (token ids [1, S] in), lowered ATen op by ATen op."""
    import torch

    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    ids = inputs[0] if inputs else None
    if len(inputs) != 1 or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != 1 \
            or ids.dtype.is_floating_point:
        raise CaptureError("example_inputs must be one integer tensor of token ids [1, seq]")
    module.eval()
    try:
        ep = torch.export.export(module, inputs)
    except Exception as e:  # noqa: BLE001 - torch.export raises many kinds; the first line says why
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise CaptureError(f"torch.export could not trace {type(module).__name__}: {first}") from None
    return _Lowerer(Graph(ep, module)).run()


class _Lowerer:
    def __init__(self, graph: Graph):
        self.g = graph
        self.block = Block()
        self.values: dict[Any, SSAValue] = {}

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def un(self, cls, x: SSAValue, shp, **attrs) -> SSAValue:
        return self.add(cls.create(operands=[x], result_types=[TensorType(f32, shp)], attributes=attrs))

    def bin(self, cls, a: SSAValue, b: SSAValue, shp) -> SSAValue:
        return self.add(cls.create(operands=[a, b], result_types=[TensorType(f32, shp)]))

    def scale(self, x: SSAValue, s: float) -> SSAValue:
        return self.un(O.ScaleOp, x, O.shape_of(x), scale=FloatAttr(float(s), f64))

    def reshape(self, x: SSAValue, shp) -> SSAValue:
        x = self.un(O.ContOp, x, O.shape_of(x))
        return self.un(O.ReshapeOp, x, tuple(shp))

    def permute(self, x: SSAValue, dims) -> SSAValue:
        s = O.shape_of(x)
        dims = [d % len(s) for d in dims]
        p = self.un(O.PermuteOp, x, tuple(s[d] for d in dims), dims=DenseArrayBase.from_list(i64, dims))
        return self.un(O.ContOp, p, O.shape_of(p))

    def value(self, arg: Any, node: Any) -> SSAValue:
        if arg in self.values:
            return self.values[arg]
        key = self.g.params.get(getattr(arg, "name", None)) or self.g.buffers.get(getattr(arg, "name", None))
        if key is None:
            raise CaptureError(f"torch capture: {full_op_name(node)} in {_where(node)} reads '{getattr(arg, 'name', arg)}', "
                               "which is neither computed from the tokens nor a parameter")
        v = self.add(O.ParamOp(key, TensorType(f32, shape(arg))))
        self.values[arg] = v
        return v

    def run(self) -> ModuleOp:
        g = self.g
        s = shape(g.tokens)[1]
        self.values[g.tokens] = self.add(O.InputOp("tokens", TensorType(i32, (s,)), "inp_tokens"))
        for node in g.calls:
            self.values[node] = self.lower(node)
        result = self.values.get(g.result)
        if result is None:
            raise CaptureError("torch capture: the module's result does not depend on the tokens")
        self.block.add_op(func.ReturnOp(result))
        fn = func.FuncOp("forward", ([], [result.type]), func.Region(self.block))
        module = ModuleOp([fn])
        module.verify()
        return module

    def lower(self, node: Any) -> SSAValue:  # noqa: C901 - one case per ATen op
        name, out = op_name(node), shape(node)
        a = node.args
        tensors = [x for x in a if hasattr(x, "op")]
        v = [self.value(x, node) for x in tensors]
        if name == "_assert_tensor_metadata":
            return v[0]
        if name in _IDENTITY:
            if str(node.meta["val"].dtype) != "torch.float32" and node is not self.g.tokens:
                raise self.unsupported(node, f"casts to {node.meta['val'].dtype}")
            return v[0]
        if name == "embedding":
            rows = self.bin(O.GetRowsOp, v[0], v[1], (out[1], out[2]))
            return self.un(O.ReshapeOp, rows, out)
        if name == "linear":
            y = self.bin(O.MulMatOp, v[1], v[0], out)
            return self.bin(O.AddOp, y, v[2], out) if len(v) > 2 else y
        if name in ("matmul", "bmm", "mm"):
            b = v[1]
            bt = self.permute(b, [*range(len(O.shape_of(b)) - 2), len(O.shape_of(b)) - 1, len(O.shape_of(b)) - 2])
            return self.bin(O.MulMatOp, bt, v[0], out)
        if name in ("add", "sub", "mul", "div") and len(v) == 1:
            scalar = next((x for x in a if isinstance(x, (int, float)) and not isinstance(x, bool)), None)
            if scalar is None or (name in ("add", "sub") and scalar != 0):
                raise self.unsupported(node, "with a scalar it has no ggml op for")
            s = {"mul": scalar, "div": 1.0 / scalar if scalar else None}.get(name, 1.0)
            if s is None:
                raise self.unsupported(node, "divides by 0")
            return self.scale(v[0], s) if name in ("mul", "div") else v[0]
        if name in ("add", "mul", "div", "sub") and len(v) == 2:
            x, y = v
            if name == "sub":
                y, name = self.scale(y, -1.0), "add"
            if tuple(O.shape_of(x)) != tuple(out) and name != "div":
                x, y = y, x  # ggml repeats the second operand into the first
            if not O.can_repeat(O.shape_of(y), O.shape_of(x)) or tuple(O.shape_of(x)) != tuple(out):
                raise self.unsupported(node, f"broadcasts {O.shape_of(v[0])} with {O.shape_of(v[1])}")
            return self.bin({"add": O.AddOp, "mul": O.MulOp, "div": O.DivOp}[name], x, y, out)
        if name == "neg":
            return self.scale(v[0], -1.0)
        if name == "pow" and a[1] == 2:
            return self.bin(O.MulOp, v[0], v[0], out)
        if name == "mean" and list(a[1]) in ([-1], [len(shape(a[0])) - 1]) and (len(a) > 2 and a[2]):
            n = shape(a[0])[-1]
            return self.scale(self.un(O.SumRowsOp, v[0], out), 1.0 / n)
        if name in ("silu", "sigmoid"):
            return self.un(O.SiluOp if name == "silu" else O.SigmoidOp, v[0], out)
        if name in ("softmax", "_softmax") and a[1] in (-1, len(out) - 1):
            return self.un(O.SoftMaxOp, v[0], out, scale=FloatAttr(1.0, f64))
        if name in _RESHAPE:
            return self.reshape(v[0], out)
        if name in ("transpose", "t"):
            rank = len(O.shape_of(v[0]))
            i, j = (a[1] % rank, a[2] % rank) if name == "transpose" else (0, 1)
            dims = list(range(rank))
            dims[i], dims[j] = dims[j], dims[i]
            return self.permute(v[0], dims)
        if name == "permute":
            return self.permute(v[0], list(a[1]))
        raise self.unsupported(node, "")

    def unsupported(self, node: Any, why: str) -> CaptureError:
        detail = f" ({why})" if why else ""
        return CaptureError(f"torch capture: unsupported op {full_op_name(node)}{detail} in {_where(node)}: "
                            f"it has no op-level lowering (supported: {', '.join(SUPPORTED)})")


def _where(node: Any) -> str:
    stack = module_stack(node)
    return f"module '{stack[-1]}'" if stack and stack[-1] else "the root module"
