// RUN: strata-opt %s --split-input-file --verify-diagnostics --parsing-diagnostics | filecheck %s

// Verifier errors of the `module` dialect: type strings in the module level's notation
// (unknown names, bad syntax), subs that name no block, members defined twice,
// unbound generics of the root block, and ops in the wrong place. Each CHECK
// anchors the diagnostic's first line (its message) at the start of a line, so a
// chunk that verified by mistake fails the test; parse errors carry the file, the
// line and the column.

// Unknown generic name in a param's type: Model declares H and T, not Vocab.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @weight: unknown name 'Vocab' in 'Tensor[Vocab, H; T]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[Vocab, H; T]"
  }
}

// -----

// Unknown element type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @weight: unknown name 'f33' in 'Tensor[H, H; f33]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H, H; f33]"
  }
}

// -----

// Bad syntax in a type string: the element type follows a `;`.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @weight: unexpected ']' in dim expression of 'Tensor[H, H, T]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H, H, T]"
  }
}

// -----

// Bad syntax: a character that is not part of the notation.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @weight: unexpected character '$' in 'Tensor[H $ 2; T]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H $ 2; T]"
  }
}

// -----

// Bad syntax: unbalanced parentheses in a dim expression.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @weight: expected ) in 'Tensor[(H + 1; T]', got ;
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[(H + 1; T]"
  }
}

// -----

// module.state: unknown generic name.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.state @cache: unknown name 'MaxSeq' in 'Tensor[H, MaxSeq; T]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.state @cache : "Tensor[H, MaxSeq; T]"
  }
}

// -----

// module.state: trailing text after the type.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.state @cache: unexpected 'extra' in 'Tensor[H; T] extra'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.state @cache : "Tensor[H; T] extra"
  }
}

// -----

// module.sub referring to a block the model does not define.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @mlp: no block named 'SwiGlu' in the model
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.sub @mlp : "SwiGlu<H, T>"
  }
}

// -----

// module.sub: unknown generic name in the arguments.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @norm: unknown name 'Hidden' in 'RmsNorm<H, T, Hidden>'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.sub @norm : "RmsNorm<H, T, Hidden>"
  }
  module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm"} {
    module.param @weight : "Tensor[H; T]"
  }
}

// -----

// module.sub: unknown generic name in the count of an array.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @layers: unknown name 'Layers' in '[RmsNorm<H, T>; Layers]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.sub @layers : "[RmsNorm<H, T>; Layers]"
  }
  module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm"} {
    module.param @weight : "Tensor[H; T]"
  }
}

// -----

// module.sub: an array is `[Kind<args>; Count]`.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @layers: expected ; in '[RmsNorm<H, T>, 2]', got ,
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.sub @layers : "[RmsNorm<H, T>, 2]"
  }
  module.block @RmsNorm ["H: Dim", "T: Float = bf16"] attributes {path = "std.nn.norm"} {
    module.param @weight : "Tensor[H; T]"
  }
}

// -----

// module.fn: a name that is neither a generic of the block nor of the function.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.fn @forward: unknown name 'S' in '(x: Tensor[S, H; T]) -> Tensor[S, H; T]'
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.fn @forward : "(x: Tensor[S, H; T]) -> Tensor[S, H; T]" {pub}
  }
}

// -----

// module.fn: bad syntax, the `->` is missing.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.fn @forward: expected -> in '<S: Dim>(x: Tensor[S, H; T]) Tensor[S, H; T]', got Tensor
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.fn @forward : "<S: Dim>(x: Tensor[S, H; T]) Tensor[S, H; T]" {pub}
  }
}

// -----

// module.fn: a generic kind is Dim, Float or Shape.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.fn @forward: generic 'S' has unknown kind 'Size' (Dim, Float or Shape)
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.fn @forward : "<S: Size>(x: Tensor[S, H; T]) -> Tensor[S, H; T]" {pub}
  }
}

// -----

// module.block: a member defined twice.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.block @Model: member 'weight' defined twice
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
    module.param @weight : "Tensor[H, H; T]"
  }
}

// -----

// module.block: members of different kinds share one namespace.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.block @Model: member 'weight' defined twice
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
    module.fn @weight : "(x: Tensor[H; T]) -> Tensor[H; T]"
  }
}

// -----

// module.block: only members inside a block.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.block @Model: unexpected op arith.constant
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    "arith.constant"() {value = 1 : i64} : () -> i64
  }
}

// -----

// module.block: a function is a module.fn, not a func.func.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.block @Model: unexpected op func.func
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    func.func @f() {
      func.return
    }
  }
}

