"""What every family's builder shares: the element types, the sharding and paging generics,
the functions of the sequence blocks and the model's entries (seed 003), and the block and
function makers.

    model = block("Model", ["Vocab: Dim", ...], "std.model.causal_lm",
                  [*subs, *[fn(n, s, entry=True) for n, s in ENTRIES.items()]])
"""

from __future__ import annotations

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, StringAttr, UnitAttr
from xdsl.ir import Attribute

from strata.dialects import module as M

DTYPES: dict[str, Attribute] = {"float32": Float32Type(), "float16": Float16Type(), "bfloat16": BFloat16Type()}

SHARDING = ["Shards: Dim = 1", "PageSize: Dim = 64"]

#: The functions every sequence block (attention, layer) exposes.
SEQ_FNS = {
    "forward": "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]",
    "decode": "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]",
    "prefill": "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]",
}

#: The model entries (seed 003); the rest of the seed's entries come with later levels.
ENTRIES = {
    "forward": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, Vocab; T]",
    "next_token": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, Vocab; T]",
    "decode": "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
    "prefill": "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
}


def fn(name: str, sig: str, *, pub: bool = True, entry: bool = False) -> M.FnOp:
    attrs: dict[str, Attribute] = {}
    if pub:
        attrs["pub"] = UnitAttr()
    if entry:
        attrs["entry"] = UnitAttr()
    return M.FnOp(name, sig, **attrs)


def block(name: str, generics: list[str], path: str, members: list[M.MemberOp], **attrs: Attribute) -> M.BlockOp:
    blk = M.BlockOp(name, generics, {"path": StringAttr(path), **attrs})
    blk.body.block.add_ops(members)
    return blk


def symbol(name: str) -> str:
    """A model name as a symbol: letters, digits and `_` only."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else "m_" + out
