"""What every family's builder shares: the element types, the sharding and paging generics,
the functions of the sequence blocks and the model's entries (forward, prefill, decode, ...), and the block and
function makers.

    model = block("Model", ["Vocab: Dim", ...], "std.model.causal_lm", [*subs, *model_fns()])
"""

from __future__ import annotations

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, StringAttr, UnitAttr
from xdsl.ir import Attribute

from strata.dialects import module as M

DTYPES: dict[str, Attribute] = {"float32": Float32Type(), "float16": Float16Type(), "bfloat16": BFloat16Type()}

SHARDING = ["Shards: Dim = 1", "PageSize: Dim = 64"]

#: The functions every sequence block (attention, layer) exposes, as Llama-3-8B's module-level DecoderLayer and
#: GroupedQueryAttention list them, in its order.
SEQ_FNS = {
    "forward": "<B: Dim, S: Dim>(x: Tensor[B, S, H; T]) -> Tensor[B, S, H; T]",
    "decode": "(x: Tensor[Batch, 1, H; T], pos: i32) -> Tensor[Batch, 1, H; T]",
    "prefill": "<S: Dim>(x: Tensor[Batch, S, H; T], pos: i32) -> Tensor[Batch, S, H; T]",
    "decode_rows": "(x: Tensor[Batch, 1, H; T], positions: Tensor[Batch; i32]) -> Tensor[Batch, 1, H; T]",
    "prefill_slots": "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32]) -> Tensor[M, S, H; T]",
    "prefill_packed": "<P: Dim>(x: Tensor[1, P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], "
                      "segments: Tensor[P; i32]) -> Tensor[1, P, H; T]",
    "packed": "<P: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], segments: Tensor[P; i32]) "
              "-> Tensor[1, P, H; T]",
    "step_packed": "<P: Dim>(x: Tensor[1, Batch + P, H; T], rows: Tensor[P; i32], positions: Tensor[P; i32], "
                   "segments: Tensor[P; i32], step_positions: Tensor[Batch; i32]) -> Tensor[1, Batch + P, H; T]",
    "decode_paged": "<Rows: Dim, Pages: Dim>(x: Tensor[Rows, 1, H; T], positions: Tensor[Rows; i32], "
                    "table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, 1, H; T]",
    "prefill_paged": "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P, H; T], positions: Tensor[P; i32], "
                     "rows: Tensor[P; i32], slots: Tensor[P; i32], table: Tensor[Rows, Pages; i32]) "
                     "-> Tensor[1, P, H; T]",
    "step_paged": "<P: Dim, Rows: Dim, Pages: Dim>(x: Tensor[1, P + Rows, H; T], positions: Tensor[P; i32], "
                  "rows: Tensor[P; i32], slots: Tensor[P; i32], step_positions: Tensor[Rows; i32], "
                  "table: Tensor[Rows, Pages; i32]) -> Tensor[1, P + Rows, H; T]",
}

#: A block with per-sequence recurrent state (Gated DeltaNet, and the layers of the families that
#: have it) also needs the prompts' lengths in `prefill_slots`: its state is the one after each
#: prompt's last token, not after the padding behind it.
RECURRENT_SEQ_FNS = {
    **SEQ_FNS,
    "prefill_slots": "<M: Dim, S: Dim>(x: Tensor[M, S, H; T], slots: Tensor[M; i32], lengths: Tensor[M; i32]) "
                     "-> Tensor[M, S, H; T]",
}

#: The model entries (the module level's entry table), with their signatures, in its order.
ENTRIES = {
    "forward": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, Vocab; T]",
    "next_token": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, Vocab; T]",
    "decode": "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
    "prefill": "<S: Dim>(tokens: Tensor[Batch, S; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
    "decode_rows": "(tokens: Tensor[Batch, 1; i32], positions: Tensor[Batch; i32]) -> Tensor[Batch, Vocab; T]",
    "prefill_slots": "<M: Dim, S: Dim>(tokens: Tensor[M, S; i32], slots: Tensor[M; i32], lengths: Tensor[M; i32]) "
                     "-> Tensor[M, Vocab; T]",
    "loss_packed": "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], "
                   "targets: Tensor[P; i64], weights: Tensor[P; f32]) -> f32",
    "log_probs_packed": "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32], "
                        "targets: Tensor[P; i64]) -> Tensor[P; f32]",
    "hidden_packed": "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], segments: Tensor[P; i32]) "
                     "-> Tensor[P, H; T]",
    "prefill_packed": "<P: Dim>(tokens: Tensor[P; i32], rows: Tensor[P; i32], positions: Tensor[P; i32], "
                      "segments: Tensor[P; i32], last: Tensor[Batch; i32]) -> Tensor[Batch, Vocab; T]",
    "step_packed": "<P: Dim>(tokens: Tensor[P; i32], rows: Tensor[P; i32], positions: Tensor[P; i32], "
                   "segments: Tensor[P; i32], last: Tensor[Batch; i32], step_tokens: Tensor[Batch, 1; i32], "
                   "step_positions: Tensor[Batch; i32]) -> Tensor[2 * Batch, Vocab; T]",
    "decode_paged": "<Rows: Dim, Pages: Dim>(tokens: Tensor[Rows, 1; i32], positions: Tensor[Rows; i32], "
                    "table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, Vocab; T]",
    "prefill_paged": "<P: Dim, Rows: Dim, Pages: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], "
                     "rows: Tensor[P; i32], slots: Tensor[P; i32], last: Tensor[Rows; i32], "
                     "table: Tensor[Rows, Pages; i32]) -> Tensor[Rows, Vocab; T]",
    "step_paged": "<P: Dim, Rows: Dim, Pages: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], "
                  "rows: Tensor[P; i32], slots: Tensor[P; i32], last: Tensor[Rows; i32], "
                  "step_tokens: Tensor[Rows, 1; i32], step_positions: Tensor[Rows; i32], "
                  "table: Tensor[Rows, Pages; i32]) -> Tensor[2 * Rows, Vocab; T]",
    "generate": "<Steps: Dim>(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Steps; i32]",
    "sample": "<Steps: Dim>(token: Tensor[Batch, 1; i32], pos: i32, key: Tensor[2; i64], temperature: f32) "
              "-> Tensor[Batch, Steps; i32]",
    "generate_until": "<MaxNew: Dim>(token: Tensor[Batch, 1; i32], pos: i32, eos: i32) "
                      "-> (Tensor[Batch, MaxNew; i32], i32)",
}

#: The root block's private functions (the pieces its entries share), by the entry they follow
#: in the module level's listing.
MODEL_FNS = {
    "hidden_packed": {"packed_states": "<P: Dim>(tokens: Tensor[P; i32], positions: Tensor[P; i32], "
                                       "segments: Tensor[P; i32]) -> Tensor[P, H; T]"},
    "generate_until": {
        "step": "(token: Tensor[Batch, 1; i32], pos: i32) -> Tensor[Batch, Vocab; T]",
        "logits": "<R: Dim>(x: Tensor[R, H; T]) -> Tensor[R, Vocab; T]",
        "hidden": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]",
        "hidden_states": "<B: Dim, S: Dim>(tokens: Tensor[B, S; i32]) -> Tensor[B, S, H; T]",
    },
}


def model_fns() -> list[M.FnOp]:
    """The root block's functions: the module level's entries, with its private functions among them."""
    out: list[M.FnOp] = []
    for name, sig in ENTRIES.items():
        out.append(fn(name, sig, entry=True))
        out += [fn(n, s, pub=False) for n, s in MODEL_FNS.get(name, {}).items()]
    return out


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
