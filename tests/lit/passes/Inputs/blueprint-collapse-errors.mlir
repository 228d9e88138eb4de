// blueprint-collapse's errors: a node outside any layer between two layers.
func.func @decode(%tok: !blueprint.edge<"n", "1", i32>) attributes {blueprint.mode = "decode", blueprint.rows = 1 : i64, blueprint.layers = ["attention", "attention"]} {
  %h = blueprint.embed %tok weight "embed" {node = "embed.embed", edges = ["embed.h"]} : !blueprint.edge<"n", "1", i32> -> !blueprint.edge<"n", "hidden", bf16>
  %a = blueprint.rms_norm %h weight "n0" {node = "l0.attn.input_norm", edges = ["l0.attn.xn"]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %b = blueprint.rms_norm %a weight "m" {node = "mid.norm", edges = ["mid.xn"]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  %c = blueprint.rms_norm %b weight "n1" {node = "l1.attn.input_norm", edges = ["l1.attn.xn"]} : !blueprint.edge<"n", "hidden", bf16> -> !blueprint.edge<"n", "hidden", bf16>
  func.return
}
