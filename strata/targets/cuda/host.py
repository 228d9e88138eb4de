"""The launch sequence of each entry: one blueprint group -> one call of a kernel launcher.

`entry_code(fn, tables)` prints the method `_<entry>(self, ids, n, P, R)` of the generated
`Model`: `ids` the token rows, `n` their count, `P` the position (an int, or an int32 device
scalar under a CUDA graph), `R` the rope positions by mode. Values are locals `t0, t1, ...`;
weights are `W[i]` (the i-th entry of the weight table, prepared once as its node's format
says) and state buffers `S['name']`. The group's rule picks the launcher (`kernel_table`), the
nodes give the arguments (eps, rope mode/sections/base, attention scale, top-k norm, slots).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import func

from strata.dialects import blueprint as B
from strata.dialects.blueprint.attrs import AS_STORED, GGUF_FORMATS
from strata.ir.shapes import parse_expr
from strata.targets.codegen import CodegenError, literal_name, sanitize_label
from strata.targets.cuda.host_collectives import CollectivePrinter
from strata.targets.cuda.kernel_table import NoKernel, lookup


@dataclass
class Tables:
    """What the entries share: the weight table, the state and rope tables, the launchers used."""

    weights: list = field(default_factory=list)  # (kind, parts, fmt, block)
    convert: dict = field(default_factory=dict)  # name -> (source, kind, args)
    state: dict = field(default_factory=dict)  # name -> (shape, elem)
    recurrent: set = field(default_factory=set)
    paged: set = field(default_factory=set)
    ropes: list = field(default_factory=list)  # (n_dims, base, scale)
    rope_modes: set = field(default_factory=set)
    launchers: set = field(default_factory=set)
    #: Whether model.py carries the numpy sampler (a sampler placed on the host).
    host_sampler: bool = False

    def weight(self, kind: str, parts: tuple[str, ...], fmt: str = "f32", block: tuple[int, int] = (1, 1)) -> str:
        for p in parts:
            literal_name(p, "weight name")
        spec = (kind, parts, fmt, block)
        if spec not in self.weights:
            self.weights.append(spec)
        return f"W[{self.weights.index(spec)}]"

    def rope(self, n_dims: int, base: float, scale: float, factors: tuple[float, ...] | None = None) -> int:
        spec = (n_dims, base, scale, factors)
        if spec not in self.ropes:
            self.ropes.append(spec)
        return self.ropes.index(spec)


def _attr_float(op, name: str, default: float | None = None) -> float:
    a = op.attributes.get(name)
    if a is None:
        if default is None:
            raise CodegenError(f"{op.name}: no '{name}' attribute")
        return default
    return float(a.value.data)


def _fmt(op) -> tuple[str, tuple[int, int]]:
    """(element type, block) of a node's weight format (f32 when it has none)."""
    p = op.attributes.get("precision")
    f = p.fields().get("weight") if p is not None else None
    if f is None:
        return "f32", (1, 1)
    elem = f.elem.data
    if f.is_stored_blocks:  # a GGUF block format (or `gguf`: each part's own): the file's blocks, read in place
        return elem, (1, 1)
    if elem == "fp8":
        block = tuple(int(b) for b in f.block_sizes) if len(f.block_sizes) == 2 else (128, 128)
        return elem, block
    if elem == "int4":
        if not f.is_asymmetric:
            raise CodegenError(f"{op.name}: int4 weights are asymmetric only (ONNX Runtime's formula)")
        return elem, (1, int(f.block_sizes[0]) if f.block_sizes else 128)
    if elem not in ("bf16", "f16", "f32"):
        raise CodegenError(f"{op.name}: weight format '{elem}' has no kernel")
    return elem, (1, 1)


def _act(op) -> str | None:
    """The element type of a node's activation format, if it has one."""
    p = op.attributes.get("precision")
    f = p.fields().get("activation") if p is not None else None
    return f.elem.data if f is not None else None


def _parts(op) -> tuple[str, ...]:
    return (op.param.data,) + tuple(c.data for c in (op.concat.data if op.concat else ()))


def _slots(op, effect: str) -> list[str]:
    effects = list(op.effects.data) if getattr(op, "effects", None) else []
    slots = [s.data for s in op.slots.data] if getattr(op, "slots", None) else [e.state.data for e in effects]
    return [checked(s, "state buffer") for e, s in zip(effects, slots) if e.effect.data == effect]


def checked(name: str, what: str) -> str:
    """`name` itself, after `literal_name` found it safe to print as a literal."""
    literal_name(name, what)
    return name


