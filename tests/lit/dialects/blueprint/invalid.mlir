// RUN: strata-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// One case for every verifier and parser message of the `blueprint` dialect. With
// --verify-diagnostics, strata-opt prints the first line of each diagnostic (the
// message), then the chunk in generic form with the failing op underlined; each CHECK
// anchors the message at the start of a line, so a chunk that verified by mistake
// (printed as IR) fails the test. --parsing-diagnostics does the same for parse errors
// and for the attributes' checks, which run while parsing.

// blueprint.format: the element kind comes from the dtype table (or fp8, int4, ...).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.format: unknown element kind 'fp7'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<output = #blueprint.format<fp7>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.format: a GGUF block type is its own block.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.format: 'q4_K' is a GGUF block format (its block and scales are the format's): no block or asymmetric
func.func @f(%a: !blueprint.edge<"n", "hidden", f32>) {
  %x = blueprint.linear %a weight "w" role "o" {precision = #blueprint.precision<weight = #blueprint.format<q4_K, block = [32]>>} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "hidden", f32>
  func.return
}

// -----

// blueprint.precision: only a weight is in a GGUF block type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.precision: 'q8_0' is a weight's GGUF block format, not a format of the output
func.func @f(%a: !blueprint.edge<"n", "hidden", f32>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<output = #blueprint.format<q8_0>>} : !blueprint.edge<"n", "hidden", f32> -> !blueprint.edge<"n", "hidden", f32>
  func.return
}

// -----

// blueprint.format: a block is one or two positive sizes.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.format: a block is one or two positive sizes, got [128, 0]
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<output = #blueprint.format<fp8, block = [128, 0]>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.format: only integer formats are asymmetric.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.format: only an integer format is asymmetric, not 'bf16'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<output = #blueprint.format<bf16, asymmetric>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.precision: each field once.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.precision: 'output' given twice
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<output = #blueprint.format<bf16>, output = #blueprint.format<f32>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.precision: a field is a format.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.precision: 'output' must be a #blueprint.format, got #blueprint.placement<host>
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<output = #blueprint.placement<host>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.placement: host or device.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.placement: unknown value 'cloud' (known: host, device)
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {placement = #blueprint.placement<cloud>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.effect: update, snapshot, read or write.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.effect: unknown effect 'erase' (known: update, snapshot, read, write)
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  blueprint.kv_write %a, %a {effects = [#blueprint.effect<k:erase>]} : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.step: a verb of kbp-graph/v1's steps.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.step: unknown step 'dance' (known: act, weight, mma, accumulate, scale, compute, state, gather, scatter, move, combine, compare, score, scores, softmax, cache, wire)
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {steps = [#blueprint.step<dance, "bf16">]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.edge: the rows are a dim expression ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.edge: bad rows 'n*': expected more in 'n*', got end
func.func @f(%x: !blueprint.edge<"n*", "hidden", bf16>) {
  func.return
}

// -----

// ... and so is the dim ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.edge: bad dim 'hidden+$': unexpected character '$' in 'hidden+$'
func.func @f(%x: !blueprint.edge<"n", "hidden+$", bf16>) {
  func.return
}

// -----

// ... and the element type is in the dtype table.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.edge: element type index is not in the dtype table
func.func @f(%x: !blueprint.edge<"n", "hidden", index>) {
  func.return
}

// -----

// A pure node touches no state.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.rms_norm: state effect 'h:update' is not one this node has (it touches no state)
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.rms_norm %a weight "w" {effects = [#blueprint.effect<h:update>]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// A state node carries only its own effects.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.kv_write: state effect 'k:read' is not one this node has (it may write)
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  blueprint.kv_write %a, %a {effects = [#blueprint.effect<k:read>]} : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// A weight format needs a weight.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.silu_mul: a weight format on a node that reads no weight
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.silu_mul %a {precision = #blueprint.precision<weight = #blueprint.format<fp8, block = [128, 128]>>} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// A multi-weight node names all its weights.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.swiglu_ffn: takes 3 weights, got 2
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.swiglu_ffn %a weights ["gate", "up"] : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// Row-wise nodes keep the rows ...
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.linear: result rows 'n*top_k' must be the source's 'n'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.linear %a weight "w" role "q" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n*top_k", "q_dim", bf16>
  func.return
}

// -----

// ... and element-wise ones the dim too.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.residual_add: result dim 'hidden*2' must be the source's 'hidden'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.residual_add %a, %a : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden*2", bf16>
  func.return
}

// -----

// blueprint.embed gathers at integer token ids.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.embed: token ids must be an integer edge
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.embed %a weight "embed" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.argmax gives one integer per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.argmax: the result must be one integer per row
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.argmax %a : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "1", f32>
  func.return
}

// -----

// blueprint.sample: the key is one row of two i64.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.sample: the key must be one row of two i64
func.func @f(%l: !blueprint.edge<"n", "vocab", f32>, %key: !blueprint.edge<"1", "2", i32>, %step: !blueprint.edge<"1", "1", i32>, %t: !blueprint.edge<"n", "1", f32>, %k: !blueprint.edge<"n", "1", i32>) {
  %ids = blueprint.sample %l, %key, %step, %t, %k, %t, %t, %t, %t, %t : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i32>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32> -> !blueprint.edge<"n", "1", i32>
  func.return
}

// -----

// blueprint.sample: a parameter is one value per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.sample: temperature must be one value per row (rows 'n' or '1')
func.func @f(%l: !blueprint.edge<"n", "vocab", f32>, %key: !blueprint.edge<"1", "2", i64>, %step: !blueprint.edge<"1", "1", i32>, %t: !blueprint.edge<"n", "2", f32>, %k: !blueprint.edge<"n", "1", i32>) {
  %ids = blueprint.sample %l, %key, %step, %t, %k, %t, %t, %t, %t, %t : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "2", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"n", "2", f32>, !blueprint.edge<"n", "2", f32>, !blueprint.edge<"n", "2", f32>, !blueprint.edge<"n", "2", f32>, !blueprint.edge<"n", "2", f32> -> !blueprint.edge<"n", "1", i32>
  func.return
}

// -----

// blueprint.sample: one i32 per row.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.sample: the result must be one i32 per row
func.func @f(%l: !blueprint.edge<"n", "vocab", f32>, %key: !blueprint.edge<"1", "2", i64>, %step: !blueprint.edge<"1", "1", i32>, %t: !blueprint.edge<"n", "1", f32>, %k: !blueprint.edge<"n", "1", i32>) {
  %ids = blueprint.sample %l, %key, %step, %t, %k, %t, %t, %t, %t, %t : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32> -> !blueprint.edge<"n", "1", f32>
  func.return
}

// -----

// blueprint.linear: the role is a name.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.linear: role must be a name, got 'q-proj'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.linear %a weight "w" role "q-proj" : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.gdn_recurrence: decay and beta have one value per value head.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.gdn_recurrence: decay dim 'hidden' and beta dim 'lin_v_heads' differ
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>, %b: !blueprint.edge<"n", "lin_v_heads", f32>) {
  %x = blueprint.gdn_recurrence %a, %b, %a : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "lin_v_heads", f32>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.top_k: expert ids are integers.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.top_k: expert ids must be an integer edge
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %w, %ids = blueprint.top_k %a : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "top_k", f32>, !blueprint.edge<"n", "top_k", f32>
  func.return
}

// -----

// Routed expert nodes take integer expert ids.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.expert_gate_up: expert ids must be an integer edge
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %x = blueprint.expert_gate_up %a, %a weight "experts" : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n*top_k", "inter*2", bf16>
  func.return
}

// -----

// blueprint.kv_write: k and v have the same rows.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.kv_write: k and v rows differ
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>, %b: !blueprint.edge<"n*2", "hidden", bf16>) {
  blueprint.kv_write %a, %b : !blueprint.edge<"n", "hidden", bf16>, !blueprint.edge<"n*2", "hidden", bf16>
  func.return
}

// -----

// blueprint.group: the rule is a name.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.group: rule must be a name, got 'w8a16 m32'
func.func @f() {
  blueprint.group "w8a16 m32" on device {
    blueprint.yield
  }
  func.return
}

// -----

// blueprint.group: the body ends with blueprint.yield (xDSL's terminator check says so first).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}Operation blueprint.silu_mul terminates block in single-block region but is not a terminator
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  blueprint.group "w8a16_m32" on device {
    %x = blueprint.silu_mul %a : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  }
  func.return
}

// -----

// blueprint.group: it yields its results' types.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.group: the yielded types must be the group's result types
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %y = blueprint.group "w8a16_m32" on device {
    %x = blueprint.silu_mul %a : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
    blueprint.yield %x : !blueprint.edge<"n", "hidden", bf16>
  } : !blueprint.edge<"n", "hidden", f32>
  func.return
}

// -----

// blueprint.group: what it yields is defined inside.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.group: a yielded value is not defined inside the group 'w8a16_m32'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  %y = blueprint.group "w8a16_m32" on device {
    blueprint.yield %a : !blueprint.edge<"n", "hidden", bf16>
  } : !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.group: groups do not nest.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.group: groups do not nest ('outer' holds another)
func.func @f() {
  blueprint.group "outer" on device {
    blueprint.group "inner" on device {
      blueprint.yield
    }
    blueprint.yield
  }
  func.return
}

// -----

// blueprint.group: it runs on host or device.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}Expected one of 'device', 'host' (host or device)
func.func @f() {
  blueprint.group "w8a16_m32" on cloud {
    blueprint.yield
  }
  func.return
}

// -----

// blueprint.yield: only inside a group.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}'blueprint.yield' expects parent op 'blueprint.group'
func.func @f(%a: !blueprint.edge<"n", "hidden", bf16>) {
  blueprint.yield %a : !blueprint.edge<"n", "hidden", bf16>
}

// -----

// blueprint.dims: each symbol once.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.dims: 'hidden' is given twice
func.func @f() attributes {blueprint.dims = #blueprint.dims<hidden = 32, hidden = 64>} {
  func.return
}

// -----

// blueprint.dims: a symbol is a name with a size.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}Expected '='
func.func @f() attributes {blueprint.dims = #blueprint.dims<hidden>} {
  func.return
}

// -----

// blueprint.dims: sizes are not negative.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.dims: 'hidden' must be a size >= 0, got -1
func.func @f() attributes {blueprint.dims = #blueprint.dims<hidden = -1>} {
  func.return
}

// -----

// blueprint.weights: a conversion of the op level's vocabulary.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.weights: 'w': unknown conversion 'transpose' (known: plus_one, neg_exp, squeeze, ungroup_rows)
func.func @f() attributes {blueprint.weights = #blueprint.weights<"w" = transpose>} {
  func.return
}

// -----

// blueprint.weights: with its number of arguments.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.weights: 'w': conversion 'plus_one' takes 0 arguments, got 2
func.func @f() attributes {blueprint.weights = #blueprint.weights<"w" = plus_one [1, 2]>} {
  func.return
}

// -----

// blueprint.weights: each weight once.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.weights: 'w' is given twice
func.func @f() attributes {blueprint.weights = #blueprint.weights<"w" = plus_one, "w" = "v">} {
  func.return
}

// -----

// blueprint.weights: a split is [axis, pieces, part sizes...].
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.weights: 'w': split takes [axis, pieces, part sizes...], got [0]
func.func @f() attributes {blueprint.weights = #blueprint.weights<"w" = split [0]>} {
  func.return
}

// -----

// blueprint.all_reduce: a collective names its group and ranks.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.all_reduce: needs 'group' and 'ranks'
func.func @f(%x: !blueprint.edge<"n", "hidden", bf16>) {
  %s = blueprint.all_reduce %x : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}

// -----

// blueprint.all_reduce: the sum keeps the rows and the dim.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.all_reduce: result dim 'vocab' must be the source's 'hidden'
func.func @f(%x: !blueprint.edge<"n", "hidden", bf16>) {
  %s = blueprint.all_reduce %x {group = "tp", ranks = 2 : i64} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "vocab", bf16>
  func.return
}

// -----

// blueprint.all_gather: the pieces join into ranks times the piece.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.all_gather: the source dim 'vocab' must be the result's 'vocab' / ranks
func.func @f(%x: !blueprint.edge<"n", "vocab", bf16>) {
  %s = blueprint.all_gather %x {group = "tp", ranks = 2 : i64} : !blueprint.edge<"n", "vocab", bf16> -> !blueprint.edge<"n", "vocab", bf16>
  func.return
}

// -----

// A rank-dependent node's group is one of the known groups.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}blueprint.embed: 'group' must be one of tp, got "dp"
func.func @f(%tok: !blueprint.edge<"n", "1", i32>) {
  %h = blueprint.embed %tok weight "token_embd.weight" {group = "dp", ranks = 2 : i64} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}
