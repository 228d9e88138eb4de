"""Every CUDA kernel template at sizes that are not powers of two, in Triton's interpreter on
the CPU, against the numpy reference of its group's nodes (the pattern of test_kernels.py).

The groups come from the blueprints of the odd-size models of conftest.py (head dims 12, 80 and
96, hidden 48 and 80, 6 and 60 experts, vocab 150, intermediates 20 and 96): every group of each
blueprint runs, decode (1 row) and prefill (70 rows: a 64-row GEMM tile and an attention row
block and a delta-rule chunk, then a partial one). Direct tests add what the models do not make
(RoPE modes, the delta rule at head dim 80, top-k and argmax edge cases).

Masks are checked, not only the values: each activation, state and f32 weight is a view into a
buffer whose columns and rows past the tensor hold NaN (or, where a maximum is taken, +inf), so
a lane that reads past its row changes a sum, a maximum, a softmax, an argmax or a top-k; and
each output the launcher takes as `out=` is a view into a buffer of a sentinel value, which must
still be there around the output afterwards (no lane stores past its row).

Tolerance: cuda_ref.close, 1e-4 of the larger of 1 and the reference's largest magnitude (f32
on both sides; only the order of the sums differs, see test_kernels.py).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on the CPU

import numpy as np
import pytest
import torch

pytest.importorskip("triton", reason="the CUDA kernel tests need triton (the `test` extra)")

from cuda_ref import Bp, close, t  # noqa: E402
from strata.semantics import kernels as K  # noqa: E402
from strata.targets.cuda.kernels import attention, elementwise, gdn, gemm, moe, norms  # noqa: E402

assert type(gemm.gemv_kernel).__name__ == "InterpretedFunction", "the kernels were imported without TRITON_INTERPRET=1"

ROWS = 70
#: The prefill rows of each group kind (by its first node), fewer where the count changes no
#: tile, to keep the interpreter fast: 70 through the GEMM (a 64-row tile, then a partial one)
#: and the delta rule's chunks; 9 where the routed experts run one GEMV per (row, expert) and the
#: shared expert's projections still take the GEMM; 7 through the conv (more than K-1: the new
#: state is all new columns); 3 for the kernels of one program per row (and head).
PREFILL_ROWS_OF = {"linear": ROWS, "lm_head": ROWS, "gdn_recurrence": ROWS, "router": 12, "expert_gate_up": 9,
                   "silu_mul": 9, "conv1d_update": 7}
SHORT = 3
CTX = 96  # KV cache rows: decode at position 40, prefill of 70 rows at position 9
POS = {"decode": 40, "prefill": 9}
SENTINEL = 7777.0
_CACHE: dict = {}


def blueprint(odd_checkpoints, cfg: str, mode: str, recipe: str = "f32") -> Bp:
    key = (cfg, mode, recipe)
    if key not in _CACHE:
        _CACHE[key] = Bp(odd_checkpoints[cfg], mode, 1 if mode == "decode" else ROWS, recipe)
        _CACHE[key].recipe = recipe
    return _CACHE[key]


# ---------------------------------------------------------------------------------------------
# Poisoned inputs, guarded outputs


def padded(a, fill: float = float("nan")) -> torch.Tensor:
    """`a` (1-D, 2-D or 3-D) as a view into a buffer one row and 16 columns larger, the rest `fill`."""
    a = torch.as_tensor(np.ascontiguousarray(a))
    if a.dim() == 1:
        buf = torch.full((a.shape[0] + 16,), fill, dtype=a.dtype)
        buf[:a.shape[0]] = a
        return buf[:a.shape[0]]
    buf = torch.full((*a.shape[:-2], a.shape[-2] + 1, a.shape[-1] + 16), fill, dtype=a.dtype)
    buf[..., :a.shape[-2], :a.shape[-1]] = a
    return buf[..., :a.shape[-2], :a.shape[-1]]


def tail_padded(a, fill: float = float("nan")) -> torch.Tensor:
    """`a` contiguous, in a buffer with 16 more elements of `fill` after its end (for the inputs
    a kernel reads at row * width)."""
    a = np.ascontiguousarray(a)
    buf = torch.full((a.size + 16,), fill, dtype=torch.from_numpy(a).dtype)
    buf[:a.size] = torch.from_numpy(a).reshape(-1)
    return buf[:a.size].view(a.shape)


class Outs:
    """Output buffers of a launch: views into sentinel-filled buffers, checked afterwards."""

    def __init__(self):
        self.bufs: list[tuple[torch.Tensor, tuple]] = []

    def new(self, rows: int, cols: int, dtype=torch.float32) -> torch.Tensor:
        buf = torch.full((rows + 1, cols + 16), SENTINEL, dtype=dtype)
        self.bufs.append((buf, (rows, cols)))
        return buf[:rows, :cols]

    def check(self) -> None:
        for buf, (rows, cols) in self.bufs:
            outside = torch.ones_like(buf, dtype=torch.bool)
            outside[:rows, :cols] = False
            assert bool((buf[outside] == SENTINEL).all()), "a kernel stored past its output's rows or columns"


class Case:
    """One group's run: the blueprint, the numpy inputs, the state, the position; `x(v)` is an
    input as the kernel takes it (poisoned), `w(op)` a node's weight (poisoned when dense f32)."""

    def __init__(self, b: Bp, rows: int, pos: int, ins: dict):
        self.b, self.rows, self.pos, self.ins = b, rows, pos, ins
        self.state: dict = {}  # the reference's state (it updates it)
        self.kernel_state: dict = {}  # the kernels' copies, compared with it afterwards
        self.outs = Outs()
        self.f32 = b.recipe == "f32"

    def x(self, v, fill: float = float("nan")) -> torch.Tensor:
        return padded(self.ins[v], fill)

    def out(self, v) -> torch.Tensor:
        return self.outs.new(self.ins_rows(v), self.b.width(v))

    def ins_rows(self, v) -> int:
        from cuda_ref import dim_value

        return dim_value(v.type.rows.data, self.b.dims | {"n": self.rows})

    def w(self, op):
        if self.f32:
            w = self.b.dense_weight(op)
            return gemm.Weight(padded(w), int(w.shape[-1]))
        return self.b.kernel_weight(op)

    def vec(self, name: str) -> torch.Tensor:
        return padded(self.b.vector(name))

    def dense(self, op) -> torch.Tensor:
        return padded(self.b.dense_weight(op).reshape(-1)) if self.f32 else self.b.dense_weight(op)

    def eps(self, op) -> float:
        return self.b.env().eps_of(op)