// -----

// module.model: a generic of the root block without a default must be bound (H).
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.model @m: generic 'H' of the root block is not bound
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
  }
}

// -----

// module.model: the root block must be defined.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.model @m: root block 'Main' is not defined
module.model @m attributes {arch = "LlamaForCausalLM", root = "Main", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
  }
}

// -----

// module.model: two blocks with one name.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}Redefinition of symbol "Model"
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
  }
  module.block @Model ["H: Dim"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; f32]"
  }
}

// -----

// A member directly in the model, outside any block.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @stray must be inside a module.block
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
  }
  module.param @stray : "Tensor[4; f32]"
}

// -----

// A member outside any model.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.param @stray must be inside a module.block
module.param @stray : "Tensor[4; f32]"

// -----

// `optional` is a unit attribute.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}3 : i64 should be of base attribute unit
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]" {optional = 3 : i64}
  }
}

// -----

// module.model: `root` is required.
// CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}attribute 'root' expected in operation 'module.model'
module.model @m attributes {arch = "LlamaForCausalLM", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; T]"
  }
}

// -----

// module.block: a generic declared twice. (The three block-generics cases match
// the message whichever op reports it, the block or its first member.)
// CHECK: {{^.*}}a generic is declared twice in ['H', 'H']
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "H: Dim"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; f32]"
  }
}

// -----

// module.block: unknown generic kind.
// CHECK: {{^.*}}generic 'H' has unknown kind 'Size' (Dim, Float or Shape)
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Size"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; f32]"
  }
}

// -----

// module.block: a generic is `Name: Kind` or `Name: Kind = default`.
// CHECK: {{^.*}}expected : in 'H Dim', got Dim
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H Dim"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H; f32]"
  }
}

// -----

// Malformed: member names are symbols (@weight), not strings.
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    // CHECK: invalid.mlir:[[# @LINE + 4]]:18
    // CHECK-NEXT: {{^}}    module.param "weight" : "Tensor[H; T]"
    // CHECK-NEXT: {{^}}                 ^^^^^^^^
    // CHECK-NEXT: {{^}}                 expect symbol name
    module.param "weight" : "Tensor[H; T]"
  }
}

// -----

// Malformed: a member's type is a string.
module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    // CHECK: invalid.mlir:[[# @LINE + 4]]:28
    // CHECK-NEXT: {{^}}    module.param @weight : Tensor[H; T]
    // CHECK-NEXT: {{^}}                           ^^^^^^
    // CHECK-NEXT: {{^}}                           attribute expected
    module.param @weight : Tensor[H; T]
  }
}

// -----

// An array of several kinds needs a pattern...
module.model @m attributes {arch = "Qwen3_5ForCausalLM", root = "Model", generics = {H = 16 : i64, Layers = 2 : i64}} {
  module.block @Model ["H: Dim", "Layers: Dim"] attributes {path = "std.model.causal_lm"} {
    // CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @layers: an array of 2 kinds needs a `pattern`
    module.sub @layers : "[A<H> | B<H>; Layers]"
  }
  module.block @A ["H: Dim"] attributes {path = "std.layer.decoder"} {
  }
  module.block @B ["H: Dim"] attributes {path = "std.layer.decoder"} {
  }
}

// -----

// ... whose indices pick one of the kinds.
module.model @m attributes {arch = "Qwen3_5ForCausalLM", root = "Model", generics = {H = 16 : i64, Layers = 2 : i64}} {
  module.block @Model ["H: Dim", "Layers: Dim"] attributes {path = "std.model.causal_lm"} {
    // CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @layers: pattern index 2 is not one of the 2 kinds of the array
    module.sub @layers : "[A<H> | B<H>; Layers]" {pattern = array<i64: 0, 2>}
  }
  module.block @A ["H: Dim"] attributes {path = "std.layer.decoder"} {
  }
  module.block @B ["H: Dim"] attributes {path = "std.layer.decoder"} {
  }
}

// -----

// Alternatives are for arrays only.
module.model @m attributes {arch = "Qwen3_5ForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim"] attributes {path = "std.model.causal_lm"} {
    // CHECK: {{^(.*:[0-9]+:[0-9]+: | +)?}}module.sub @x: unexpected '|' in 'A<H> | B<H>'
    module.sub @x : "A<H> | B<H>"
  }
  module.block @A ["H: Dim"] attributes {path = "std.layer.decoder"} {
  }
  module.block @B ["H: Dim"] attributes {path = "std.layer.decoder"} {
  }
}
