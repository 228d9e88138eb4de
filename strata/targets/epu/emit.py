"""The EPU target's printer: a fixed-level decode step as C++17 calling Quadric Chimera's custom ops.

    files = emit_epu(module, weights, model_name)   # {"model.h", "main.cpp", "Makefile",
                                                    #  "epu_runtime.h", "weights.bin"}

One handler per fixed op (`EPU_EMITTER`, keyed by op class), in program order, each writing the
call of `runtime/epu_runtime.h` that computes what the op's semantics say. Two matches group ops
into Chimera's custom ops before printing (`custom_op_groups`):

- every set of `fixed.matmul_w4a16` reading one value: N >= 2 of them (q|k|v, gate|up) are one
  `nn_custom::w4a16PackedProj<N, Frac, XFrac>` (their outputs must share one format:
  `epu-pack-projections` sees to it), a single one (o, down, lm_head) is
  `nn_custom::w4a16NBitsMatMul<Frac, XFrac>`;
- `fixed.cache_attention` with the ropes of its q and k, the int8 quantization of k and v,
  their cache writes and the dequantized cache reads: one
  `nn::qwenMultiheadAttentionFx32RoPE<HD, HQ, HKV, CTX, OutFrac>` (the absorbed values may have
  no other use).

`fixed.param` values live in `weights.bin` (an offsets header, then each tensor 64-byte aligned:
the integers the fixed interpreter computes for that param, int32 or uint8), as do the rope
tables for every cache position. `fixed.const` values become static arrays. No name from the
model reaches the code except in comments (sanitized). The same IR and weights give the same
bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from strata.dialects import fixed as FX
from strata.dialects import fixed_kv as KV
from strata.dialects.fixed import frac_of
from strata.ir.checks import shape_of
from strata.ir.impls import Implementations
from strata.semantics.fixed_arith import ceil_log2
from strata.semantics.fixed_interp import Env, param_value, rope_tables
from strata.semantics.fixed_kv_interp import attention_scale
from strata.targets.codegen import CodegenError, IndentedWriter, sanitize_label

RUNTIME = Path(__file__).resolve().parent / "runtime" / "epu_runtime.h"
MAGIC = b"STRATAW1"
ALIGN = 64
GXX = "g++ -O2 -std=c++17"


class EpuTargetError(CodegenError):
    """Fixed-level IR the EPU target cannot print."""


def _n(v: SSAValue) -> int:
    return int(np.prod(shape_of(v))) if shape_of(v) else 1


@dataclass
class Blob:
    """weights.bin: named arrays, each at a 64-byte aligned offset after the header."""

    arrays: list[tuple[str, np.ndarray]] = field(default_factory=list)
    index: dict[tuple, int] = field(default_factory=dict)

    def add(self, key: tuple, label: str, array: np.ndarray) -> int:
        if key not in self.index:
            self.index[key] = len(self.arrays)
            self.arrays.append((label, np.ascontiguousarray(array)))
        return self.index[key]

    def layout(self) -> list[tuple[int, int]]:
        off = len(MAGIC) + 8 + 16 * len(self.arrays)
        out = []
        for _, a in self.arrays:
            off = -(-off // ALIGN) * ALIGN
            out.append((off, a.nbytes))
            off += a.nbytes
        return out

    def bytes(self) -> bytes:
        lay = self.layout()
        parts = [MAGIC, struct.pack("<Q", len(self.arrays))] + [struct.pack("<QQ", o, n) for o, n in lay]
        pos = sum(map(len, parts))
        for (off, _), (_, a) in zip(lay, self.arrays):
            parts.append(b"\0" * (off - pos))
            parts.append(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
            pos = off + a.nbytes
        return b"".join(parts)


@dataclass
class Groups:
    """What `custom_op_groups` found: op -> the group it leads, and the ops it absorbs."""

    lead: dict[Operation, tuple[str, Any]] = field(default_factory=dict)
    absorbed: set[Operation] = field(default_factory=set)


def _only_users(v: SSAValue, allowed: set[Operation]) -> bool:
    return all(u.operation in allowed for u in v.uses)


def custom_op_groups(fn: func.FuncOp) -> Groups:
    """The custom-op groups of a fixed function (see the module docstring)."""
    g = Groups()
    by_src: dict[SSAValue, list[FX.MatmulW4A16Op]] = {}
    for op in fn.body.block.ops:
        if isinstance(op, FX.MatmulW4A16Op):
            by_src.setdefault(op.src, []).append(op)
    for members in by_src.values():
        fracs = {frac_of(m.result) for m in members}
        if len(fracs) != 1:
            names = ", ".join(m.node.data if m.node else m.name for m in members)
            raise EpuTargetError(f"epu target: the projections {names} read one value but have formats "
                                 f"{sorted(fracs)}; run epu-pack-projections first")
        g.lead[members[0]] = ("packed" if len(members) > 1 else "nbits", members)
        g.absorbed.update(members[1:])
    for op in fn.body.block.ops:
        if isinstance(op, KV.CacheAttentionOp):
            g.lead[op] = ("mha", _match_attention(op, g))
    return g


def _match_attention(att: KV.CacheAttentionOp, g: Groups) -> dict[str, Any]:
    where = att.node.data if att.node else att.name

    def fail(what: str):
        return EpuTargetError(f"epu target: attention '{where}': {what}; it is not qwenMultiheadAttentionFx32RoPE's pattern")

    qrope = att.q.owner
    if not isinstance(qrope, FX.RopeOp) or not _only_users(att.q, {att}):
        raise fail("q is not a fixed.rope used only here")
    parts: dict[str, Any] = {"qrope": qrope}
    for kv, val in (("k", att.k), ("v", att.v)):
        deq = val.owner
        if not isinstance(deq, FX.DequantInt8Op) or not _only_users(val, {att}):
            raise fail(f"{kv} is not a fixed.dequant_int8 used only here")
        state = deq.src.owner
        if not isinstance(state, KV.KvStateOp):
            raise fail(f"{kv} does not read a fixed.kv_state")
        writes = [u.operation for u in state.result.uses if isinstance(u.operation, KV.CacheWriteOp)]
        if len(writes) != 1 or not _only_users(state.result, {writes[0], deq}):
            raise fail(f"the {kv} cache has other uses than one write and this read")
        quant = writes[0].rows.owner
        if not isinstance(quant, FX.QuantInt8Op) or quant.scales != deq.scales or not _only_users(quant.result, {writes[0]}):
            raise fail(f"the {kv} cache's rows are not a fixed.quant_int8 with the read's scales")
        if writes[0].pos != att.pos:
            raise fail(f"the {kv} cache is written at another position")
        src = quant.src
        if kv == "k":
            krope = src.owner
            if not isinstance(krope, FX.RopeOp) or not _only_users(src, {quant}) or krope.cos != qrope.cos:
                raise fail("k is not a fixed.rope (with q's tables) used only by its quantization")
            parts["krope"] = krope
            g.absorbed.add(krope)
        parts[kv] = {"deq": deq, "state": state, "write": writes[0], "quant": quant}
        g.absorbed.update({deq, state, writes[0], quant})
    g.absorbed.add(qrope)
    return parts


# ---------------------------------------------------------------------------------------------
# The printer

EPU_EMITTER: Implementations[Callable[["EpuEmitter", Operation], None]] = Implementations("epu emitter")
H = EPU_EMITTER.register


class EpuEmitter:
    def __init__(self, fn: func.FuncOp, weights: Any, ctx: int):
        self.fn, self.weights, self.ctx = fn, weights, ctx
        self.w = IndentedWriter("  ")
        self.blob = Blob()
        self.names: dict[SSAValue, str] = {}
        self.consts: list[str] = []
        self.states: dict[str, tuple[str, int]] = {}  # state name -> (member, bytes)
        self.env = Env(weights)
        self.groups = custom_op_groups(fn)

    def name(self, v: SSAValue) -> str:
        if v not in self.names:
            raise EpuTargetError(f"epu target: a value of '{v.owner.name}' is used before it is computed")  # type: ignore[union-attr]
        return self.names[v]

    def buffer(self, v: SSAValue, dtype: str = "int32_t") -> str:
        name = f"v{len(self.names)}"
        self.names[v] = name
        self.w.line(f"std::vector<{dtype}> {name}_({_n(v)});")
        self.w.line(f"{dtype}* {name} = {name}_.data();")
        return name

    def param(self, op: FX.ParamOp) -> str:
        value = param_value(op, self.env)
        t = op.result.type
        assert isinstance(t, TensorType)
        fixed = isinstance(t.get_element_type(), FX.FixedPointType)
        arr = np.asarray(value, np.int32 if fixed else np.uint8)
        label = f"{op.param.data} {op.part_name}"
        i = self.blob.add((op.param.data, op.part_name, str(t)), label, arr)
        return f"W.ptr<{'int32_t' if fixed else 'uint8_t'}>({i})"


def _emit_function(em: EpuEmitter) -> None:
    fn = em.fn
    args = fn.body.block.args
    if len(args) != 4:
        raise EpuTargetError("epu target: the step function takes (tokens, pos, cos, sin): a fixed function "
                             "converted with a KV cache (ctx > 0)")
    for v, n in zip(args, ("tokens", "pos_", "cos", "sin")):
        em.names[v] = n
    hoisted = (FX.ParamOp, KV.ConstOp)  # weights and constants: pointers into weights.bin, static arrays
    for op in fn.body.block.ops:
        if isinstance(op, hoisted):
            EPU_EMITTER[type(op)](em, op)
    for op in fn.body.block.ops:
        if isinstance(op, hoisted):
            continue
        if isinstance(op, func.ReturnOp):
            em.w.line(f"std::copy({em.name(op.operands[0])}, {em.name(op.operands[0])} + {_n(op.operands[0])}, logits);")
            return
        if op in em.groups.absorbed:
            continue
        impl = EPU_EMITTER.get(type(op))
        if impl is None:
            raise EpuTargetError(f"epu target: no C++ form for op '{op.name}'")
        node = op.attributes.get("node")
        if node is not None:
            em.w.line(f"// {sanitize_label(node.data)}")  # type: ignore[attr-defined]
        impl(em, op)


@H(FX.ParamOp)
def _param(em: EpuEmitter, op: FX.ParamOp) -> None:
    em.names[op.result] = em.param(op)


@H(KV.ConstOp)
def _const(em: EpuEmitter, op: KV.ConstOp) -> None:
    name = f"c{len(em.consts)}"
    em.consts.append(f"static const int32_t {name}[{len(op.integers())}] = {{{', '.join(map(str, op.integers()))}}};")
    em.names[op.result] = name


@H(FX.EmbedOp)
def _embed(em: EpuEmitter, op: FX.EmbedOp) -> None:
    vocab, dim = shape_of(op.table)
    y = em.buffer(op.result)
    em.w.line(f"epu::embed<{frac_of(op.table)}, {frac_of(op.result)}>({em.name(op.ids)}, {shape_of(op.ids)[0]}, "
              f"{em.name(op.table)}, {vocab}, {dim}, {y});")


@H(FX.RmsNormOp)
def _rms_norm(em: EpuEmitter, op: FX.RmsNormOp) -> None:
    rows, dim = _n(op.src) // shape_of(op.src)[-1], shape_of(op.src)[-1]
    fm = 2 * frac_of(op.src) - ceil_log2(dim)
    eps = int(min(round(float(op.eps.value.data) * 2.0 ** fm), 2 ** 61))  # as fixed_interp.rms_norm_fixed
    y = em.buffer(op.result)
    em.w.line(f"epu::rms_norm<{frac_of(op.src)}, {frac_of(op.weight)}, {frac_of(op.result)}>({em.name(op.src)}, {rows}, "
              f"{dim}, {em.name(op.weight)}, {eps}LL, {y});")


@H(FX.AddOp, FX.MulOp)
def _binary(em: EpuEmitter, op: FX.AddOp | FX.MulOp) -> None:
    kind = "add" if isinstance(op, FX.AddOp) else "mul"
    y = em.buffer(op.result)
    em.w.line(f"epu::{kind}<{frac_of(op.lhs)}, {frac_of(op.rhs)}, {frac_of(op.result)}>({em.name(op.lhs)}, "
              f"{em.name(op.rhs)}, {_n(op.lhs)}, {_n(op.rhs)}, {y});")


@H(FX.RescaleOp, FX.SiluOp, FX.SigmoidOp)
def _unary(em: EpuEmitter, op: FX.RescaleOp | FX.SiluOp | FX.SigmoidOp) -> None:
    kind = {FX.RescaleOp: "rescale", FX.SiluOp: "silu", FX.SigmoidOp: "sigmoid"}[type(op)]
    y = em.buffer(op.result)
    em.w.line(f"epu::{kind}<{frac_of(op.src)}, {frac_of(op.result)}>({em.name(op.src)}, {_n(op.src)}, {y});")


@H(FX.MatmulW4A16Op)
def _w4a16(em: EpuEmitter, op: FX.MatmulW4A16Op) -> None:
    kind, members = em.groups.lead[op]
    m = shape_of(op.src)[0]
    descs = []
    for mem in members:
        k = shape_of(mem.src)[1]
        block = 2 * shape_of(mem.b)[2]
        descs.append(f"nn_custom::W4{{{em.name(mem.b)}, {em.name(mem.scales)}, {em.name(mem.zp)}, {shape_of(mem.result)[1]}, "
                     f"{k}, {block}, {frac_of(mem.scales)}, {mem.wfrac.value.data}}}")
    ys = [em.buffer(mem.result) for mem in members]
    f, fx = frac_of(op.result), frac_of(op.src)
    if kind == "nbits":
        em.w.line(f"nn_custom::w4a16NBitsMatMul<{f}, {fx}>({em.name(op.src)}, {m}, {descs[0]}, {ys[0]});")
        return
    n = len(members)
    em.w.line(f"{{ const nn_custom::W4 w[{n}] = {{{', '.join(descs)}}};")
    em.w.line(f"  int32_t* const y[{n}] = {{{', '.join(ys)}}};")
    em.w.line(f"  nn_custom::w4a16PackedProj<{n}, {f}, {fx}>({em.name(op.src)}, {m}, w, y); }}")


@H(FX.RopeOp)
def _rope(em: EpuEmitter, op: FX.RopeOp) -> None:
    rows, width = shape_of(op.src)
    y = em.buffer(op.result)
    em.w.line(f"epu::rope<{frac_of(op.src)}, {frac_of(op.cos)}, {frac_of(op.result)}>({em.name(op.src)}, {rows}, {width}, "
              f"{op.head_dim.value.data}, {em.name(op.cos)}, {em.name(op.sin)}, {y});")


@H(FX.MatmulOp)
def _matmul(em: EpuEmitter, op: FX.MatmulOp) -> None:
    (m, k), n = shape_of(op.src), shape_of(op.weight)[0]
    y = em.buffer(op.result)
    em.w.line(f"epu::matmul<{frac_of(op.src)}, {frac_of(op.weight)}, {frac_of(op.result)}>({em.name(op.src)}, {m}, {k}, "
              f"{em.name(op.weight)}, {n}, {y});")


@H(KV.CacheAttentionOp)
def _attention(em: EpuEmitter, op: KV.CacheAttentionOp) -> None:
    _, parts = em.groups.lead[op]
    qrope, krope, k, v = parts["qrope"], parts["krope"], parts["k"], parts["v"]
    hd = op.head_dim.value.data
    rows, qw = shape_of(op.q)
    ctx, kw = shape_of(op.k)
    sc, fsc = attention_scale(float(op.scale.value.data))
    states = []
    for part in (k, v):
        sname = part["state"].state.data
        if sname not in em.states:
            em.states[sname] = (f"s{len(em.states)}", _n(part["state"].result))
        states.append("S." + em.states[sname][0] + ".data()")
    fm = [frac_of(qrope.src), frac_of(krope.src), frac_of(v["quant"].src), frac_of(qrope.cos), frac_of(qrope.result),
          frac_of(krope.result), frac_of(k["quant"].scales), frac_of(v["quant"].scales), frac_of(k["deq"].result),
          frac_of(v["deq"].result), op.sfrac.value.data]
    if frac_of(k["quant"].src) != frac_of(krope.result):
        raise EpuTargetError("epu target: the k cache quantizes another format than the rope's")
    y = em.buffer(op.result)
    em.w.line(f"{{ const nn::MhaFormats f{{{', '.join(map(str, fm))}, {sc}LL, {fsc}}};")
    em.w.line(f"  nn::qwenMultiheadAttentionFx32RoPE<{hd}, {qw // hd}, {kw // hd}, {ctx}, {frac_of(op.result)}>("
              f"{em.name(qrope.src)}, {em.name(krope.src)}, {em.name(v['quant'].src)}, {em.name(qrope.cos)}, "
              f"{em.name(qrope.sin)}, {states[0]}, {states[1]}, {em.name(k['quant'].scales)}, "
              f"{em.name(v['quant'].scales)}, pos_[0], {rows}, f, {y}); }}")


# ---------------------------------------------------------------------------------------------
# The files


def step_function(module: ModuleOp) -> func.FuncOp:
    fns = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if len(fns) != 1:
        raise EpuTargetError(f"epu target: expected one fixed function, got {len(fns)}")
    return fns[0]


def emit_epu(module: ModuleOp, weights: Any, model_name: str | None = None) -> dict[str, bytes]:
    """The EPU output's files (see the module docstring), from a fixed decode step and the
    weights its `fixed.param` ops read (`.get(name)`)."""
    fn = step_function(module)
    ctx_attr = fn.attributes.get("fixed.ctx")
    if ctx_attr is None:
        raise EpuTargetError("epu target: the fixed function has no KV cache (convert-blueprint-to-fixed with ctx)")
    ctx = int(ctx_attr.value.data)  # type: ignore[attr-defined]
    rows = shape_of(fn.body.block.args[0])[0]
    cos_t = fn.body.block.args[2]
    half, cfrac = shape_of(cos_t)[1], frac_of(cos_t)
    em = EpuEmitter(fn, weights, ctx)
    _emit_function(em)
    theta = float(fn.attributes["fixed.rope_theta"].value.data)  # type: ignore[attr-defined]
    cos, sin = rope_tables(ctx, 2 * half, theta, 0, cfrac)
    rope = [em.blob.add(("rope", w), f"rope {w}", np.asarray(t, np.int32)) for w, t in (("cos", cos), ("sin", sin))]
    out_t = fn.function_type.outputs.data[0]
    vocab, lfrac = shape_of(fn.body.block.last_op.operands[0])[1], frac_of(out_t)  # type: ignore[union-attr]
    label = sanitize_label(model_name or "model")
    lay = em.blob.layout()
    h = IndentedWriter("  ")
    h.line(f"// {label}: one decode step of the fixed level as EPU custom-op calls (generated by strata; do not edit).")
    h.line("#pragma once")
    h.line('#include "epu_runtime.h"')
    h.line("#include <vector>")
    h.line(f"static_assert(epu::LOG2E_Q30 == {round(math.log2(math.e) * 2 ** 30)} && epu::LN2_Q31 == {round(math.log(2) * 2 ** 31)}, "
           '"runtime constants differ from the compiler\'s");')
    for k, v in (("CTX", ctx), ("ROWS", rows), ("VOCAB", vocab), ("LOGITS_FRAC", lfrac), ("ROPE_HALF", half),
                 ("ROPE_COS", rope[0]), ("ROPE_SIN", rope[1]), ("N_WEIGHTS", len(lay))):
        h.line(f"constexpr int {k} = {v};")
    h.line("constexpr unsigned long long WEIGHT_LAYOUT[][2] = {" + ", ".join(f"{{{o}ULL, {n}ULL}}" for o, n in lay) + "};")
    h.line("// weights.bin: " + "; ".join(f"{i}: {sanitize_label(lbl)}" for i, (lbl, _) in enumerate(em.blob.arrays)))
    h.line("struct Weights {")
    h.line("  std::vector<unsigned long long> data;  // 8-byte aligned; every tensor at a 64-byte offset")
    h.line("  template <class T> const T* ptr(int i) const { return reinterpret_cast<const T*>("
           "reinterpret_cast<const unsigned char*>(data.data()) + WEIGHT_LAYOUT[i][0]); }")
    h.line("};")
    h.line("struct State {  // the persistent int8 KV cache, zero at the start")
    for sname, (member, size) in em.states.items():
        h.line(f"  std::vector<int8_t> {member} = std::vector<int8_t>({size});  // {sanitize_label(sname)}")
    h.line("};")
    h.block("\n".join(em.consts))
    h.line("// tokens [ROWS] at positions pos_[0]..; cos/sin [ROWS, ROPE_HALF]; logits [ROWS, VOCAB] at LOGITS_FRAC")
    h.line("inline void step(const Weights& W, State& S, const int32_t* tokens, const int32_t* pos_, const int32_t* cos, "
           "const int32_t* sin, int32_t* logits) {")
    with h.indented():
        h.block(em.w.text())
    h.line("}")
    return {"model.h": h.text().encode(), "main.cpp": MAIN_CPP.encode(), "Makefile": MAKEFILE.encode(),
            "epu_runtime.h": RUNTIME.read_bytes(), "weights.bin": em.blob.bytes()}


MAKEFILE = f"""# g++ -O2 -std=c++17 builds the driver; `make` or the line below.
model: main.cpp model.h epu_runtime.h
\t{GXX} -o model main.cpp
"""

MAIN_CPP = r"""// The device-side driver (generated by strata), in one of two modes.
//
//   ./model weights.bin 1,2,3 N_NEW logits.bin
//
// The whole autoregressive loop: each prompt token runs one step (filling the persistent int8 KV
// cache); from the last prompt token on, the argmax of the step's logits is fed back. Writes each
// generating step's logits to logits.bin: "STRLOGT1", int32 steps, vocab, frac, then int32
// [steps, vocab] (FixedPoint32<frac>). The last line of standard output is the generated ids,
// comma-separated.
//
//   ./model weights.bin --steps
//
// Stepped by a host (strata's runtime runs the generation loop): first writes int32 VOCAB, CTX
// and LOGITS_FRAC to standard output, then reads one command per line from standard input:
// "step TOKEN POS" runs one step and writes its int32 [VOCAB] logits; "reset" zeroes the KV
// cache. Ends at the end of its input.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>
#include "model.h"

