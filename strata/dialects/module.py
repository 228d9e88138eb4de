"""The `module` dialect: a model as a program of blocks (with generics, params, state, entries).

A `module.model` binds the generics (Vocab, H, Heads, ...) and holds the
`module.block` definitions. A block declares its generic parameters, and its
members: params (weights), state (caches), subs (child blocks, possibly an array of
`Layers` of them) and functions (entries on the root block). Member types use the
module level's notation, `Tensor[Out, In; T]`, whose dims are arithmetic over the block's
generics; the verifier parses them (see `strata.ir.shapes`).

    module.model @tiny attributes {arch = "LlamaForCausalLM", root = "Linear", generics = {In = 16 : i64, Out = 32 : i64, T = f32}} {
      module.block @Linear ["In: Dim", "Out: Dim", "T: Float = bf16"] attributes {path = "std.nn.linear"} {
        module.param @weight : "Tensor[Out, In; T]"
        module.param @bias : "Tensor[Out; T]" {optional}
        module.fn @forward : "<*S: Shape>(x: Tensor[*S, In; T]) -> Tensor[*S, Out; T]" {pub}
      }
    }

A block's kind is its `path` (`std.nn.linear`, `std.attn.grouped_query`, ...). The
module level is declarative: each kind registers its semantics with the module
interpreter (`strata.semantics.module_interp`) and its expansion with
`convert-module-to-op`, which both dispatch on the path.

Tensor names are data of the IR too: a `module.sub` or `module.param` may carry the
segment it contributes to the llama.cpp (`ggml`) and HF (`hf`) name of the params below
it; absent, the segment is the member's name, and `""` contributes none. So
`layers.3.attention.q_proj.weight` is `blk.3.attn_q.weight` for ggml and
`model.layers.3.self_attn.q_proj.weight` for HF when the family's builder stamps
`layers {ggml = "blk", hf = "model.layers"}`, `attention {ggml = "", hf = "self_attn"}`
and `q_proj {ggml = "attn_q"}` (see `strata.dialects.instances`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Dialect, Region
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    opt_attr_def,
    region_def,
    traits_def,
)
from xdsl.traits import NoTerminator, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

from strata.ir.shapes import (
    ShapeSyntaxError,
    parse_block_generics,
    parse_fn_signature,
    parse_sub_type,
    parse_tensor_type,
)


class MemberOp(IRDLOperation):
    """A named member of a block; `type` is the module level's notation for it."""

    sym_name = attr_def(SymbolNameConstraint())
    member_type = attr_def(StringAttr, attr_name="type")
    ggml = opt_attr_def(StringAttr)  # the segment of llama.cpp tensor names (see module docs)
    hf = opt_attr_def(StringAttr)  # the segment of HF tensor names

    assembly_format = "$sym_name `:` $type attr-dict"
    traits = traits_def(SymbolOpInterface())

    def __init__(self, name: str, typ: str, **attrs: Attribute):
        super().__init__(attributes={"sym_name": StringAttr(name), "type": StringAttr(typ), **attrs})

    @property
    def member_name(self) -> str:
        return self.sym_name.data

    @property
    def type_text(self) -> str:
        return self.member_type.data

    def name_segment(self, convention: str) -> str:
        """The segment this member adds to `ggml` or `hf` tensor names ("" for none)."""
        attr = self.ggml if convention == "ggml" else self.hf
        return attr.data if attr is not None else self.member_name

    def block_op(self) -> BlockOp:
        parent = self.parent_op()
        if not isinstance(parent, BlockOp):
            raise VerifyException(f"{self.name} @{self.member_name} must be inside a module.block")
        return parent

    def _parse_with(self, fn) -> None:
        try:
            known = self.block_op().generic_names()
        except ShapeSyntaxError:
            return  # the block reports its own malformed generics
        try:
            fn(self.type_text, known)
        except ShapeSyntaxError as e:
            raise VerifyException(f"{self.name} @{self.member_name}: {e}") from None


@irdl_op_definition
class ParamOp(MemberOp):
    """A weight of the block; `optional` marks a param an instance may lack (a bias).

        module.param @weight : "Tensor[Out, In; T]"

    A param stored in pieces names them in its `hf` segment: `*` stands for each index of
    its first dim (experts stored one by one), and `hf_merged` names the alternative, a
    merged tensor and the part of it this param is (`experts.gate_up_proj:0/2`, split along
    the dim after the first).

        module.param @gate_exps : "Tensor[Experts, MoeInner, H; T]" {hf = "experts.*.gate_proj.weight", hf_merged = "experts.gate_up_proj:0/2"}
    """

    name = "module.param"
    optional = opt_attr_def(UnitAttr)
    hf_merged = opt_attr_def(StringAttr)

    def verify_(self) -> None:
        self._parse_with(parse_tensor_type)