class _Printer(CollectivePrinter):
    def __init__(self, fn: func.FuncOp, tables: Tables):
        self.fn, self.t = fn, tables
        self.dims = B.function_dims(fn)
        self.names: dict = {}
        self.lines: list[str] = []
        self.prefill = fn.attributes["blueprint.mode"].data == "prefill"
        self.rows_var = "n"

    def name(self, v) -> str:
        if v not in self.names:
            self.names[v] = f"t{len(self.names)}"
        return self.names[v]

    def cols(self, v) -> int:
        if "/" in v.type.dim.data:  # a rank's piece of a dim (`vocab / ranks`): `ranks` is a dim symbol too
            return int(parse_expr(v.type.dim.data).evaluate(self.dims))
        total = 0
        for term in v.type.dim.data.split("+"):
            prod = 1
            for f in term.split("*"):
                if f.isdigit():
                    prod *= int(f)
                elif f in self.dims:
                    prod *= self.dims[f]
                else:
                    raise CodegenError(f"edge dim '{sanitize_label(v.type.dim.data)}': '{sanitize_label(f)}' is unbound")
            total += prod
        return total

    def rows(self, v) -> str:
        factors = []
        for f in v.type.rows.data.split("*"):
            if f == "n":
                factors.append("n")
            elif f.isdigit():
                factors.append(f)
            elif f in self.dims:
                factors.append(str(self.dims[f]))
            else:
                raise CodegenError(f"edge rows '{sanitize_label(v.type.rows.data)}' cannot be evaluated")
        return " * ".join(factors)

    def elem(self, v) -> str:
        e = str(v.type.element)
        if e not in ("f32", "bf16", "f16", "i32"):
            raise CodegenError(f"an edge of element type '{sanitize_label(e)}' has no CUDA dtype")
        return e

    def new(self, v) -> str:
        return f"self._new({self.rows(v)}, {self.cols(v)}, {self.elem(v)!r})"

    def dt(self, v) -> str:
        return f"self._dt({self.elem(v)!r})"

    def emit(self, text: str, launcher: str | None = None) -> None:
        self.lines.append(text)
        if launcher:
            self.t.launchers.add(launcher)

    # -- groups -------------------------------------------------------------------------------

    def group(self, g: B.GroupOp) -> None:
        rule = g.rule.data
        try:
            lookup(rule)
        except NoKernel as e:
            raise CodegenError(str(e).strip('"')) from None
        nodes = [op for op in g.body.block.ops if not isinstance(op, B.YieldOp)]
        yld = g.body.block.last_op
        kinds = tuple(op.name.removeprefix("blueprint.") for op in nodes)
        label = ", ".join(sanitize_label(op.attributes["node"].data) for op in nodes if "node" in op.attributes)
        self.emit(f"# {sanitize_label(rule)}: {label}")
        handler = getattr(self, "g_" + "_".join(k for k in kinds if k != "state_snapshot"), None)
        if handler is None:
            raise CodegenError(f"group '{sanitize_label(rule)}': no launch for nodes {', '.join(kinds)}")
        handler(*[op for op in nodes if op.name != "blueprint.state_snapshot"],
                snap=any(op.name == "blueprint.state_snapshot" for op in nodes))
        for r, v in zip(g.results, yld.operands):
            if v not in self.names:
                raise CodegenError(f"group '{sanitize_label(rule)}' yields a value its launch does not compute")
            self.names[r] = self.names[v]

    def x(self, v) -> str:
        if v not in self.names:
            raise CodegenError("a value is used before the group that computes it")
        return self.names[v]

    def g_embed(self, op, snap=False):
        fmt, _ = _fmt(op)
        if fmt == "f32":
            w = self.t.weight("raw", (op.param.data,))
        else:  # a GGUF block format: the linear spec a tied head has too, so both read one copy of the blocks
            w = self.t.weight("linear", (op.param.data,), fmt, (1, 1))
        r = op.results[0]
        self.emit(f"{self.name(r)} = {self.embed_call(op)}({self.x(op.operands[0])}, {w}, out={self.new(r)})",
                  "launch_embed")

    def _norm(self, op, snap=False):
        w = self.t.weight("raw", (op.param.data,))
        r = op.results[0]
        src = self.x(op.operands[0])
        if op.name == "blueprint.final_norm" and self.prefill:  # only the last row is sampled
            self.emit(f"{src} = {src}[n - 1:]")
            self.emit("n = 1")
        self.emit(f"{self.name(r)} = K.launch_rms_norm({src}, {w}, {_attr_float(op, 'eps', 1e-6)!r}, "
                  f"out={self.new(r)})", "launch_rms_norm")

    g_rms_norm = g_final_norm = _norm

    def g_residual_add_rms_norm(self, add, norm, snap=False):
        if norm.operands[0] != add.results[0]:
            raise CodegenError("residual_add + rms_norm: the norm does not read the sum")
        w = self.t.weight("raw", (norm.param.data,))
        h, y = add.results[0], norm.results[0]
        self.emit(f"{self.name(h)}, {self.name(y)} = K.launch_rms_norm({self.x(add.operands[0])}, {w}, "
                  f"{_attr_float(norm, 'eps', 1e-6)!r}, residual={self.x(add.operands[1])}, out={self.new(y)}, "
                  f"sum_out={self.new(h)})", "launch_rms_norm")

    def g_linear(self, op, snap=False, silu: B.SiluMulOp | None = None):
        fmt, block = _fmt(op)
        w = self.t.weight("linear", _parts(op), fmt, block)
        bias = op.attributes.get("bias")
        extra = f", bias={self.t.weight('raw', (bias.data,))}" if bias is not None else ""
        r = silu.results[0] if silu is not None else op.results[0]
        if silu is not None:
            extra += ", silu_out=True"
        if _act(op) in ("bf16", "f16") and str(op.operands[0].type.element) == "f32":
            extra += ", dot_bf16=self.bf16_dot"  # an f32 edge into a bf16-activation GEMM
        self.emit(f"{self.name(r)} = K.launch_linear({self.x(op.operands[0])}, {w}{extra}, out={self.new(r)})",
                  "launch_linear")

    g_lm_head = g_router = g_linear

    def g_linear_silu_mul(self, lin, act, snap=False):
        if act.operands[0] != lin.results[0]:
            raise CodegenError("linear + silu_mul: the SiLU does not read the projection")
        self.g_linear(lin, silu=act)

    def g_linear_gdn_gates(self, lin, gates, snap=False):
        fmt, block = _fmt(lin)
        w = self.t.weight("linear", _parts(lin), fmt, block)
        a, dt = (self.t.weight("raw", (s.data,)) for s in gates.attributes["weights"].data)
        g, beta = gates.results
        self.emit(f"{self.name(g)}, {self.name(beta)} = K.launch_gdn_gates({self.x(lin.operands[0])}, {w}, {a}, {dt})",
                  "launch_gdn_gates")

    def _snapshot(self, slot: str, snap: bool) -> str:
        if not snap:
            return ""
        self.t.state[slot + ".snapshot"] = self.t.state[slot]
        return f", snapshot=S[{checked(slot + '.snapshot', 'state buffer')!r}]"

    def _state_of(self, slot: str) -> None:
        ty = self.fn.attributes["blueprint.state"].data.get(slot)
        if ty is None:
            raise CodegenError(f"state buffer '{sanitize_label(slot)}' is not in the function's blueprint.state")
        self.t.state[slot] = (tuple(ty.get_shape()), str(ty.get_element_type()))

    def g_conv1d_update_l2_norm(self, conv, l2=None, snap=False):
        (slot,) = _slots(conv, "update")
        self._state_of(slot)
        self.t.recurrent.add(slot)
        w = self.t.weight("raw", (conv.param.data,))
        out = (l2 or conv).results[0]
        heads = f"k_heads={self.dims['lin_k_heads']}, k_dim={self.dims['lin_k_dim']}" if l2 is not None else \
            "k_heads=0, k_dim=1"
        eps = f", eps={_attr_float(l2, 'eps')!r}" if l2 is not None and "eps" in l2.attributes else ""
        self.emit(f"{self.name(out)} = K.launch_conv_l2({self.x(conv.operands[0])}, {w}, S[{slot!r}], {heads}{eps}"
                  f"{self._snapshot(slot, snap)}, out={self.new(out)})", "launch_conv_l2")

    g_conv1d_update = g_conv1d_update_l2_norm

    def g_gdn_recurrence(self, op, snap=False):
        (slot,) = _slots(op, "update")
        self._state_of(slot)
        self.t.recurrent.add(slot)
        d = self.dims
        g, beta, qkv = (self.x(v) for v in op.operands)
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_gdn_recurrence({qkv}, {g}, {beta}, S[{slot!r}], "
                  f"k_heads={d['lin_k_heads']}, k_dim={d['lin_k_dim']}, v_heads={d['lin_v_heads']}, "
                  f"v_dim={d['lin_v_dim']}, grouped={'grouped' in op.attributes}{self._snapshot(slot, snap)}, "
                  f"out={self.new(r)})", "launch_gdn_recurrence")

    def g_gated_rms_norm(self, op, snap=False):
        w = self.t.weight("raw", (op.param.data,))
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_gated_rms_norm({self.x(op.operands[0])}, {self.x(op.operands[1])}, {w}, "
                  f"{_attr_float(op, 'eps', 1e-6)!r}, out={self.new(r)})", "launch_gated_rms_norm")

    def g_top_k(self, op, snap=False):
        w, ids = op.results
        self.emit(f"{self.name(w)}, {self.name(ids)} = K.launch_topk_softmax({self.x(op.operands[0])}, "
                  f"{self.dims['top_k']}, {'norm' in op.attributes})", "launch_topk_softmax")

    def _experts_fmt(self, op) -> tuple[str, tuple[int, int]]:
        """A routed experts node's format; a GGUF block format's block is (the experts, 1): the
        file's blocks are rows of every expert, one after another."""
        fmt, block = _fmt(op)
        return (fmt, (self.dims["experts"], 1)) if fmt in GGUF_FORMATS + (AS_STORED,) else (fmt, block)

    def g_expert_gate_up(self, egu, lin=None, snap=False):
        fmt, block = self._experts_fmt(egu)
        we = self.t.weight("linear", _parts(egu), fmt, block)
        shared = ""
        if lin is not None:
            fmt, block = _fmt(lin)
            shared = ", " + self.t.weight("linear", _parts(lin), fmt, block)
            if lin.operands[0] != egu.operands[0]:
                raise CodegenError("moe gate-up: the shared expert reads another input")
        r = egu.results[0]
        outs = f"{self.name(r)}, {self.name(lin.results[0]) if lin is not None else '_'}"
        ids, mine = self.expert_ids(egu, self.x(egu.operands[1]), we)
        self.emit(f"{outs} = K.launch_moe_gate_up({self.x(egu.operands[0])}, {ids}, {we}{shared}, "
                  f"out_dtype={self.dt(r)})", "launch_moe_gate_up")
        self.zero_foreign(self.name(r), mine)

    g_expert_gate_up_linear = g_expert_gate_up

    def g_silu_mul_expert_down(self, act, down, act2=None, lin=None, snap=False):
        if down.operands[0] != act.results[0]:
            raise CodegenError("moe down: the experts do not read the SiLU")
        fmt, block = self._experts_fmt(down)
        wd = self.t.weight("linear", (down.param.data,), fmt, block)
        shared = ""
        if lin is not None:
            if lin.operands[0] != act2.results[0]:
                raise CodegenError("moe down: the shared expert does not read its SiLU")
            fmt, block = _fmt(lin)
            shared = f", {self.x(act2.operands[0])}, {self.t.weight('linear', _parts(lin), fmt, block)}"
        r = down.results[0]
        outs = f"{self.name(r)}, {self.name(lin.results[0]) if lin is not None else '_'}"
        ids, mine = self.expert_ids(down, self.x(down.operands[1]), wd)
        self.emit(f"{outs} = K.launch_moe_silu_down({self.x(act.operands[0])}, {ids}, {wd}"
                  f"{shared}, out_dtype={self.dt(r)})", "launch_moe_silu_down")
        self.zero_foreign(self.name(r), mine)

    g_silu_mul_expert_down_silu_mul_linear = g_silu_mul_expert_down

    def g_blend(self, blend, snap=False, lin=None):
        a = [self.x(v) if lin is None or v != lin.results[0] else None for v in blend.operands]
        r = blend.results[0]
        if len(a) == 2:
            self.emit(f"{self.name(r)} = K.launch_blend({a[0]}, {a[1]}, out={self.new(r)})", "launch_blend")
            return
        if lin is None or blend.operands[3] != lin.results[0]:
            raise CodegenError("blend with a shared expert: the shared gate must be computed in the group")
        fmt, block = _fmt(lin)
        w = self.t.weight("dense", _parts(lin), fmt, block)
        self.emit(f"{self.name(r)} = K.launch_blend({a[0]}, {a[1]}, shared_down={a[2]}, x={self.x(lin.operands[0])}, "
                  f"w_shared_gate={w}, out={self.new(r)})", "launch_blend")

    def g_linear_blend(self, lin, blend, snap=False):
        self.g_blend(blend, lin=lin)

    def g_residual_add(self, op, snap=False):
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_residual_add({self.x(op.operands[0])}, {self.x(op.operands[1])}, "
                  f"out={self.new(r)})", "launch_residual_add")

    def g_sigmoid_gate_mul(self, op, snap=False):
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_sigmoid_gate_mul({self.x(op.operands[0])}, {self.x(op.operands[1])}, "
                  f"out={self.new(r)})", "launch_sigmoid_gate_mul")

    def g_silu_mul(self, op, snap=False):
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_silu_mul({self.x(op.operands[0])}, out={self.new(r)})", "launch_silu_mul")

    def g_argmax(self, op, snap=False):
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_argmax({self.x(op.operands[0])}, out={self.new(r)})", "launch_argmax")

    def g_split(self, op, snap=False):
        q, g = op.results
        self.emit(f"{self.name(q)}, {self.name(g)} = K.launch_split_qg({self.x(op.operands[0])}, "
                  f"{self.dims['head_dim']})", "launch_split_qg")

    def g_qk_norm(self, op, snap=False):
        w = self.t.weight("raw", (op.param.data,))
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_qk_norm({self.x(op.operands[0])}, {w}, {_attr_float(op, 'eps', 1e-6)!r}, "
                  f"out={self.new(r)})", "launch_qk_norm")

    def g_rope(self, op, snap=False):
        a = op.attributes
        if "mode" not in a:
            raise CodegenError("rope without a mode (the unfused attention node) has no kernel")
        mode = a["mode"].data
        if mode not in ("neox", "norm", "mrope", "imrope"):
            raise CodegenError(f"rope mode '{sanitize_label(mode)}' has no kernel")
        n_dims = int(a["n_dims"].value.data)
        factors = tuple(float(v) for v in a["freq_factors"].get_values()) if "freq_factors" in a else None
        ri = self.t.rope(n_dims, _attr_float(op, "freq_base"), _attr_float(op, "freq_scale", 1.0), factors)
        self.t.rope_modes.add(mode)
        sections = tuple(int(s) for s in a["sections"].get_values()) if "sections" in a else (0, 0, 0, 0)
        for x, r in zip(op.operands, op.results):
            self.emit(f"{self.name(r)} = K.launch_rope({self.x(x)}, R[{mode!r}], self.inv[{ri}], "
                      f"head_dim={self.dims['head_dim']}, n_dims={n_dims}, mode={mode!r}, sections={sections}, "
                      f"out={self.new(r)})", "launch_rope")

    def _kv(self, op, effect: str) -> tuple[str, str, str]:
        slots = _slots(op, effect)
        if len(slots) != 2:
            raise CodegenError(f"{op.name}: expected a K and a V buffer to {effect}")
        paged = "kv_layout" in op.attributes and op.attributes["kv_layout"].data == "paged"
        for s in slots:
            self._state_of(s)
            if paged:
                self.t.paged.add(s)
        return slots[0], slots[1], "self.bt" if paged else "None"

    def g_kv_write(self, op, snap=False):
        kc, vc, bt = self._kv(op, "write")
        self.emit(f"K.launch_kv_write({self.x(op.operands[0])}, {self.x(op.operands[1])}, S[{kc!r}], S[{vc!r}], P, "
                  f"block_table={bt}, page=PAGE)", "launch_kv_write")

    def g_paged_attention(self, op, snap=False):
        kc, vc, bt = self._kv(op, "read")
        hd = self.dims["head_dim"]
        scale = _attr_float(op, "scale", hd ** -0.5)
        r = op.results[0]
        self.emit(f"{self.name(r)} = K.launch_attention({self.x(op.operands[0])}, S[{kc!r}], S[{vc!r}], P, {scale!r}, "
                  f"head_dim={hd}, kv_heads={self.dims['kv_heads']}, block_table={bt}, page=PAGE, "
                  f"out={self.new(r)})", "launch_attention")


