// The CUDA target's batched entries: record-entry-calls puts step_paged's host records on the
// module (its graph is not lowered), and -t cuda prints them as the Model's ARGS / LAYOUTS with
// `_tokens`, @prefill's groups over many rows' tokens (the cell write, attention through tables).
// RUN: strata-opt %S/../../passes/Inputs/qwen3_2l.mlir -p 'record-entry-calls{entry=step_paged tokens=0 ctx=64 kv_pad=1 batch=2 page_size=16 rows=2 pages=4},convert-module-to-op{entry=prefill,decode tokens=0 start=-1 ctx=64 kv_pad=1},convert-op-to-blueprint{mode=auto},blueprint-assign-precision{recipe=bf16},blueprint-place-state{kv=contiguous embed=device sample=device},blueprint-fuse' -t cuda | filecheck %s

// prefill is not an entry of a plan: one line, non-zero exit.
// RUN: not strata-opt %S/../../passes/Inputs/qwen3_2l.mlir -p 'record-entry-calls{entry=prefill ctx=64}' 2>&1 | filecheck %s --check-prefix=ERR
// ERR: record-entry-calls: 'prefill' is not an entry that runs by a plan

// CHECK: def kv_write_cells_kernel(
// CHECK: def token_attention_kernel(
// CHECK: def token_runs(
// CHECK: def entry_call(layout: dict, spec, given) -> dict:
// CHECK: class EntriesRuntime(Runtime):
// CHECK: class Model(EntriesRuntime):
// CHECK: ARGS = {
// CHECK-NEXT: 'step_paged': (('tokens', (-1,), 'int32'), ('positions', (-1,), 'int32'), ('rows', (-1,), 'int32'), ('slots', (-1,), 'int32'), ('last', (2,), 'int32'), ('step_tokens', (2, 1), 'int32'), ('step_positions', (2,), 'int32'), ('table', (2, 4), 'int32')),
// CHECK: LAYOUTS = {
// CHECK-NEXT: 'step_paged': {'entry': 'step_paged', 'kv': 'paged', 'streams': 'one', 'state': 'slots', 'Batch': 2, 'MaxSeq': 64, 'PageSize': 16,
// CHECK: def _tokens(self, ids, n, R, A, S):
// CHECK: K.launch_kv_write_cells(
// CHECK: K.launch_token_attention(
// CHECK: if A.hidden_only: return {'hidden':