@irdl_op_definition
class StateOp(MemberOp):
    """Persistent state of the block, kept across calls (the KV cache).

        module.state @cache_k : "Tensor[Batch, KvHeads / Shards, MaxSeq, HeadDim; T]"
    """

    name = "module.state"

    def verify_(self) -> None:
        self._parse_with(parse_tensor_type)


@irdl_op_definition
class SubOp(MemberOp):
    """A child block, `Name<args>` or an array `[Name<args>; Count]`. Instance knobs
    (a Linear with a bias, an lm_head tied to the embedding) are attributes. An array of
    several kinds (a hybrid model's layers) lists them, and `pattern` gives each element's
    kind as an index into that list.

        module.sub @q_proj : "Linear<H, (Heads / Shards) * HeadDim, T>" {bias}
        module.sub @layers : "[LinearLayer<H> | AttnLayer<H>; Layers]" {pattern = array<i64: 0, 0, 0, 1>}
    """

    name = "module.sub"
    bias = opt_attr_def(UnitAttr)
    tied = opt_attr_def(StringAttr)
    pattern = opt_attr_def(DenseArrayBase)

    def verify_(self) -> None:
        self._parse_with(parse_sub_type)
        try:
            sub = parse_sub_type(self.type_text)
        except ShapeSyntaxError:
            return  # reported by _parse_with
        n = len(sub.alternatives)
        if n > 1 and self.pattern is None:
            raise VerifyException(f"module.sub @{self.member_name}: an array of {n} kinds needs a `pattern`")
        if self.pattern is not None:
            bad = [i for i in self.pattern.get_values() if not 0 <= i < n]
            if bad:
                raise VerifyException(f"module.sub @{self.member_name}: pattern index {bad[0]} is not one of "
                                      f"the {n} kinds of the array")
        model = self.block_op().parent_op()
        if not isinstance(model, ModelOp):
            return
        for kind, args in sub.alternatives:
            child = model.block(kind)
            if child is None:
                raise VerifyException(f"module.sub @{self.member_name}: no block named '{kind}' in the model")
            try:
                generics = parse_block_generics([g.data for g in child.generics.data])
            except ShapeSyntaxError:
                return  # the child block reports it
            required = sum(g.default is None for g in generics)
            if not required <= len(args) <= len(generics):
                raise VerifyException(f"module.sub @{self.member_name}: {kind} takes {required} to {len(generics)} "
                                      f"generic arguments, got {len(args)}")


@irdl_op_definition
class FnOp(MemberOp):
    """A function of the block; `pub` exports it, `entry` makes it a model entry.

        module.fn @decode : "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]" {pub, entry}
    """

    name = "module.fn"
    pub = opt_attr_def(UnitAttr)
    entry = opt_attr_def(UnitAttr)

    def verify_(self) -> None:
        self._parse_with(parse_fn_signature)


@irdl_op_definition
class BlockOp(IRDLOperation):
    """A block definition: generic parameters and members.

        module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm", eps = 1.0e-05 : f64} {
          module.param @weight : "Tensor[H; T]"
        }

    `path` is the block's kind; the other attributes are the kind's hyperparameters.
    """

    name = "module.block"
    sym_name = attr_def(SymbolNameConstraint())
    generics = attr_def(ArrayAttr[StringAttr])
    path = attr_def(StringAttr)
    body = region_def("single_block")

    assembly_format = "$sym_name $generics attr-dict-with-keyword $body"
    traits = traits_def(SymbolOpInterface(), NoTerminator())

    def __init__(self, name: str, generics: list[str], attrs: dict[str, Attribute] | None = None):
        super().__init__(
            attributes={"sym_name": StringAttr(name), "generics": ArrayAttr([StringAttr(g) for g in generics]), **(attrs or {})},
            regions=[Region(Block())],
        )

    @property
    def block_name(self) -> str:
        return self.sym_name.data

    @property
    def kind(self) -> str:
        """The block kind (`std.nn.linear`): what the interpreter and the lowering dispatch on."""
        return self.path.data

    def generic_names(self) -> list[str]:
        return [g.name for g in parse_block_generics([s.data for s in self.generics.data])]

    def members(self) -> list[MemberOp]:
        return [op for op in self.body.block.ops if isinstance(op, MemberOp)]

    def member(self, name: str) -> MemberOp | None:
        return next((m for m in self.members() if m.member_name == name), None)

    def verify_(self) -> None:
        try:
            parse_block_generics([s.data for s in self.generics.data])
        except ShapeSyntaxError as e:
            raise VerifyException(f"module.block @{self.block_name}: {e}") from None
        seen: set[str] = set()
        for op in self.body.block.ops:
            if not isinstance(op, MemberOp):
                raise VerifyException(f"module.block @{self.block_name}: unexpected op {op.name}")
            if op.member_name in seen:
                raise VerifyException(f"module.block @{self.block_name}: member '{op.member_name}' defined twice")
            seen.add(op.member_name)