# ---------------------------------------------------------------------------------------------
# Each group kind's launch (the launchers host.py calls, with the node's arguments)


def _norm(c: Case, op):
    return [norms.launch_rms_norm(c.x(op.operands[0]), c.dense(op), c.eps(op), out=c.out(op.results[0]))]


def _add_norm(c: Case, add, norm):
    h, y = norms.launch_rms_norm(c.x(add.operands[0]), c.dense(norm), c.eps(norm), residual=c.x(add.operands[1]),
                                 out=c.out(norm.results[0]), sum_out=c.out(add.results[0]))
    return [h, y]


def _linear(c: Case, op, act=None):
    bias = op.attributes.get("bias")
    r = (act or op).results[0]
    return [gemm.launch_linear(c.x(op.operands[0]), c.w(op), bias=c.vec(bias.data) if bias is not None else None,
                               silu_out=act is not None, out=c.out(r))]


def _gates(c: Case, lin, gates):
    a, dt = (c.vec(s.data) for s in gates.attributes["weights"].data)
    return list(gdn.launch_gdn_gates(c.x(lin.operands[0]), c.w(lin), a, dt))


def _state(c: Case, op) -> str:
    """A random state for the node's slot (the reference's copy in c.state), returned by name."""
    name = op.slots.data[0].data
    ty = c.b.fn.attributes["blueprint.state"].data[name]
    c.state[name] = (np.random.default_rng(len(name)).standard_normal(tuple(ty.get_shape())) * 0.3).astype(np.float32)
    return name


