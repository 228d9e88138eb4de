"""cpu-native-kernels: which ops of an op-level module the cpu target's native kernels compute."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.dialects.builtin import StringAttr

from strata.dialects import op as O
from strata.passes.cpu_native_kernels import KERNEL_ATTR, ORDER_ATTR, is_native
from strata.passes.pipelines import lowered
from strata.pipeline import load_model
from strata.pipeline.compile import target_pipeline

pytest.importorskip("gguf")

DATA = Path(__file__).resolve().parents[1] / "frontends" / "data"


def marked(path: Path, entries: str, **knobs) -> object:
    model = load_model(path)
    spec = target_pipeline("cpu", model, {"ctx": 64, "kernels": "numpy", "entries": entries, **knobs})
    return lowered(model.module, spec + ",cpu-native-kernels")


def test_packed_weights_and_their_products_are_marked() -> None:
    module = marked(DATA / "llama-q4_0.gguf", "prefill,decode", kv_type="f16")
    assert is_native(module)
    params = [p for p in module.walk() if isinstance(p, O.ParamOp)]
    weights = [p for p in params if len(O.shape_of(p.result)) == 2]
    assert weights and all(is_native(p) for p in weights)
    assert not any(is_native(p) for p in params if len(O.shape_of(p.result)) == 1)  # norms stay numpy's
    for op in module.walk():
        if isinstance(op, (O.MulMatOp, O.GetRowsOp)) and isinstance(op.operands[0].owner, O.ParamOp):
            assert is_native(op), op
        if isinstance(op, O.FlashAttnExtOp):
            assert is_native(op)  # over the f16 KV cache
    # llama-quantize's Q4_0 file keeps output.weight in Q8_0: only the Q4_0 products are repacked
    repacked = {op.operands[0].owner.tensor_name.data for op in module.walk()
                if isinstance(op, O.MulMatOp) and op.attributes.get(ORDER_ATTR) == StringAttr("repacked")}
    assert repacked and all(".attn_" in n or ".ffn_" in n for n in repacked)


def test_a_weight_another_entry_reads_otherwise_stays_numpys() -> None:
    """output.weight is MUL_MAT's in decode and TARGET_LOG_PROBS' in log_probs_packed: bound once,
    it cannot be packed for one and an array for the other."""
    module = marked(DATA / "llama-q8_0.gguf", "decode,log_probs_packed")
    reads = [p for p in module.walk() if isinstance(p, O.ParamOp) and p.tensor_name.data == "output.weight"]
    assert len(reads) == 2 and not any(KERNEL_ATTR in p.attributes for p in reads)
    assert any(is_native(p) for p in module.walk() if isinstance(p, O.ParamOp))  # the others are
