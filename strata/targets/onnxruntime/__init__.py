"""onnxruntime running exported ONNX entries (strata run --via onnxruntime)."""
