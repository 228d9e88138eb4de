"""ONNX Runtime's own int4 quantizer and MatMulNBits, for tests that judge Strata's int4 against them."""

from __future__ import annotations

import numpy as np


def ort_quantize_int4(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MLAS's block quantizer on W [N, K] (ONNX's weight is W^T [K, N]), as
    onnxruntime.quantization's DefaultWeightOnlyQuantizer calls it: (B, scales [N, nb], zero points)."""
    from onnxruntime.capi import _pybind_state as ort_capi

    b = np.ascontiguousarray(w.T.astype(np.float32))
    k, n = b.shape
    nb = -(-k // block)
    if nb * block > k:
        b = np.pad(b, ((0, nb * block - k), (0, 0)))
    packed = np.zeros((n, nb, block // 2), np.uint8)
    zp = np.zeros((n, (nb + 1) // 2), np.uint8)
    scales = np.zeros((n, nb), np.float32)
    ort_capi.quantize_matmul_4bits(packed, b, scales, zp, block, n, k, False)
    return packed, scales, zp


def ort_dequantize_int4(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, block: int, k: int) -> np.ndarray:
    """The f32 weights W [N, K] ONNX Runtime's MatMulNBits computes with: the op on the identity is W^T."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n = b.shape[0]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zero_points"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block)
    inits = [numpy_helper.from_array(np.asarray(b, np.uint8), "B"),
             numpy_helper.from_array(np.asarray(scales, np.float32).reshape(-1), "scales"),
             numpy_helper.from_array(np.asarray(zero_points, np.uint8).reshape(-1), "zero_points")]
    graph = helper.make_graph([node], "dequantize", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [k, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [k, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": np.eye(k, dtype=np.float32)})[0].T