#: The sampler method's parameters, in the order of `@sample_logits`'s arguments.
SAMPLER_PARAMS = ("logits", "key", "step", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                  "presence_penalty", "frequency_penalty", "prompt_counts", "output_counts", "mask")


def is_sampler(fn: func.FuncOp) -> bool:
    """Whether `fn` is the program's sampler (one group holding one `blueprint.sample`)."""
    nodes = [op for op in fn.walk() if isinstance(op, B.NodeOp)]
    return len(nodes) == 1 and isinstance(nodes[0], B.SampleOp)


def sampler_code(fn: func.FuncOp, tables: Tables) -> list[str]:
    """The lines of the method `_sample_logits` (indented for the class body): the group's
    `blueprint.sample` on the device (`launch_sample`), or on the host (the numpy sampler that
    model.py carries, `tables.host_sampler`), by the group's placement."""
    groups = [op for op in fn.body.block.ops if isinstance(op, B.GroupOp)]
    if len(groups) != 1:
        raise CodegenError(f"@{sanitize_label(fn.sym_name.data)}: the sampler must be one kernel group (run blueprint-fuse)")
    (g,) = groups
    (node,) = [op for op in g.body.block.ops if isinstance(op, B.SampleOp)]
    if [v for v in node.operands] != list(fn.body.block.args) or len(node.operands) != len(SAMPLER_PARAMS):
        raise CodegenError("the sampler's node must read the function's arguments, counts and mask included, in order")
    rows, vocab = int(fn.attributes["blueprint.rows"].value.data), B.function_dims(fn)["vocab"]
    filters = ", ".join(f"{k}={k}" for k in SAMPLER_PARAMS[3:10])
    lines = [f"def _sample_logits(self, {', '.join(SAMPLER_PARAMS)}):",
             f'    """@sample_logits: one id per row of the logits [{rows}, {vocab}] (int32 [{rows}, 1], on the device)."""',
             f"    # {sanitize_label(g.rule.data)}: {sanitize_label(node.node.data) if node.node else 'sample'}",
             f"    logits = logits.reshape({rows}, {vocab})"]
    if g.placement.value == "device":
        tables.launchers.add("launch_sample")
        lines += ["    K = self.kernels", f"    out, work = self._sampler_buffers({rows}, {vocab})",
                  f"    return K.launch_sample(logits, key, int(step), {filters}, prompt_counts=prompt_counts, "
                  "output_counts=output_counts, mask=mask, out=out, work=work)"]
    else:
        tables.host_sampler = True
        lines += ["    host = lambda t: None if t is None else t.cpu().numpy() if torch.is_tensor(t) else np.asarray(t)",
                  f"    ids = sample(host(logits).astype(np.float32), host(key).reshape(2), int(step), "
                  + ", ".join(f"host({k})" for k in SAMPLER_PARAMS[3:10])
                  + ", prompt_counts=host(prompt_counts), output_counts=host(output_counts), mask=host(mask))",
                  f"    return torch.from_numpy(ids.reshape({rows}, 1)).to(self.device)"]
    return lines