@irdl_op_definition
class ModelOp(IRDLOperation):
    """A model: the generics bound by a checkpoint, the root block and all blocks.

        module.model @tiny attributes {arch = "LlamaForCausalLM", root = "Model", generics = {Vocab = 32 : i64, T = f32}} {
          module.block @Model ["Vocab: Dim", "T: Float = bf16"] attributes {path = "std.model.causal_lm"} {
            module.param @embedding : "Tensor[Vocab, 16; T]"
          }
        }
    """

    name = "module.model"
    sym_name = attr_def(SymbolNameConstraint())
    generics = attr_def(DictionaryAttr)
    root = attr_def(StringAttr)
    arch = attr_def(StringAttr)
    body = region_def("single_block")

    assembly_format = "$sym_name attr-dict-with-keyword $body"
    traits = traits_def(SymbolOpInterface(), SymbolTable(), NoTerminator())

    def __init__(self, name: str, arch: str, root: str, generics: dict[str, Attribute], attrs: dict[str, Attribute] | None = None):
        super().__init__(
            attributes={
                "sym_name": StringAttr(name),
                "arch": StringAttr(arch),
                "root": StringAttr(root),
                "generics": DictionaryAttr(generics),
                **(attrs or {}),
            },
            regions=[Region(Block())],
        )

    def blocks(self) -> list[BlockOp]:
        return [op for op in self.body.block.ops if isinstance(op, BlockOp)]

    def block(self, name: str) -> BlockOp | None:
        return next((b for b in self.blocks() if b.block_name == name), None)

    def generic_value(self, name: str) -> Attribute:
        value = self.generics.data.get(name)
        if value is None:
            raise VerifyException(f"module.model @{self.sym_name.data}: generic '{name}' is not bound")
        return value

    def dim(self, name: str) -> int:
        value = self.generic_value(name)
        if not isinstance(value, IntegerAttr):
            raise VerifyException(f"module.model: generic '{name}' is not a dimension")
        return value.value.data

    def entries(self) -> list[FnOp]:
        root = self.block(self.root.data)
        return [m for m in root.members() if isinstance(m, FnOp) and m.entry is not None] if root else []

    def verify_(self) -> None:
        root = self.block(self.root.data)
        if root is None:
            raise VerifyException(f"module.model @{self.sym_name.data}: root block '{self.root.data}' is not defined")
        try:
            generics = parse_block_generics([s.data for s in root.generics.data])
        except ShapeSyntaxError:
            return  # the root block reports it
        kinds = {g.name: g.kind for g in generics}
        for g in generics:
            if g.name not in self.generics.data and g.default is None:
                raise VerifyException(f"module.model @{self.sym_name.data}: generic '{g.name}' of the root block is not bound")
        for name, value in self.generics.data.items():
            kind = kinds.get(name)
            if kind is None:
                raise VerifyException(f"module.model @{self.sym_name.data}: '{name}' is not a generic of the root block")
            if (kind == "Dim") != isinstance(value, IntegerAttr):
                raise VerifyException(f"module.model @{self.sym_name.data}: generic '{name}' is a {kind}, got {value}")
        for op in self.body.block.ops:
            if not isinstance(op, BlockOp):
                raise VerifyException(f"module.model: unexpected op {op.name}")


Module = Dialect("module", [ModelOp, BlockOp, ParamOp, StateOp, SubOp, FnOp], [])

__all__ = ["Module", "ModelOp", "BlockOp", "ParamOp", "StateOp", "SubOp", "FnOp"]
