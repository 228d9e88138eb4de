func.func @f(%x: tensor<5x16xf32>) -> tensor<5x16xf32> {
  %y = op.frobnicate %x : tensor<5x16xf32> -> tensor<5x16xf32>
  func.return %y : tensor<5x16xf32>
}
