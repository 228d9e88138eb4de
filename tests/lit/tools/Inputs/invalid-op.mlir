func.func @f(%x: tensor<5x16xf32>, %g: tensor<3xf32>) -> tensor<5x16xf32> {
  %y = op.mul %x, %g : tensor<5x16xf32>, tensor<3xf32> -> tensor<5x16xf32>
  func.return %y : tensor<5x16xf32>
}