def _conv(c: Case, conv, *rest):
    l2 = next((op for op in rest if op.name == "blueprint.l2_norm"), None)
    snap = any(op.name == "blueprint.state_snapshot" for op in rest)
    name = _state(c, conv)
    st = padded(c.state[name].reshape(-1))
    sn = padded(np.zeros(c.state[name].size, np.float32)) if snap else None
    eps = float(l2.attributes["eps"].value.data) if l2 is not None and "eps" in l2.attributes else None
    y = gdn.launch_conv_l2(c.x(conv.operands[0]), c.b.dense_weight(conv), st, k_heads=c.b.dims["lin_k_heads"],
                           k_dim=c.b.dims["lin_k_dim"], eps=eps, snapshot=sn, out=c.out((l2 or conv).results[0]))
    c.kernel_state = {name: st} | ({name + ".snapshot": sn} if snap else {})
    return [y]


def _recurrence(c: Case, op):
    name = _state(c, op)
    st = padded(c.state[name].reshape(-1))
    d = c.b.dims
    got = gdn.launch_gdn_recurrence(c.x(op.operands[2]), tail_padded(c.ins[op.operands[0]]),
                                    tail_padded(c.ins[op.operands[1]]), st,
                                    k_heads=d["lin_k_heads"], k_dim=d["lin_k_dim"], v_heads=d["lin_v_heads"],
                                    v_dim=d["lin_v_dim"], grouped="grouped" in op.attributes,
                                    out=c.out(op.results[0]))
    c.kernel_state = {name: st}
    return [got]


def _gated_norm(c: Case, op):
    return [norms.launch_gated_rms_norm(c.x(op.operands[0]), c.x(op.operands[1]), c.dense(op), c.eps(op),
                                        out=c.out(op.results[0]))]


def _top_k(c: Case, op):
    return list(moe.launch_topk_softmax(c.x(op.operands[0], float("inf")), c.b.dims["top_k"], "norm" in op.attributes))


def _gate_up(c: Case, egu, lin=None):
    return list(moe.launch_moe_gate_up(c.x(egu.operands[0]), t(c.ins[egu.operands[1]]), c.w(egu),
                                       c.w(lin) if lin is not None else None))


def _silu_down(c: Case, *ops):
    down = next(op for op in ops if op.name == "blueprint.expert_down")
    lin = next((op for op in ops if op.name == "blueprint.linear"), None)
    acts = [op for op in ops if op.name == "blueprint.silu_mul"]
    routed_in = next(a for a in acts if a.results[0] in down.operands).operands[0]
    shared_in = next((a.operands[0] for a in acts if a.results[0] not in down.operands), None)
    routed, shared = moe.launch_moe_silu_down(c.x(routed_in), t(c.ins[down.operands[1]]), c.w(down),
                                              c.x(shared_in) if lin is not None else None,
                                              c.w(lin) if lin is not None else None)
    return [routed] + ([shared] if lin is not None else [])


def _blend(c: Case, *ops):
    blend = next(op for op in ops if op.name == "blueprint.blend")
    lin = next((op for op in ops if op.name == "blueprint.linear"), None)
    a = blend.operands
    weights = tail_padded(c.ins[a[0]])
    if lin is None:
        return [moe.launch_blend(weights, c.x(a[1]), out=c.out(blend.results[0]))]
    return [moe.launch_blend(weights, c.x(a[1]), shared_down=c.x(a[2]), x=c.x(lin.operands[0]),
                             w_shared_gate=c.dense(lin).reshape(1, -1), out=c.out(blend.results[0]))]


