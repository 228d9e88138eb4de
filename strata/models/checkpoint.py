"""Checkpoints of llama-family models: the weights a config implies, random checkpoints.

What a checkpoint must hold is read off the module-level IR (`model_params`), so the
weight store, the lowering and the random writer agree by construction.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from strata.dialects.module import ModelOp
from strata.frontends.hf_config import LlamaConfig, write_hf_config
from strata.ir.weights import (
    _NUMPY_DTYPES,
    INDEX_FILE,
    SINGLE_FILE,
    WeightError,
    ggml_to_hf_name,
    write_safetensors,
)
from strata.models.llama import build_llama, model_params


def expected_llama_weights(cfg: LlamaConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """ggml name -> (shape in HF layout, dtype) of every param of ``cfg``: the
    ``expected`` argument of :meth:`WeightStore.check`."""
    model = next(op for op in build_llama(cfg).ops if isinstance(op, ModelOp))
    return model_params(model)


def save_random_llama(cfg: LlamaConfig, directory: str | Path, seed: int,
                      dtype: str = "float32", shards: int = 1, std: float = 0.02) -> Path:
    """Write random HF-named weights for ``cfg`` and its config.json; returns the directory.

    Matrices are N(0, std), biases N(0, 0.02); norm weights 1 + 0.1 N(0, 1), so that outputs
    are well conditioned. A tiny model needs std ~0.12 for logits of std ~1 (and varied
    greedy tokens); 0.02 is HF's init. The bytes depend only on the arguments.
    """
    if dtype not in _NUMPY_DTYPES:
        raise WeightError(f"dtype {dtype!r} is not one of {', '.join(_NUMPY_DTYPES)}")
    directory = Path(directory)
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    for name, (shape, _) in expected_llama_weights(cfg).items():
        x = rng.standard_normal(shape, dtype=np.float32)
        x = 1.0 + 0.1 * x if "norm" in name else (std if x.ndim == 2 else 0.02) * x
        tensors[ggml_to_hf_name(name)] = x.astype(_NUMPY_DTYPES[dtype])
    write_hf_config(dataclasses.replace(cfg, dtype=dtype), directory)
    meta = {"format": "pt"}  # transformers checks this key before trusting the file
    if shards == 1:
        write_safetensors(directory / SINGLE_FILE, tensors, meta)
        return directory
    names = list(tensors)
    if not 1 <= shards <= len(names):
        raise WeightError(f"cannot split {len(names)} tensors into {shards} shards")
    weight_map: dict[str, str] = {}
    for i, part in enumerate(np.array_split(np.arange(len(names)), shards)):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(directory / shard, {names[j]: tensors[names[j]] for j in part}, meta)
        weight_map.update({names[j]: shard for j in part})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
             "weight_map": dict(sorted(weight_map.items()))}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return directory
