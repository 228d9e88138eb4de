"""Random checkpoints of any family: the tensors a config implies, with seeded random values.

What a checkpoint must hold is read off the module-level IR (its param instances, with
their HF names), so the weight store, the lowering and the random writer agree by
construction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from strata.dialects.instances import find_model, instantiate, model_params
from strata.ir.dtypes import dtype_of_hf
from strata.ir.weights import INDEX_FILE, SINGLE_FILE, WeightError, write_safetensors


def write_random_checkpoint(module: ModuleOp, write_config: Callable[[Path, str], None], directory: str | Path,
                            seed: int, dtype: str = "float32", shards: int = 1, std: float = 0.02) -> Path:
    """Write random HF-named weights for the module-level program `module` into `directory`,
    and its config.json by `write_config(directory, dtype)` (the family's writer); returns the
    directory.

    Matrices are N(0, std), vectors N(0, 0.02); norm weights 1 + 0.1 N(0, 1) (0.1 N(0, 1) for a
    zero-centred norm, whose scale is 1 + w), so that outputs are well conditioned; a Gated
    DeltaNet's A_log is U(-1.2, 1.5) and its dt_bias N(0, 0.5), a trained model's spread. A tiny model needs std ~0.12 for logits of std ~1 (and varied
    greedy tokens); 0.02 is HF's init. The bytes depend only on the arguments.
    """
    stored = dtype_of_hf(dtype)
    if stored is None or stored.kind != "float":
        raise WeightError(f"dtype {dtype!r} is not one of float32, float16, bfloat16")
    directory = Path(directory)
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    model = find_model(module)
    centred = {inst.params["weight"].ggml for inst in instantiate(model).walk()
               if inst.attr("weight_offset") is not None and "weight" in inst.params}
    for name, t in model_params(model).items():
        x = rng.standard_normal(t.shape, dtype=np.float32)
        if "norm" in name:
            x = 0.1 * x if name in centred else 1.0 + 0.1 * x
        elif name.endswith(".ssm_a"):  # A_log: decays exp(A_log) from ~0.3 to ~4.5, as trained ones
            x = rng.uniform(-1.2, 1.5, t.shape).astype(np.float32)
        elif name.endswith(".ssm_dt.bias"):
            x = 0.5 * x
        else:
            x = (std if x.ndim >= 2 else 0.02) * x
        if "*" in t.hf:  # stored one by one, as the hub stores experts
            tensors.update({t.hf.replace("*", str(i)): x[i].astype(stored.numpy) for i in range(t.shape[0])})
        else:
            tensors[t.hf] = x.astype(stored.numpy)
    write_config(directory, dtype)
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
