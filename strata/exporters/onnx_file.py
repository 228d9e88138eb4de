"""An exported ONNX model as files: inline, or with its weights in an external data file.

    onnx_bytes, data = serialize_onnx(model, "m.onnx.data")    # data: None when inline
"""

from __future__ import annotations

from strata.exporters.onnx import INLINE_LIMIT, initializer_bytes

#: Initializers of at least this many bytes go to the external data file of a large model.
EXTERNAL_MIN_BYTES = 1024


def serialize_onnx(model, data_name: str, inline_limit: int = INLINE_LIMIT) -> tuple[bytes, bytes | None]:
    """The model file's bytes, and the external data file's (None when the weights fit inline).

    With external data, initializers of EXTERNAL_MIN_BYTES or more are moved out of `model`
    (in place) into one file named `data_name` (relative to the model file), 64-byte aligned.
    """
    from onnx import TensorProto

    if initializer_bytes(model) <= inline_limit:
        return model.SerializeToString(), None
    chunks: list[bytes] = []
    offset = 0
    for t in model.graph.initializer:
        raw = t.raw_data
        if len(raw) < EXTERNAL_MIN_BYTES:
            continue
        pad = -offset % 64
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        chunks.append(raw)
        del t.external_data[:]
        for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        offset += len(raw)
    return model.SerializeToString(), b"".join(chunks)

