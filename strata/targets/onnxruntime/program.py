"""Exported ONNX entries run by onnxruntime (CPU) behind the runtime protocol
(`strata.runtime.program`): `strata run --via onnxruntime`.

    program = open_onnxruntime(model, store, {"ctx": 256, "kv_pad": 256, "flash_attn": True}, prompt_len=3)
    step = program.prefill([1, 2, 3], 0)
    step = program.decode(step.token, 3)
    step = program.decode(step.token, 4, params)   # sampled on the host, by the numpy sampler

The prefill is exported for the prompt's length, the decode for one token, both at any
position; an `OrtEntry` feeds a call's host inputs (`strata.semantics.kernels.host_input`, by
the kinds the model's metadata lists) and the state buffers, and keeps the updated buffers its
outputs return, so that the next call (of any entry sharing them) reads them. onnxruntime is
imported only here. ONNX has no Philox 4x32 random op, so the exported entries return logits
and a sampled token is drawn on the host by the numpy sampler (`strata.semantics.sampling`),
the semantics every compiled sampler implements.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.exporters.onnx import INLINE_LIMIT
from strata.exporters.onnx_file import serialize_onnx
from strata.semantics import kernels as K
from strata.semantics import sampling as S
from strata.semantics.programs import LogitsStep, SampledStep, SequenceSampler
from strata.semantics.sampling_inputs import Sampling


class OnnxRunError(StrataError):
    """An exported model that onnxruntime cannot load or run."""


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


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _host_sampler(logits, key, step, *rest):
    """`@sample_logits`'s arguments -> the numpy sampler's ids (ONNX cannot hold the sampler)."""
    return S.sample(logits, key, int(step[0]), *rest[:7], prompt_counts=rest[7], output_counts=rest[8],
                    mask=rest[9] if len(rest) > 9 else None)


class OrtProgram:
    """A prefill and a decode entry in onnxruntime sessions, sharing their state buffers."""

    runtime = "onnxruntime"

    def __init__(self, prefill: OrtEntry, decode: OrtEntry, name: str = "model"):
        self.prefill_entry, self.decode_entry, self.name = prefill, decode, name
        self.vocab = prefill.vocab
        self.n_ctx = prefill.n_kv
        self.sampler = self.chooser()
        self.reset()

    def chooser(self) -> SequenceSampler:
        return SequenceSampler(self.vocab, _host_sampler)

    def reset(self) -> None:
        self.buffers = self.prefill_entry.zero_state()
        self.buffers.update({k: v for k, v in self.decode_entry.zero_state().items() if k not in self.buffers})

    def prefill(self, tokens: Sequence[int], start: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        if start == 0:
            self.reset()
        logits = self.prefill_entry(tokens, start, self.buffers)[-1]
        return self.sampler.choose(logits, np.asarray(tokens), start, False, sampling)

    def decode(self, token: int, pos: int, sampling: Sampling | None = None) -> LogitsStep | SampledStep:
        return self.sampler.choose(self.decode_entry([token], pos, self.buffers)[-1], [token], pos, True, sampling)

    def close(self) -> None:
        pass


def export_entry(model: Any, store: Any, entry: str, tokens: int, knobs: Mapping[str, Any], int4: Any = None):
    """One entry of `model` (a loaded model: its module level) as an ONNX ModelProto, `tokens`
    tokens at any position (start unknown); `int4`: a w4a16 stage whose int4 weights become
    MatMulNBits (`strata.exporters.onnx.export_onnx`)."""
    from strata.exporters.onnx import export_onnx
    from strata.passes.pipelines import entry_pipeline, lowered
    from strata.semantics.op_interp import find_function

    spec = entry_pipeline(entry, tokens=tokens if entry == "prefill" else 0, start=-1, ctx=knobs["ctx"],
                          kv_pad=knobs["kv_pad"], flash_attn=knobs["flash_attn"])
    return export_onnx(find_function(lowered(model.module, spec)), store, int4=int4)


def open_onnxruntime(model: Any, store: Any, knobs: Mapping[str, Any], prompt_len: int,
                     decode: bool = True) -> OrtProgram:
    """`model`'s prefill (for `prompt_len` tokens) and, if `decode`, its decode exported and
    loaded in onnxruntime (a run of one new token needs no decode)."""
    prefill = OrtEntry(export_entry(model, store, "prefill", prompt_len, knobs))
    step = OrtEntry(export_entry(model, store, "decode", 1, knobs)) if decode else prefill
    return OrtProgram(prefill, step, model.name)

