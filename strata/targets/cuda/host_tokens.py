"""The launch sequence of the batched entries: @prefill's kernel groups over the tokens of many
sequences at once.

Every group of a layer but attention works row by row (embedding, norms, projections, experts,
RoPE at each token's own position), so the batched entries run @prefill's groups on the call's
tokens as they are; the KV write puts each token's K/V in the cache cell its call gives
(`launch_kv_write_cells`), attention reads each token's row through its table of cells
(`launch_token_attention`), and the final norm takes the rows the entry returns (`sel`).

`tokens_code(fn, tables)` prints the method `_tokens(self, ids, n, R, A, S)` of the generated
`Model` from the blueprint function @prefill: `A` the call (cells, table, page, positions, runs,
the returned rows `sel`, `hidden_only`), `S` the KV buffers the call reads and writes (the cache
pool, or a scratch cache for the call's own tokens). It returns `hidden` (the final norm's rows)
and, unless `A.hidden_only`, `logits` and `next`.
"""

from __future__ import annotations

from xdsl.dialects import func

from strata.targets.codegen import CodegenError
from strata.targets.cuda.host import Tables, _attr_float, _Printer, print_groups


class _TokensPrinter(_Printer):
    def _norm(self, op, snap=False):
        w = self.t.weight("raw", (op.param.data,))
        r = op.results[0]
        src = self.x(op.operands[0])
        if op.name == "blueprint.final_norm":  # only the rows the entry returns
            self.emit(f"{src} = {src}[A.sel]")
            self.emit("n = A.sel.numel()")
        self.emit(f"{self.name(r)} = K.launch_rms_norm({src}, {w}, {_attr_float(op, 'eps', 1e-6)!r}, "
                  f"out={self.new(r)})", "launch_rms_norm")
        if op.name == "blueprint.final_norm":
            self.hidden = self.name(r)
            self.emit(f"if A.hidden_only: return {{'hidden': {self.hidden}}}")

    g_rms_norm = g_final_norm = _norm

    def g_kv_write(self, op, snap=False):
        kc, vc, _ = self._kv(op, "write")
        self.emit(f"K.launch_kv_write_cells({self.x(op.operands[0])}, {self.x(op.operands[1])}, S[{kc!r}], S[{vc!r}], "
                  "A.cells)", "launch_kv_write_cells")

    def g_paged_attention(self, op, snap=False):
        kc, vc, _ = self._kv(op, "read")
        hd = self.dims["head_dim"]
        scale = _attr_float(op, "scale", hd ** -0.5)
        r = op.results[0]
        zeros = self.new(r).replace("self._new(", "self._zeros(", 1)  # a token in no run keeps a row of zeros
        self.emit(f"{self.name(r)} = K.launch_token_attention({self.x(op.operands[0])}, S[{kc!r}], S[{vc!r}], A, "
                  f"{scale!r}, head_dim={hd}, kv_heads={self.dims['kv_heads']}, out={zeros})",
                  "launch_token_attention")


def tokens_code(fn: func.FuncOp, tables: Tables) -> list[str]:
    """The lines of the method `_tokens` (indented for the class body), from @prefill."""
    if fn.sym_name.data != "prefill" or fn.attributes["blueprint.mode"].data != "prefill":
        raise CodegenError("the batched entries run the blueprint function @prefill")
    p = _TokensPrinter(fn, tables)
    p.hidden = None
    tables.launchers.add("token_runs")  # the runtime splits a call's tokens into runs with it
    outs = print_groups(p, fn)
    if set(outs) != {"next", "logits"} or p.hidden is None:
        raise CodegenError("@prefill must end in the final norm, the head and the next ids")
    body = ["K, W = self.kernels, self.w", *p.lines,
            f"return {{'next': {outs['next']}, 'logits': {outs['logits']}, 'hidden': {p.hidden}}}"]
    doc = ('"""The batched entries\' tokens through @prefill\'s groups, attention through each row\'s '
           'table of cells (A), K/V in S."""')
    return ["def _tokens(self, ids, n, R, A, S):", "    " + doc] + ["    " + ln for ln in body]
