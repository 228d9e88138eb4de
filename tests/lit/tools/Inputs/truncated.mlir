func.func @f(%x: tensor<5x16xf32>) -> tensor<5x16xf32> {
  %y = op.rms_norm %x {eps = 1.0e-06 : f64} : tensor<5x16xf32> ->
  func.return %y : tensor<5x16xf32>
}