static_assert(ROWS == 1, "the driver runs one token per step");

static void die(const std::string& msg) {
  std::fprintf(stderr, "model: %s\n", msg.c_str());
  std::exit(2);
}

static void load(const char* path, Weights& W) {
  FILE* f = std::fopen(path, "rb");
  if (!f) die(std::string(path) + ": cannot open the weights");
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  W.data.assign((size + 7) / 8, 0ULL);
  if (size < 16 || std::fread(W.data.data(), 1, size, f) != static_cast<size_t>(size)) die(std::string(path) + ": cannot read the weights");
  std::fclose(f);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(W.data.data());
  unsigned long long count = 0;
  std::memcpy(&count, p + 8, 8);
  if (std::memcmp(p, "STRATAW1", 8) != 0 || count != N_WEIGHTS) die(std::string(path) + ": not this model's weights.bin");
  for (int i = 0; i < N_WEIGHTS; ++i) {
    unsigned long long e[2];
    std::memcpy(e, p + 16 + 16 * i, 16);
    if (e[0] != WEIGHT_LAYOUT[i][0] || e[1] != WEIGHT_LAYOUT[i][1] || e[0] + e[1] > static_cast<unsigned long long>(size))
      die(std::string(path) + ": tensor " + std::to_string(i) + " is not where this model expects it");
  }
}

