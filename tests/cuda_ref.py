"""The numpy reference of blueprint groups for the CUDA kernel tests (tests/targets/cuda).

A tiny model's blueprint (`Bp`) gives real groups: their nodes, attributes (eps, rope mode and
sections, attention scale, top-k norm), dims and weights (converted as the function's weight
table says). `Bp.reference(group, inputs)` runs the group's nodes with the blueprint
interpreter's implementation of each node (`run_group`), in f32: weights are
quantized and dequantized as the node's weight format says (the "pre-dequantized" weights), but
activations and outputs are not rounded through bf16 (the Triton interpreter cannot do bf16
arithmetic), so the kernels are compared with the reference's f32 computation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from strata.dialects import blueprint as B
from strata.ir import fp8
from strata.pipeline import blueprint_of, load_model
from strata.semantics.blueprint_interp import Env, quantize_int4_block, run_group
from strata.semantics.op_interp import find_function

RNG = np.random.default_rng(7)


def dim_value(expr: str, dims: dict[str, int]) -> int:
    """An edge's dim expression ("lin_k_heads*lin_k_dim*2+lin_v_heads*lin_v_dim") evaluated."""
    total = 0
    for term in expr.split("+"):
        prod = 1
        for f in term.split("*"):
            prod *= int(f) if f.isdigit() else dims[f]
        total += prod
    return total


class Bp:
    """One blueprint function of a tiny checkpoint, its weights, dims and groups by rule."""

    def __init__(self, directory: Path, mode: str, rows: int, recipe: str):
        model = load_model(directory)
        self.fn = find_function(blueprint_of(model, mode, rows, recipe))
        self.store = model.open_weights(quiet=True)
        self.dims = B.function_dims(self.fn)
        self.table = B.function_weights(self.fn)

    def groups(self, rule: str) -> list[B.GroupOp]:
        return [op for op in self.fn.walk() if isinstance(op, B.GroupOp) and op.rule.data == rule]

    def group(self, rule: str) -> B.GroupOp:
        found = self.groups(rule)
        assert found, f"no group '{rule}' in the blueprint"
        return found[0]

    def env(self, state: dict | None = None, pos: int = 0) -> Env:
        return Env(self.store, state if state is not None else {}, self.dims, pos, table=self.table)

    def nodes(self, group: B.GroupOp) -> list:
        return [op for op in group.body.block.ops if not isinstance(op, B.YieldOp)]

    def node(self, group: B.GroupOp, name: str):
        return next(op for op in self.nodes(group) if op.name == "blueprint." + name)

    def width(self, value) -> int:
        return dim_value(value.type.dim.data, self.dims)  # type: ignore[attr-defined]

    def inputs(self, group: B.GroupOp, rows: int, scale: float = 1.0) -> dict:
        """Random rows for each value the group reads from outside: f32 N(0, scale^2), or for an
        integer edge (expert ids) distinct ids per row in [0, experts). Rows: the edge's rows
        expression with n = rows (`n*top_k`)."""
        inside = {r for op in group.body.block.ops for r in op.results}
        dims = self.dims | {"n": rows}
        out = {}
        for op in self.nodes(group):
            for v in op.operands:
                if v in inside or v in out:
                    continue
                shape = (dim_value(v.type.rows.data, dims), dim_value(v.type.dim.data, dims))
                if str(v.type.element) == "i32":
                    ids = [RNG.permutation(self.dims["experts"])[:shape[1]] for _ in range(shape[0])]
                    out[v] = np.stack(ids).astype(np.int32)
                else:
                    out[v] = (RNG.standard_normal(shape) * scale).astype(np.float32)
        return out

    def reference(self, group: B.GroupOp, values: dict, state: dict | None = None, pos: int = 0) -> list:
        """The group's yielded values: each node by its interpreter implementation, in f32."""
        return run_group(group, values, self.env(state, pos), emulate_precision=False)

    # -- weights, as the kernels take them ---------------------------------------------------

    def part_names(self, op) -> list[str]:
        return [op.param.data] + [c.data for c in (op.concat.data if op.concat else ())]

    def stored(self, name: str):
        """(the stored tensor of weight `name`, its conversion or None), as Env.raw reads them."""
        from strata.semantics.op_interp import PARAM_CONVERSIONS

        read = self.table.get(name) or B.WeightRead(name)
        w = np.asarray(self.store.get(read.source), np.float32)
        if read.convert is None:
            return w, None
        fn = PARAM_CONVERSIONS[read.convert]
        return w, lambda x: np.asarray(fn(x, read.args))

    def raw_weight(self, op) -> np.ndarray:
        env = self.env()
        return np.concatenate([env.raw(n) for n in self.part_names(op)], axis=-2).astype(np.float32)

    def dense_weight(self, op) -> torch.Tensor:
        """The node's weight after its format (dequantized), f32: what the reference multiplies by."""
        return torch.from_numpy(np.array(self.env().node_weight(op), np.float32))

    @staticmethod
    def weight_precision(op):
        """The precision the blueprint assigned to the node's weight (None: f32)."""
        return op.attributes["precision"].fields().get("weight") if "precision" in op.attributes else None

    def weight_elem(self, op) -> str:
        """The element type of the node's weight: "fp8", "int4", "bf16" or "f32"."""
        f = self.weight_precision(op)
        return f.elem.data if f is not None else "f32"

    def kernel_weight(self, op):
        """The node's weight as the kernels read it: fp8 q + block scales, packed int4 + scales and
        zero points, or the dense (f32, bf16-rounded when its format is bf16) weight."""
        from strata.targets.cuda.kernels import gemm

        f = self.weight_precision(op)
        elem = f.elem.data if f is not None else "f32"
        if elem == "fp8":  # each part quantized as stored (its own scale grid), then converted
            block = tuple(f.block_sizes) if len(f.block_sizes) == 2 else fp8.BLOCK
            parts = []
            for name in self.part_names(op):
                w, convert = self.stored(name)
                pairs = [fp8.quantize_fp8_block(m, block) for m in w.reshape(-1, *w.shape[-2:])]
                q = np.stack([p[0] for p in pairs]).reshape(w.shape)
                sc = np.stack([p[1] for p in pairs]).reshape(*w.shape[:-2], *pairs[0][1].shape)
                rows = np.arange(w.shape[-2]) // block[0]
                if convert is not None:
                    q, rows = convert(q), convert(rows[:, None])[:, 0]
                parts.append((q, sc, rows))
            return gemm.fp8_concat(parts, block)
        if elem == "int4":
            block = f.block_sizes[0] if f.block_sizes else 128
            return gemm.int4_weight(*quantize_int4_block(self.raw_weight(op), block), block=block)
        return gemm.dense(self.dense_weight(op))

    def vector(self, name: str) -> torch.Tensor:
        return torch.from_numpy(np.array(self.env().raw(name), np.float32))


def t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


def close(got: torch.Tensor, want: np.ndarray, rel: float = 1e-4) -> None:
    """|got - want| <= rel * max(1, max|want|), elementwise: f32 kernels against the f32 reference,
    where sums are ordered differently (blocked reductions) but nothing is rounded coarser than f32."""
    got = got.detach().cpu().numpy().astype(np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    bound = rel * max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= bound, f"max |diff| {err:.3g} > {bound:.3g}"
