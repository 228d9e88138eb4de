"""Layout ops: reshapes and views, permutations, REPEAT, CONCAT and GET_ROWS (a gather)."""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, IntegerAttr
from xdsl.irdl import attr_def, irdl_op_definition, opt_attr_def

from strata.dialects.op.base import BinaryOp, UnaryOp, can_repeat, dim_eq, fmt_shape, numel, shapes_eq
from strata.ir.dtypes import is_float, is_int
from strata.ir.checks import elem_of, require, shape_of


@irdl_op_definition
class GetRowsOp(BinaryOp):
    """GET_ROWS (ggml_get_rows): gather rows of the table `lhs` by the ids in `rhs`.

    A table [R, C] with ids [N] gives [N, C] (an embedding lookup). A table with batch
    dims, [B..., R, C], takes ids [B..., N] and gives [B..., N, C]: batch b gathers from
    its own table slice, result[b, n] = table[b, ids[b, n]] (llama.cpp gathers the routed
    experts' probabilities this way: table [T, E, 1], ids [T, k] -> [T, k, 1]). A negative
    id gives a row of zeros (an output row no token fills: an idle row of a batch).

        %e = op.get_rows %w, %ids {name = "embd"} : tensor<32x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
        %p = op.get_rows %probs, %topk : tensor<3x8x1xf32>, tensor<3x2xi32> -> tensor<3x2x1xf32>
    """

    name = "op.get_rows"

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        require(len(a) >= 2, f"op.get_rows: the table must have rank >= 2, got {fmt_shape(a)}")
        require(is_int(elem_of(self.rhs)), f"op.get_rows: the ids must be an integer tensor, got {self.rhs.type}")
        require(len(b) == len(a) - 1, f"op.get_rows: a rank-{len(a)} table takes rank-{len(a) - 1} ids, got {fmt_shape(b)}")
        require(shapes_eq(b[:-1], a[:-2]),
                f"op.get_rows: the ids' batch dims {fmt_shape(b[:-1])} must be the table's {fmt_shape(a[:-2])}")
        expect = (*b, a[-1])
        require(shapes_eq(r, expect), f"op.get_rows: result must be {fmt_shape(expect)}, got {fmt_shape(r)}")
        require(is_float(elem_of(self.result)), "op.get_rows: result must be float")


class ReshapeLikeOp(UnaryOp):
    def _check_numel(self) -> None:
        a, r = numel(shape_of(self.src)), numel(shape_of(self.result))
        require(a is None or r is None or a == r, f"{self.name}: element count changes from {a} to {r}")
        require(elem_of(self.src) == elem_of(self.result), f"{self.name}: element type must not change")


@irdl_op_definition
class ReshapeOp(ReshapeLikeOp):
    """RESHAPE: same elements, new shape (at most one dynamic dim).

        %r = op.reshape %x : tensor<5x64xf32> -> tensor<5x4x16xf32>
    """

    name = "op.reshape"

    def verify_(self) -> None:
        self._check_numel()
        dyn = sum(d == DYNAMIC_INDEX for d in shape_of(self.result))
        require(dyn <= 1, "op.reshape: at most one dynamic dim in the result")


@irdl_op_definition
class ContOp(ReshapeLikeOp):
    """CONT: a contiguous copy (of a permuted or transposed view), optionally reshaped.

        %c = op.cont %x : tensor<4x5x16xf32> -> tensor<4x5x16xf32>
    """

    name = "op.cont"

    def verify_(self) -> None:
        self._check_numel()


@irdl_op_definition
class ViewOp(ReshapeLikeOp):
    """VIEW: a window of `src`'s storage: `offset` elements in, row-major with the
    result's shape, or with explicit element `strides`. A view may be empty (a dim of
    size 0, as llama.cpp's views of the recurrent states that are not copied).

    A dynamic dim (`?`) of the result is the call's number of tokens T, the op level's one
    dynamic dim. Where ggml's view parameters grow with T, `per_token` gives the growth:
    [a] adds a*T to the offset, [a, b0, b1, ...] also b_i*T to stride i (strides required).
    llama.cpp's last K-1 columns of the conv window [C, K-1+T] start at T with row stride
    K-1+T: offset 0, strides [K-1, 1], per_token [1, 1, 0].

        %v = op.view %c {offset = 0 : i64} : tensor<4096x64xf32> -> tensor<256x4x16xf32>
        %e = op.view %s {offset = 384 : i64} : tensor<1x384xf32> -> tensor<0x384xf32>
        %l = op.view %w {offset = 0 : i64, strides = array<i64: 3, 1>, per_token = array<i64: 1, 1, 0>}
            : tensor<128x?xf32> -> tensor<128x3xf32>
    """

    name = "op.view"
    offset = attr_def(IntegerAttr)
    strides = opt_attr_def(DenseArrayBase)
    per_token = opt_attr_def(DenseArrayBase)

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        require(elem_of(self.src) == elem_of(self.result), "op.view: element type must not change")
        off = self.offset.value.data
        require(off >= 0, "op.view: offset must be >= 0")
        if self.strides is not None:
            st = self.strides.get_values()
            require(len(st) == len(res), "op.view: one stride per result dim")
            require(all(s >= 0 for s in st), "op.view: strides must be >= 0")
        if self.per_token is not None:
            pt = self.per_token.get_values()
            n = 1 if self.strides is None else 1 + len(res)
            require(len(pt) in (1, n), f"op.view: per_token holds the offset's growth{' and one per stride' * (n > 1)} "
                                       f"({n} value{'s' * (n > 1)}), got {len(pt)}")
            require(all(c >= 0 for c in pt), "op.view: per_token must be >= 0")
        total, need = numel(src), numel(res)
        if total is not None and need is not None and self.strides is None and self.per_token is None:
            require(off + need <= total, f"op.view: {need} elements at offset {off} exceed the {total} of the source")

    def window(self, n_tokens: int) -> tuple[int, tuple[int, ...] | None]:
        """The offset and strides (None: row-major) of a call on `n_tokens` tokens."""
        off = self.offset.value.data
        strides = tuple(self.strides.get_values()) if self.strides is not None else None
        if self.per_token is not None:
            pt = self.per_token.get_values()
            off += pt[0] * n_tokens
            if strides is not None and len(pt) > 1:
                strides = tuple(s + c * n_tokens for s, c in zip(strides, pt[1:]))
        return off, strides