static int steps(const Weights& W) {
  State S;
  std::vector<int32_t> logits(VOCAB);
  const int32_t head[3] = {VOCAB, CTX, LOGITS_FRAC};
  if (std::fwrite(head, 4, 3, stdout) != 3 || std::fflush(stdout) != 0) return 1;
  char line[128];
  while (std::fgets(line, sizeof line, stdin)) {
    if (std::strcmp(line, "reset\n") == 0) {
      S = State();
      continue;
    }
    long token = -1, pos = -1;
    char rest = 0;
    if (std::sscanf(line, "step %ld %ld %c", &token, &pos, &rest) != 2) die(std::string("bad command: ") + line);
    if (token < 0 || token >= VOCAB) die("token id " + std::to_string(token) + " is outside the vocabulary");
    if (pos < 0 || pos >= CTX) die("position " + std::to_string(pos) + " is outside the KV cache of " + std::to_string(CTX));
    const int32_t t[1] = {static_cast<int32_t>(token)};
    const int32_t p[1] = {static_cast<int32_t>(pos)};
    step(W, S, t, p, W.ptr<int32_t>(ROPE_COS) + pos * ROPE_HALF, W.ptr<int32_t>(ROPE_SIN) + pos * ROPE_HALF, logits.data());
    if (std::fwrite(logits.data(), 4, VOCAB, stdout) != static_cast<size_t>(VOCAB) || std::fflush(stdout) != 0) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[2], "--steps") == 0) {
    Weights W;
    load(argv[1], W);
    return steps(W);
  }
  if (argc != 5) die("usage: model WEIGHTS.bin IDS(comma-separated) N_NEW LOGITS.bin, or model WEIGHTS.bin --steps");
  std::vector<int32_t> prompt;
  for (const char* s = argv[2]; *s;) {
    char* end = nullptr;
    long v = std::strtol(s, &end, 10);
    if (end == s || v < 0 || v >= VOCAB) die(std::string("bad prompt id list: ") + argv[2]);
    prompt.push_back(static_cast<int32_t>(v));
    s = (*end == ',') ? end + 1 : end;
    if (*end && *end != ',') die(std::string("bad prompt id list: ") + argv[2]);
  }
  long n_new = std::strtol(argv[3], nullptr, 10);
  if (prompt.empty() || n_new < 1) die("need a prompt and N_NEW >= 1");
  if (static_cast<long>(prompt.size()) + n_new - 1 > CTX) die("the prompt and new tokens exceed the KV cache of " + std::to_string(CTX));
  Weights W;
  load(argv[1], W);
  State S;
  FILE* out = std::fopen(argv[4], "wb");
  if (!out) die(std::string(argv[4]) + ": cannot write the logits");
  int32_t head[3] = {static_cast<int32_t>(n_new), VOCAB, LOGITS_FRAC};
  std::fwrite("STRLOGT1", 1, 8, out);
  std::fwrite(head, 4, 3, out);
  std::vector<int32_t> logits(VOCAB);
  std::string ids;
  int32_t token = prompt[0];
  const int P = static_cast<int>(prompt.size());
  const bool tty = isatty(fileno(stderr));  // progress on a terminal, quiet when piped
  for (int pos = 0; pos < P + n_new - 1; ++pos) {
    if (pos < P) token = prompt[pos];
    const int32_t p[1] = {pos};
    step(W, S, &token, p, W.ptr<int32_t>(ROPE_COS) + pos * ROPE_HALF, W.ptr<int32_t>(ROPE_SIN) + pos * ROPE_HALF, logits.data());
    if (pos >= P - 1) {
      int best = 0;
      for (int i = 1; i < VOCAB; ++i)
        if (logits[i] > logits[best]) best = i;
      std::fwrite(logits.data(), 4, VOCAB, out);
      ids += (ids.empty() ? "" : ",") + std::to_string(best);
      token = best;
      if (tty) std::fprintf(stderr, "\rstep %d/%ld", pos - P + 2, n_new);
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  std::fclose(out);
  std::printf("%s\n", ids.c_str());
  return 0;
}
"""