def _rope(c: Case, op):
    a = op.attributes
    n_dims = int(a["n_dims"].value.data)
    inv = attention.rope_inv_freq(n_dims, float(a["freq_base"].value.data), float(a["freq_scale"].value.data))
    mode = a["mode"].data
    sections = tuple(a["sections"].get_values()) if "sections" in a else (0, 0, 0, 0)
    positions = attention.rope_positions(c.pos, c.rows, mode)
    return [attention.launch_rope(c.x(x), positions, inv, head_dim=c.b.dims["head_dim"], n_dims=n_dims, mode=mode,
                                  sections=sections, out=c.out(r)) for x, r in zip(op.operands, op.results)]


HANDLERS = {
    ("embed",): lambda c, op: [elementwise.launch_embed(t(c.ins[op.operands[0]]), padded(c.b.dense_weight(op)),
                                                        out=c.out(op.results[0]))],
    ("rms_norm",): _norm, ("final_norm",): _norm, ("qk_norm",): lambda c, op: [norms.launch_qk_norm(
        t(c.ins[op.operands[0]]), c.dense(op), c.eps(op))],
    ("residual_add", "rms_norm"): _add_norm,
    ("linear",): _linear, ("lm_head",): _linear, ("router",): _linear, ("linear", "silu_mul"): _linear,
    ("linear", "gdn_gates"): _gates,
    ("conv1d_update", "state_snapshot", "l2_norm"): _conv, ("conv1d_update", "l2_norm"): _conv,
    ("gdn_recurrence",): _recurrence, ("gated_rms_norm",): _gated_norm,
    ("top_k",): _top_k, ("expert_gate_up", "linear"): _gate_up, ("expert_gate_up",): _gate_up,
    ("silu_mul", "expert_down", "silu_mul", "linear"): _silu_down, ("silu_mul", "expert_down"): _silu_down,
    ("linear", "blend"): _blend, ("blend",): _blend,
    ("split",): lambda c, op: list(elementwise.launch_split_qg(c.x(op.operands[0]), c.b.dims["head_dim"])),
    ("sigmoid_gate_mul",): lambda c, op: [elementwise.launch_sigmoid_gate_mul(
        c.x(op.operands[0]), c.x(op.operands[1]), out=c.out(op.results[0]))],
    ("residual_add",): lambda c, op: [elementwise.launch_residual_add(c.x(op.operands[0]), c.x(op.operands[1]),
                                                                      out=c.out(op.results[0]))],
    ("rope",): _rope,
    ("argmax",): lambda c, op: [elementwise.launch_argmax(c.x(op.operands[0], float("inf")), block=64,
                                                          out=c.outs.new(c.rows, 1, torch.int32))],
}
ATTENTION = {("kv_write",), ("paged_attention",)}


def _inputs(b: Bp, g, rows: int) -> dict:
    """b.inputs, but token ids in [0, vocab) for the embedding, and the delta rule's inputs as
    the conv and gates groups make them (l2-normalised q and k, decay <= 0, beta in (0, 1))."""
    nodes = b.nodes(g)
    rng = np.random.default_rng(rows)
    if nodes[0].name == "blueprint.embed":
        return {nodes[0].operands[0]: rng.integers(0, b.dims["vocab"], (rows, 1)).astype(np.int32)}
    if nodes[0].name == "blueprint.gdn_recurrence":
        hk, dk, hv, dv = (b.dims[k] for k in ("lin_k_heads", "lin_k_dim", "lin_v_heads", "lin_v_dim"))
        qk = rng.standard_normal((rows, 2 * hk, dk)).astype(np.float32)
        qk /= np.sqrt((qk * qk).sum(-1, keepdims=True))
        qkv = np.concatenate([qk.reshape(rows, -1), rng.standard_normal((rows, hv * dv)).astype(np.float32)], axis=1)
        dec = -np.abs(rng.standard_normal((rows, hv))).astype(np.float32) * 0.3
        beta = (1 / (1 + np.exp(-rng.standard_normal((rows, hv))))).astype(np.float32)
        return dict(zip(nodes[0].operands, (dec, beta, qkv)))
    return b.inputs(g, rows)


def _check(got: list, want: list) -> None:
    assert len(got) == len(want), (len(got), len(want))
    for x, w in zip(got, want):
        if np.asarray(w).dtype.kind in "iu":
            assert np.array_equal(x.numpy(), w)
        else:
            close(x, w)