def print_groups(p: _Printer, fn: func.FuncOp) -> dict[str, str]:
    """Print each kernel group of `fn` (its one argument the ids) with `p`; its results by kind,
    {"next": ..., "logits": ...}, as the printer names them."""
    (arg,) = fn.body.block.args
    p.names[arg] = "ids"
    ret = None
    for op in fn.body.block.ops:
        if isinstance(op, B.GroupOp):
            p.group(op)
        elif isinstance(op, func.ReturnOp):
            ret = op
        else:
            raise CodegenError(f"@{sanitize_label(fn.sym_name.data)}: '{sanitize_label(op.name)}' outside a kernel "
                               "group (run blueprint-fuse)")
    assert ret is not None
    return {("next" if str(v.type.element) == "i32" else "logits"): p.x(v) for v in ret.operands}


def entry_code(fn: func.FuncOp, tables: Tables) -> list[str]:
    """The lines of the method `_<entry>` (indented for the class body)."""
    entry = fn.sym_name.data
    if is_sampler(fn):
        return sampler_code(fn, tables)
    if entry not in ("prefill", "decode"):
        raise CodegenError(f"entry '{sanitize_label(entry)}': the CUDA target runs prefill and decode")
    if "blueprint.dims" not in fn.attributes:
        raise CodegenError(f"@{entry} is not at the blueprint level (lower it with convert-op-to-blueprint)")
    p = _Printer(fn, tables)
    outs = print_groups(p, fn)
    if set(outs) != {"next", "logits"}:
        raise CodegenError(f"@{entry} must return the next ids and the logits")
    body = ["K, W, S = self.kernels, self.w, self.state", *p.lines, f"return {{'next': {outs['next']}, 'logits': {outs['logits']}}}"]
    doc = f'"""@{entry}: {sum(isinstance(o, B.GroupOp) for o in fn.body.block.ops)} kernel groups."""'
    return [f"def _{entry}(self, ids, n, P, R):", "    " + doc] + ["    " + ln for ln in body]
