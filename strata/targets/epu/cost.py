"""An ESTIMATE of one decode step's cost on a QC-U-like EPU, per custom op: MACs, bytes moved over
DDR, cycles, and tokens/s. Not a simulator: a documented roofline.

The machine (Quadric Chimera's QC-U): a 32 x 32 PE array with 8 MACs per PE (8192 MACs per cycle) at
1.5 GHz, 8 MB on-chip memory, 128 GB/s DDR (85.3 bytes per cycle). The model:

- activations stay on chip (a decode step's are well under 8 MB); what crosses DDR is every weight
  the op reads (int4 B, its int32 scales and zero points; int32 norm weights; one embedding row)
  and the KV cache (the op reads pos+1 int8 rows of k and v per kv head and writes one of each);
- MACs: a projection M*N*K, attention 2 * rows * q_heads * (pos+1) * head_dim, an element-wise or
  norm op one per element;
- cycles of an op = max(MACs / 8192, DDR bytes / 85.3) (compute and transfer overlap), summed
  over the ops in program order; tokens/s = 1.5e9 / cycles of one step.

Quadric's Chimera SDK measured 32.6 M cycles and 46 tokens/s for one Sarashina2.2-3B decode step on the ISS;
`bench/epu_gate.py` prints this model's estimate for the same shapes next to that anchor.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from strata.dialects import fixed as FX
from strata.dialects import fixed_kv as KV
from strata.ir.checks import shape_of


@dataclass(frozen=True)
class Machine:
    name: str = "QC-U-like (array 32, 8 MACs/PE, 1.5 GHz, 8 MB OCM, 128 GB/s DDR)"
    array: int = 32
    macs_per_pe: int = 8
    clock_hz: float = 1.5e9
    ocm_bytes: int = 8 << 20
    ddr_bytes_per_s: float = 128e9

    @property
    def macs_per_cycle(self) -> int:
        return self.array * self.array * self.macs_per_pe

    @property
    def ddr_bytes_per_cycle(self) -> float:
        return self.ddr_bytes_per_s / self.clock_hz


QCU = Machine()


def _n(v: SSAValue) -> int:
    n = 1
    for d in shape_of(v):
        n *= d
    return n


def _bytes(v: SSAValue) -> int:
    t = v.type
    el = t.get_element_type()  # type: ignore[attr-defined]
    width = 4 if isinstance(el, FX.FixedPointType) else max(1, el.width.data // 8)  # type: ignore[attr-defined]
    return _n(v) * width


def op_cost(op: Operation, pos: int) -> tuple[str, int, int] | None:
    """(what, MACs, DDR bytes) of one op of a decode step at position `pos`, or None (free)."""
    if isinstance(op, FX.MatmulW4A16Op):
        m, k = shape_of(op.src)
        n = shape_of(op.result)[1]
        return (op.node.data if op.node else "w4a16", m * n * k, _bytes(op.b) + _bytes(op.scales) + _bytes(op.zp))
    if isinstance(op, FX.MatmulOp):
        m, k = shape_of(op.src)
        return (op.node.data if op.node else "matmul", m * shape_of(op.weight)[0] * k, _bytes(op.weight))
    if isinstance(op, KV.CacheAttentionOp):
        rows, qw = shape_of(op.q)
        kw = shape_of(op.k)[1]
        hd = op.head_dim.value.data
        seen = pos + rows
        return (op.node.data if op.node else "attention", 2 * rows * (qw // hd) * seen * hd, 2 * seen * kw + 2 * rows * kw)
    if isinstance(op, FX.EmbedOp):
        return ("embed", 0, _n(op.result) * 4)
    if isinstance(op, FX.RmsNormOp):
        return (op.node.data if op.node else "rms_norm", 2 * _n(op.src), _bytes(op.weight))
    if isinstance(op, (FX.AddOp, FX.MulOp, FX.SiluOp, FX.SigmoidOp, FX.RopeOp, FX.RescaleOp)):
        return (op.node.data if getattr(op, "node", None) else op.name.split(".")[1], _n(op.results[0]), 0)
    return None


@dataclass
class Cost:
    rows: list[tuple[str, int, int, float]]  # what, MACs, DDR bytes, cycles
    machine: Machine

    @property
    def macs(self) -> int:
        return sum(r[1] for r in self.rows)

    @property
    def ddr_bytes(self) -> int:
        return sum(r[2] for r in self.rows)

    @property
    def cycles(self) -> float:
        return sum(r[3] for r in self.rows)

    @property
    def tokens_per_s(self) -> float:
        return self.machine.clock_hz / self.cycles if self.cycles else 0.0


def step_cost(module: ModuleOp, pos: int = 7, machine: Machine = QCU) -> Cost:
    """The estimate of one decode step at position `pos` (Chimera's Sarashina2.2-3B run: a 7-token prompt), one row
    per custom op (a packed projection, an attention with its ropes and cache) or other op."""
    from strata.targets.epu.emit import custom_op_groups

    rows = []
    for fn in module.walk():
        if not isinstance(fn, func.FuncOp):
            continue
        groups = custom_op_groups(fn)
        leader: dict[Operation, Operation] = {}
        for lead, (kind, parts) in groups.lead.items():
            members = parts if kind != "mha" else [parts["qrope"], parts["krope"]] + [
                x for kv in ("k", "v") for x in parts[kv].values()]
            for m in members:
                leader[m] = lead
        acc: dict[Operation, list] = {}
        for op in fn.body.block.ops:
            c = op_cost(op, pos)
            if c is None:
                continue
            lead = leader.get(op, op)
            if lead not in acc:
                kind = groups.lead[lead][0] if lead in groups.lead else ""
                n = len(groups.lead[lead][1]) if kind == "packed" else 0
                name = {"packed": f"w4a16PackedProj<{n}> ", "nbits": "w4a16NBitsMatMul ",
                        "mha": "qwenMultiheadAttentionFx32RoPE "}.get(kind, "")
                node = getattr(lead, "node", None)
                acc[lead] = [name + (node.data if node is not None else c[0]), 0, 0]
                rows.append(acc[lead])
            acc[lead][1] += c[1]
            acc[lead][2] += c[2]
    out = [(w, m, b, max(m / machine.macs_per_cycle, b / machine.ddr_bytes_per_cycle)) for w, m, b in rows]
    return Cost(out, machine)


def summary(cost: Cost, pos: int = 7) -> str:
    return (f"ESTIMATE (roofline, {cost.machine.name}; not a simulation): one decode step at position {pos}: "
            f"{cost.macs / 1e6:.1f} M MACs, {cost.ddr_bytes / 1e6:.2f} MB over DDR, {cost.cycles / 1e6:.3f} M cycles, "
            f"{cost.tokens_per_s:.1f} tokens/s")


def cost_table(module: ModuleOp, pos: int = 7, machine: Machine = QCU) -> str:
    """One line per op (what, MACs, DDR bytes, cycles), then the totals, labelled an estimate."""
    cost = step_cost(module, pos, machine)
    lines = [summary(cost, pos), f"{'op':<44} {'MACs':>14} {'DDR bytes':>14} {'cycles':>12}"]
    lines += [f"{w[:44]:<44} {m:>14} {b:>14} {c:>12.0f}" for w, m, b, c in cost.rows]
    return "\n".join(lines) + "\n"
