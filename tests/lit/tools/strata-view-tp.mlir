// `strata view --level blueprint --tp 2` of strata-view.mlir's module level (TinyLlama: hidden 16,
// vocabulary 32, one layer): one rank's blueprint of two, its caption summing the collectives,
// each collective a group of its own drawn as a hexagon with the bytes one rank sends per row
// (bf16 on a ring of 2: an all-reduce of a hidden row sends 2 (2-1)/2 * 16 * 2 = 32 B, the
// gather of the logits the other rank's 16 of 32 * 2 = 32 B), the embed reading its rank's
// rows, the logits vocab / ranks wide before their gather.
// RUN: strata view %S/strata-view.mlir --level blueprint --tp 2 --recipe bf16 --format dot | filecheck %s
// RUN: strata view %S/strata-view.mlir --level blueprint --recipe bf16 --format dot | filecheck %s --check-prefix=ONE

// CHECK:      digraph "decode" {
// CHECK:        label="tensor parallel: 2 ranks (group tp), the same groups on each rank's piece of the weights; 4 collectives (1 all_gather, 3 all_reduce); each rank sends 128 B per call (128 B per row)";
// CHECK:        subgraph "cluster_g0" {
// CHECK-NEXT:     label="#0 embed_row_copy";
// CHECK-NEXT:     "n0" [label="embed.embed\nembed\no bf16\nrank piece of 2", shape=box];
// CHECK:        subgraph "cluster_g1" {
// CHECK-NEXT:     label="#1 all_reduce_bf16";
// CHECK-NEXT:     "n1" [label="embed.all_reduce\nall_reduce\na bf16 o bf16\ntp ranks=2 sends 32 B/row", shape=hexagon];
// CHECK-NEXT:   }
// CHECK:          "n10" [label="l0.attn.all_reduce\nall_reduce\na bf16 o bf16\ntp ranks=2 sends 32 B/row", shape=hexagon];
// CHECK:          "n16" [label="l0.ffn.all_reduce\nall_reduce\na bf16 o bf16\ntp ranks=2 sends 32 B/row", shape=hexagon];
// CHECK:        subgraph "cluster_g18" {
// CHECK-NEXT:     label="#18 all_gather_bf16";
// CHECK-NEXT:     "n20" [label="head.all_gather\nall_gather\na bf16 o bf16\ntp ranks=2 sends 32 B/row", shape=hexagon];
// CHECK:        "n0" -> "n1" [label="bf16 n x hidden"];
// CHECK:        "n19" -> "n20" [label="bf16 n x vocab / ranks"];
// CHECK-NEXT:   "n20" -> "n21" [label="bf16 n x vocab"];
// CHECK-NEXT: }

// One rank: no caption, no collectives, the embed reads the whole table.
// ONE:      digraph "decode" {
// ONE-NOT:  tensor parallel
// ONE-NOT:  hexagon
// ONE:      "n0" [label="embed.embed\nembed\no bf16", shape=box];
// ONE-NOT:  hexagon
// ONE:      }
