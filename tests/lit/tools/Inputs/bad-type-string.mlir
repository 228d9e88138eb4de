module.model @m attributes {arch = "LlamaForCausalLM", root = "Model", generics = {H = 16 : i64}} {
  module.block @Model ["H: Dim", "T: Float = bf16"] attributes {path = "llama"} {
    module.param @weight : "Tensor[H, Vocab; T]"
  }
}