@irdl_op_definition
class PermuteOp(UnaryOp):
    """PERMUTE: result dim i is source dim `dims[i]` (numpy's transpose order).

        %p = op.permute %q {dims = array<i64: 1, 0, 2>} : tensor<5x4x16xf32> -> tensor<4x5x16xf32>
    """

    name = "op.permute"
    dims = attr_def(DenseArrayBase)

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        perm = tuple(self.dims.get_values())
        require(sorted(perm) == list(range(len(src))), f"op.permute: dims {list(perm)} is not a permutation of rank {len(src)}")
        require(shapes_eq(res, tuple(src[p] for p in perm)), f"op.permute: result must be {fmt_shape(tuple(src[p] for p in perm))}")
        require(elem_of(self.src) == elem_of(self.result), "op.permute: element type must not change")


@irdl_op_definition
class TransposeOp(UnaryOp):
    """TRANSPOSE: swap the last two dims (ggml's dims 0 and 1), as a view.

        %t = op.transpose %v : tensor<4x8x16xf32> -> tensor<4x16x8xf32>
    """

    name = "op.transpose"

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        require(len(src) >= 2, "op.transpose: rank must be >= 2")
        require(shapes_eq(res, (*src[:-2], src[-1], src[-2])), "op.transpose: result must swap the last two dims")
        require(elem_of(self.src) == elem_of(self.result), "op.transpose: element type must not change")


@irdl_op_definition
class RepeatOp(UnaryOp):
    """REPEAT (ggml_repeat, ggml_repeat_4d): tile `src` to the result's shape. The dims
    align from the last; each result dim is a multiple of the source's (a missing source
    dim counts as 1). The element type is kept.

        %r = op.repeat %q : tensor<3x2x1x16xf32> -> tensor<3x2x2x16xf32>
    """

    name = "op.repeat"

    def verify_(self) -> None:
        src, res = shape_of(self.src), shape_of(self.result)
        require(can_repeat(src, res), f"op.repeat: {fmt_shape(src)} cannot be tiled to {fmt_shape(res)}")
        require(elem_of(self.src) == elem_of(self.result), "op.repeat: element type must not change")


@irdl_op_definition
class ConcatOp(BinaryOp):
    """CONCAT (ggml_concat(a, b, dim)): `lhs` and `rhs` joined along `axis`.

    `axis` is the row-major axis of the IR types (0 = outermost); ggml's `dim` counts from
    the fastest dim, so ggml's dim d of a rank-r tensor is axis r - 1 - d here. The other
    dims must agree; the element type is kept (both operands have the result's).

        %c = op.concat %s, %x {axis = 1 : i64, name = "conv_input-0"} : tensor<128x3xf32>, tensor<128x3xf32> -> tensor<128x6xf32>
    """

    name = "op.concat"
    axis = attr_def(IntegerAttr)

    def verify_(self) -> None:
        a, b, r = shape_of(self.lhs), shape_of(self.rhs), shape_of(self.result)
        ax = self.axis.value.data
        require(len(a) == len(b), f"op.concat: operands must have one rank, got {fmt_shape(a)} and {fmt_shape(b)}")
        require(0 <= ax < len(a), f"op.concat: axis {ax} is out of range for rank {len(a)}")
        others = all(dim_eq(x, y) for i, (x, y) in enumerate(zip(a, b)) if i != ax)
        require(others, f"op.concat: {fmt_shape(a)} and {fmt_shape(b)} differ outside axis {ax}")
        joined = DYNAMIC_INDEX if DYNAMIC_INDEX in (a[ax], b[ax]) else a[ax] + b[ax]
        expect = tuple(joined if i == ax else (x if x != DYNAMIC_INDEX else y) for i, (x, y) in enumerate(zip(a, b)))
        require(shapes_eq(r, expect), f"op.concat: result must be {fmt_shape(expect)}, got {fmt_shape(r)}")
        same = elem_of(self.lhs) == elem_of(self.rhs) == elem_of(self.result)
        require(same, "op.concat: operands and result must have one element type")