def run_group(b: Bp, g, rows: int, pos: int) -> None:  # noqa: D401
    """Launch group `g` on poisoned inputs and compare its outputs (and state) with the reference."""
    nodes = b.nodes(g)
    kinds = tuple(op.name.removeprefix("blueprint.") for op in nodes)
    ins = _inputs(b, g, rows)
    c = Case(b, rows, pos, ins)
    got = HANDLERS[kinds](c, *nodes)
    want = b.reference(g, ins, c.state, pos)
    _check(got, want)
    for name, st in c.kernel_state.items():
        close(st, c.state[name].reshape(-1))
    c.outs.check()


def run_attention(b: Bp, kv_group, att_group, rows: int, pos: int, paged: bool) -> None:
    """kv_write then paged_attention on a cache whose rows past pos + rows (and columns past its
    width) are NaN, contiguous or in shuffled pages of 8 rows."""
    kvw, att = b.nodes(kv_group)[0], b.nodes(att_group)[0]
    width = b.dims["kv_heads"] * b.dims["head_dim"]
    rng = np.random.default_rng(pos)
    names = [s.data for s in kvw.slots.data]
    state = {n: rng.standard_normal((CTX, width)).astype(np.float32) for n in names}
    for n in names:
        state[n][pos + rows:] = np.nan  # never read
    caches = {n: v.copy() for n, v in state.items()}
    ins = b.inputs(kv_group, rows) | b.inputs(att_group, rows)
    b.reference(kv_group, ins, state, pos)
    (want,) = b.reference(att_group, ins, state, pos)
    page, table = 8, None
    if paged:
        order = np.random.default_rng(pos).permutation(CTX // page + 2)[:CTX // page].astype(np.int32)
        phys = {n: np.full(((CTX // page + 2) * page, width), np.nan, np.float32) for n in caches}
        for logical, p in enumerate(order):
            for n in caches:
                phys[n][p * page:(p + 1) * page] = caches[n][logical * page:(logical + 1) * page]
        caches, table = phys, t(order)
    kc, vc = (padded(caches[n]) for n in names)
    attention.launch_kv_write(padded(ins[kvw.operands[0]]), padded(ins[kvw.operands[1]]), kc, vc, pos,
                              block_table=table, page=page)
    outs = Outs()
    got = attention.launch_attention(padded(ins[att.operands[0]]), kc, vc, pos,
                                     float(att.attributes["scale"].value.data), head_dim=b.dims["head_dim"],
                                     kv_heads=b.dims["kv_heads"], block_table=table, page=page,
                                     out=outs.new(rows, b.width(att.results[0])))
    close(got, want)
    outs.check()
    if not paged:
        for n, cache in zip(names, (kc, vc)):
            close(cache[:pos + rows], state[n][:pos + rows])


def _rows(kind: tuple, rows: int) -> int:
    return min(rows, PREFILL_ROWS_OF.get(kind[0], SHORT))


def distinct_groups(b: Bp) -> list:
    """One group per (rule, operand and result widths): each launch shape of the blueprint once."""
    seen, out = set(), []
    for g in b.fn.walk():
        if type(g).__name__ != "GroupOp":
            continue
        nodes = b.nodes(g)
        key = (g.rule.data, tuple(b.width(v) for op in nodes for v in op.operands),
               tuple(b.width(r) for op in nodes for r in op.results))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


# ---------------------------------------------------------------------------------------------
# The models' groups


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("cfg", ["odd_qwen35_moe", "odd_qwen3_next", "odd_qwen3", "odd_llama"])
def test_every_group_of_the_odd_models(odd_checkpoints, cfg, mode):
    """Every group of the f32 blueprint, each launch shape once; attention on both cache layouts."""
    b = blueprint(odd_checkpoints, cfg, mode)
    rows = 1 if mode == "decode" else ROWS
    groups = distinct_groups(b)
    kinds = {tuple(op.name.removeprefix("blueprint.") for op in b.nodes(g)) for g in groups}
    assert kinds - ATTENTION <= set(HANDLERS), sorted(kinds - ATTENTION - set(HANDLERS))
    for g in groups:
        kind = tuple(op.name.removeprefix("blueprint.") for op in b.nodes(g))
        if kind not in ATTENTION:
            run_group(b, g, _rows(kind, rows), POS[mode])
    kv = next(g for g in groups if b.nodes(g)[0].name == "blueprint.kv_write")
    att = next(g for g in groups if b.nodes(g)[0].name == "blueprint.paged_attention")
    for paged in (False, True):
        run_attention(b, kv, att, rows, POS[mode], paged)


QUANTIZED = ("linear", "lm_head", "router", "expert_gate_up", "expert_down")


@pytest.mark.parametrize("cfg,recipe", [("odd_qwen3_next", "fp8-bf16head"), ("odd_qwen35_moe", "w4a16"),
                                        ("odd_qwen3", "fp8-bf16head"), ("odd_qwen3", "w4a16")])
def test_quantized_weights_at_odd_sizes(odd_checkpoints, cfg, recipe):
    """The GEMV (1 row) and GEMM (70 rows) of each weight format on every projection, experts
    included (60 of them with fp8, 6 with int4): fp8 blocks of 128 and int4 blocks along K
    larger than the odd dims."""
    ran = set()  # (mode, node kind, weight element) of each quantizable node that ran
    for mode in ("decode", "prefill"):
        b = blueprint(odd_checkpoints, cfg, mode, recipe)
        rows = 1 if mode == "decode" else ROWS
        for g in distinct_groups(b):
            nodes = b.nodes(g)
            kind = tuple(op.name.removeprefix("blueprint.") for op in nodes)
            if set(kind) & set(QUANTIZED):
                run_group(b, g, _rows(kind, rows), POS[mode])
                ran |= {(mode, op.name.removeprefix("blueprint."), b.weight_elem(op)) for op in nodes
                        if op.name.removeprefix("blueprint.") in QUANTIZED}
    # The recipe's format reached the kernels: the projections, and the experts where there are some.
    quantized = {"fp8-bf16head": "fp8", "w4a16": "int4"}[recipe]
    kinds = ("linear", "expert_gate_up", "expert_down") if cfg in ("odd_qwen3_next", "odd_qwen35_moe") else ("linear",)
    assert {(mode, kind, quantized) for mode in ("decode", "prefill") for kind in kinds} <= ran, sorted(ran)


# ---------------------------------------------------------------------------------------------
# What the models do not make


def _rope_case(hd: int, mode: str):
    quarter = hd // 4 + (hd // 4) % 2  # partial rotary: an even quarter of the head
    return {"neox": (hd, None), "neox_partial": (quarter, None), "norm": (hd, None),
            "mrope": (quarter, (quarter // 6 + 1, quarter // 6, quarter // 2 - 2 * (quarter // 6) - 1, 0)),
            "imrope": (quarter, (quarter // 6 + 1, quarter // 6, quarter // 2 - 2 * (quarter // 6) - 1, 0))}[mode]


@pytest.mark.parametrize("mode", ["neox", "neox_partial", "norm", "mrope", "imrope"])
@pytest.mark.parametrize("hd", [12, 80, 96])
def test_rope_at_odd_head_dims(hd, mode):
    """Every RoPE mode on 3 heads of 12, 80 and 96: full and partial rotary (n_dims a quarter),
    M-RoPE sections of odd sizes, against the reference's K.rope."""
    n_dims, sections = _rope_case(hd, mode)
    kind = mode.removesuffix("_partial")
    rng = np.random.default_rng(hd)
    n, heads = 4, 3
    x = rng.standard_normal((n, heads * hd)).astype(np.float32)
    pos = rng.integers(0, 50, (4, n) if sections else n).astype(np.int32)
    want = K.rope(x.reshape(n, heads, hd), pos.reshape(-1), n_dims, kind, 1e4, 1.0, None, sections).reshape(n, -1)
    outs = Outs()
    got = attention.launch_rope(padded(x), t(pos), attention.rope_inv_freq(n_dims, 1e4), head_dim=hd, n_dims=n_dims,
                                mode=kind, sections=sections or (0, 0, 0, 0), out=outs.new(n, heads * hd))
    close(got, want)
    outs.check()


@pytest.mark.parametrize("d,n,chunked", [(12, 3, False), (80, 3, False), (96, 3, False), (80, ROWS, True)])
def test_delta_rule_at_odd_head_dims(d, n, chunked):
    """The gated delta rule with heads of 12, 80 and 96 (3 value heads on one key head), a step
    per token, and at 80 in chunks of 64 (70 rows: a full chunk and a partial one; the models'
    sweep chunks 12 and 96), against K.gated_delta_net; inputs and state in NaN-padded buffers."""
    rng = np.random.default_rng(d)
    hk, hv = 1, 3
    q, k = (rng.standard_normal((n, hk, d)).astype(np.float32) for _ in range(2))
    q, k = (x / np.sqrt((x * x).sum(-1, keepdims=True)) for x in (q, k))
    v = rng.standard_normal((n, hv, d)).astype(np.float32)
    g = -np.abs(rng.standard_normal((n, hv, 1))).astype(np.float32) * 0.3
    beta = rng.uniform(0, 1, (n, hv, 1)).astype(np.float32)
    s0 = rng.standard_normal((hv, d, d)).astype(np.float32) * 0.3
    res = K.gated_delta_net(q, k, v, g, beta, s0, grouped=True)
    st = padded(s0.reshape(-1))
    qkv = np.concatenate([q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)], axis=1)
    got = gdn.launch_gdn_recurrence(padded(qkv), tail_padded(g[..., 0]), tail_padded(beta[..., 0]), st, k_heads=hk,
                                    k_dim=d, v_heads=hv, v_dim=d, grouped=True, chunked=chunked)
    close(got, res[:n])
    close(st, res[n:].reshape(-1))


def _topk_reference(x: np.ndarray, k: int, norm: bool):
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, -1)
    if norm:
        w = w / np.maximum(w.sum(-1, keepdims=True), moe.NORM_MIN)
    return w, ids.astype(np.int32)


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("experts,k", [(6, 3), (60, 4), (60, 5)])
def test_top_k_at_odd_expert_counts(experts, k, norm):
    """Softmax + top-k over 6 and 60 experts (odd k too), +inf past each row: ties go to the lower
    expert (a row all equal, a row with its largest logit tied at both ends)."""
    x = np.random.default_rng(experts + k).standard_normal((4, experts)).astype(np.float32)
    x[1] = 0.5
    x[2, 0] = x[2, -1] = x[2].max() + 1.0
    w_want, id_want = _topk_reference(x, k, norm)
    w, ids = moe.launch_topk_softmax(padded(x, float("inf")), k, norm)
    close(w, w_want)
    assert np.array_equal(ids.numpy(), id_want)


def test_argmax_and_silu_mul_at_odd_widths():
    """argmax over a vocab of 150 in blocks of 64 (the last partial), +inf past each row: the first
    index of a maximum tied across blocks, one in the partial block; SiLU-mul at intermediates 20, 96."""
    x = np.random.default_rng(4).standard_normal((3, 150)).astype(np.float32)
    x[0, 10] = x[0, 140] = 9.0
    x[1, 149] = 9.0
    got = elementwise.launch_argmax(padded(x, float("inf")), block=64)
    assert got[:, 0].tolist() == [10, 149, int(np.argmax(x[2]))]
    for inter in (20, 96):
        y = np.random.default_rng(inter).standard_normal((3, 2 * inter)).astype(np.float32)
        outs = Outs()
        close(elementwise.launch_silu_mul(padded(y), out=outs.new(3, inter)), K.swiglu(y[:, :inter], y[:, inter:]))
        outs.check()
