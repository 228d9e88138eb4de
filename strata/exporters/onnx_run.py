"""Serialize an exported ONNX model, and run exported entries with onnxruntime (CPU).

    onnx_bytes, data = serialize_onnx(model, "m.onnx.data")    # data: None when inline
    prefill, decode = OrtEntry(export_onnx(pf, store)), OrtEntry(export_onnx(dc, store))
    ids, logits = generate_ort(prefill, decode, [1, 2, 3], 16)

An `OrtEntry` feeds a call's host inputs (`strata.semantics.kernels.host_input`, by the kinds
the model's metadata lists) and the state buffers, and keeps the updated buffers its outputs
return, so that the next call (of any entry sharing them) reads them. onnxruntime is imported
only here.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.exporters.onnx import INLINE_LIMIT, initializer_bytes
from strata.semantics import kernels as K

#: Initializers of at least this many bytes go to the external data file of a large model.
EXTERNAL_MIN_BYTES = 1024


class OnnxRunError(StrataError):
    """An exported model that onnxruntime cannot load or run."""


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


def _metadata(model) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


class OrtEntry:
    """One exported entry in an onnxruntime session (CPU execution provider)."""

    def __init__(self, model, *, threads: int = 0, inline_limit: int = INLINE_LIMIT):
        """A session of `model`; one over `inline_limit` bytes of weights goes through a temporary
        directory with its weights as external data (moved out of `model`)."""
        try:
            import onnxruntime as ort
        except ImportError:
            raise OnnxRunError("--via onnxruntime needs the 'onnxruntime' package (pip install onnxruntime)") from None
        meta = _metadata(model)
        try:
            self.entry = meta["strata.entry"]
            self.n_kv = int(meta["strata.n_kv"])
            self.host: dict[str, str] = json.loads(meta["strata.inputs"])
            self.states: list[tuple[str, str, str]] = [tuple(s) for s in json.loads(meta["strata.states"])]
        except (KeyError, ValueError, TypeError):
            raise OnnxRunError("the ONNX model lacks strata's metadata (strata.entry, strata.inputs, "
                               "strata.states, strata.n_kv); export it with strata export") from None
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        content, data = serialize_onnx(model, "model.onnx.data", inline_limit)
        source: Any = content
        self._files = None
        if data is not None:
            self._files = tempfile.TemporaryDirectory(prefix="strata-onnx-")
            source = os.path.join(self._files.name, "model.onnx")
            with open(source + ".data", "wb") as stream:
                stream.write(data)
            with open(source, "wb") as stream:
                stream.write(content)
        try:
            self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types
            raise OnnxRunError(f"onnxruntime cannot load the exported {self.entry}: {_first_line(e)}") from None
        self.ort = ort
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.vocab = int(self.session.get_outputs()[0].shape[-1])
        graph_inputs = {i.name: i for i in model.graph.input}
        self.tokens = 0
        if "tokens" in self.host:
            self.tokens = int(graph_inputs[self.host["tokens"]].type.tensor_type.shape.dim[0].dim_value)
        self._state_types = {}
        for state, name, _ in self.states:
            t = graph_inputs[name].type.tensor_type
            self._state_types[state] = (t.elem_type, [d.dim_value for d in t.shape.dim])

    def zero_state(self) -> dict[str, Any]:
        """Zeroed buffers (onnxruntime values) for every state the entry reads, keyed by state name."""
        from onnx import helper

        out = {}
        for state, (elem, shape) in self._state_types.items():
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
            # As bits: numpy has no bfloat16 or float8 that onnxruntime's Python binding knows.
            bits = np.zeros(shape, dtype=f"u{dtype.itemsize}")
            out[state] = self.ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, elem)
        return out

    def __call__(self, tokens: Sequence[int], start: int, state: dict[str, Any]) -> np.ndarray:
        """Run the entry on `tokens` at position `start`; returns the logits and replaces the
        buffers of `state` (from `zero_state`, kept as onnxruntime values) with the updated ones."""
        tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
        if self.tokens and tokens.shape[0] != self.tokens:
            raise OnnxRunError(f"the exported {self.entry} takes {self.tokens} tokens, got {tokens.shape[0]}")
        if self.n_kv and start + tokens.shape[0] > self.n_kv:
            raise OnnxRunError(f"{start} + {tokens.shape[0]} tokens exceed the {self.n_kv} cache rows of the "
                               f"exported {self.entry}")
        feeds: dict[str, Any] = {}
        for kind, name in self.host.items():
            value = (np.array([start], dtype=np.int64) if kind == "start"
                     else K.host_input(kind, tokens, start, self.n_kv))
            feeds[name] = self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))
        for state_name, name, _ in self.states:
            if state_name not in state:
                raise OnnxRunError(f"state '{state_name}': no buffer given (use zero_state)")
            feeds[name] = state[state_name]
        try:
            results = self.session.run_with_ort_values(self.outputs, feeds)
        except Exception as e:
            raise OnnxRunError(f"onnxruntime failed running the exported {self.entry}: {_first_line(e)}") from None
        by_name = dict(zip(self.outputs, results))
        for state_name, _, out in self.states:
            state[state_name] = by_name[out]
        return by_name["logits"].numpy()


def generate_ort(prefill: OrtEntry, decode: OrtEntry, prompt: Sequence[int], max_new_tokens: int, *,
                 on_token: Callable[[int, int], None] | None = None) -> tuple[list[int], np.ndarray]:
    """Greedy generation as the CPU target's `generate`: prefill the prompt, then decode one token
    at a time, feeding the state back. Returns the new ids and the logits that chose them."""
    state = prefill.zero_state()
    state.update({k: v for k, v in decode.zero_state().items() if k not in state})
    ids: list[int] = []
    if max_new_tokens == 0:
        return ids, np.zeros((0, prefill.vocab), dtype=np.float32)
    row = prefill(prompt, 0, state)[-1]
    logits = np.zeros((max_new_tokens, row.shape[-1]), dtype=np.float32)
    for i in range(max_new_tokens):
        logits[i] = row
        token = int(np.argmax(row))
        ids.append(token)
        if on_token is not None:
            on_token(i, token)
        if i + 1 < max_new_tokens:
            row = decode([token], len(prompt) + i, state)[-1]
    return ids, logits


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
