"""What the blueprint interpreter's nodes read: the emulation of precision formats and the run's
environment (the weights, through the function's weight table and each node's weight format;
the dims; the state buffers; the position).

Precision, from a node's `precision` attribute (absent: f32 throughout, no rounding):

- `weight`: `fp8` with a block -> quantized with `strata.ir.fp8.quantize_fp8_block` and
  dequantized (per expert for 3-D expert weights); `int4` with a 1-D block and `asymmetric` ->
  ONNX Runtime's block-wise asymmetric 4-bit formula along the last axis (`strata.ir.int4`);
  `int8` and `int4` symmetric with block [32] -> ggml's Q8_0 and Q4_0 (`strata.ir.ggml_blocks`);
  `bf16` / `f16` -> rounded through that type. Each quantized weight is cached per (name, format).
- `activation`: the node's float inputs are rounded through it (bf16 via ml_dtypes).
- `output`: the node's float results are rounded through it.
- accumulation is f32 (every product and sum is computed in float32).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.ir import Operation

from strata.dialects.blueprint.attrs import FormatAttr
from strata.dialects.blueprint.facts import WeightRead
from strata.errors import StrataError
from strata.ir import fp8, ggml_blocks
from strata.ir.int4 import dequantize_int4_block, quantize_int4_block
from strata.ir.split import split_piece
from strata.semantics.op_interp import PARAM_CONVERSIONS
from strata.semantics.ranks import Group, SoloGroup

BF16 = np.dtype(ml_dtypes.bfloat16)


class BlueprintRunError(StrataError):
    """A blueprint function that cannot be executed (missing weight, state, dim or format)."""


# ---------------------------------------------------------------------------------------------
# Formats


def _fmt_key(f: FormatAttr) -> tuple:
    return (f.elem.data, f.block_sizes, f.is_asymmetric)


def round_activation(x: np.ndarray, f: FormatAttr | None) -> np.ndarray:
    """A float edge rounded through an activation/output format (f32 back)."""
    if f is None or x.dtype.kind != "f":
        return x
    elem = f.elem.data
    if elem in ("f32",):
        return x.astype(np.float32)
    if elem in ("bf16", "f16"):
        t = BF16 if elem == "bf16" else np.dtype(np.float16)
        return np.asarray(x, np.float32).astype(t).astype(np.float32)
    raise BlueprintRunError(f"activation/output format '{elem}' is not emulated (bf16, f16, f32 are)")


def quantize_weight(w: np.ndarray, f: FormatAttr | None) -> np.ndarray:
    """A weight as the node sees it after its weight format: f32."""
    w = np.asarray(w, dtype=np.float32)
    if f is None:
        return w
    elem, block = f.elem.data, f.block_sizes
    if elem == "f32" or f.is_stored_blocks:  # a GGUF block format: the file's values, as the store reads them
        return w
    if elem in ("bf16", "f16"):
        return round_activation(w, f)
    if elem == "fp8":
        blk = block if len(block) == 2 else fp8.BLOCK
        if w.ndim == 1:
            return fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(w[None, :], blk), blk)[0]
        if w.ndim == 2:
            return fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(w, blk), blk)
        flat = w.reshape(-1, *w.shape[-2:])
        return np.stack([fp8.dequantize_fp8_block(*fp8.quantize_fp8_block(m, blk), blk) for m in flat]).reshape(w.shape)
    if elem in ("int8", "int4") and not f.is_asymmetric and block == (ggml_blocks.BLOCK,):
        if w.shape[-1] % ggml_blocks.BLOCK:
            raise BlueprintRunError(f"{elem}/block{ggml_blocks.BLOCK}: input dim {w.shape[-1]} is not a multiple of it")
        return ggml_blocks.round_blocks(w, elem)
    if elem == "int4":
        if not f.is_asymmetric:
            raise BlueprintRunError(f"symmetric int4 weights are emulated with block [{ggml_blocks.BLOCK}] only (Q4_0)")
        blk = block[0] if block else 128
        return dequantize_int4_block(*quantize_int4_block(w, blk), blk)
    raise BlueprintRunError(f"weight format '{elem}' is not emulated (fp8, int4 asymmetric, int8 and int4 with "
                            f"block [{ggml_blocks.BLOCK}], bf16, f16, f32 are)")



# ---------------------------------------------------------------------------------------------
# Environment


@dataclass
class Env:
    """One run's weights, state buffers, dims and position, and the defaults of the node
    hyperparameters a node may leave out (eps, the rope's theta, top-k's normalization)."""

    weights: Any  # a Mapping[str, ndarray] or an object with .get(name) (a WeightStore)
    state: dict[str, np.ndarray]
    dims: Mapping[str, int]
    pos: int = 0
    eps: float = 1e-6
    rope_theta: float = 10000.0
    norm_topk_prob: bool = True
    cache: dict[tuple, np.ndarray] = field(default_factory=dict)
    #: weight name -> its stored name and conversion (the function's `blueprint.weights`)
    table: Mapping[str, WeightRead] = field(default_factory=dict)
    #: the rank's group in a tensor-parallel blueprint (`strata.semantics.ranks`); one rank else
    group: Group = field(default_factory=SoloGroup)

    def dim(self, name: str) -> int:
        """The size of the dim symbol `name`."""
        if name not in self.dims:
            raise BlueprintRunError(f"dim '{name}' is not bound (pass dims={{'{name}': ...}})")
        return int(self.dims[name])

    def raw(self, name: str, fmt: FormatAttr | None = None) -> np.ndarray:
        """The weight `name`: its stored tensor (in a tensor-parallel blueprint, this rank's piece
        of it, as the weight store reads it), in the format `fmt` (quantized as stored, as a
        quantized checkpoint holds it: one scale grid per stored tensor, or per piece, as the
        rank that holds it quantizes it), then converted as the weight table says."""
        read = self.table.get(name) or WeightRead(name)
        piece = read.piece(self.group.rank, self.group.size)
        try:
            if piece is not None and callable(getattr(self.weights, "piece", None)):
                w = self.weights.piece(read.source, *piece)
            else:
                w = self.weights[read.source] if isinstance(self.weights, Mapping) else self.weights.get(read.source)
                if w is not None and piece is not None:
                    w = split_piece(w, *piece)
        except (KeyError, StrataError):
            w = None
        except ValueError as e:
            raise BlueprintRunError(f"weight '{read.source}': {e}") from None
        if w is None:
            raise BlueprintRunError(f"no weight '{read.source}'")
        if fmt is not None:
            w = quantize_weight(np.asarray(w), fmt)
        if read.convert is not None:
            w = PARAM_CONVERSIONS[read.convert](w, read.args)
        return np.asarray(w)

    def node_weight(self, op: Operation) -> np.ndarray:
        """The weight of a `weight "param"` node: `param`'s rows, then those of each `concat`
        weight (a merged projection), in the node's weight format."""
        names = [op.param.data] + [c.data for c in (op.concat.data if op.concat else ())]  # type: ignore[attr-defined]
        if len(names) == 1:
            return self.weight(op, names[0])
        f = precision_of(op).get("weight")
        key = (tuple(names), None if f is None else _fmt_key(f))
        if key not in self.cache:  # each part keeps its own scales, as separate checkpoint tensors do
            self.cache[key] = np.concatenate([self.weight(op, n) for n in names], axis=-2)
        return self.cache[key]

    def eps_of(self, op: Operation) -> float:
        """The node's `eps`, or the run's default."""
        e = op.attributes.get("eps")
        return float(e.value.data) if e is not None else self.eps  # type: ignore[attr-defined]

    def weight(self, op: Operation, name: str) -> np.ndarray:
        """The weight `name` as `op`'s weight format makes it (cached per name and format)."""
        f = precision_of(op).get("weight")
        key = (name, None if f is None else _fmt_key(f))
        if key not in self.cache:
            self.cache[key] = self.raw(name, f)
        return self.cache[key]

    def buffer(self, op: Operation, default: str, effect: str | None = None) -> tuple[str, np.ndarray]:
        """The buffer of `op`'s state effect `effect`: its slot if it names one, else the effect's state."""
        effects = list(op.effects.data) if getattr(op, "effects", None) else []  # type: ignore[attr-defined]
        slots = [s.data for s in op.slots.data] if getattr(op, "slots", None) else [e.state.data for e in effects]  # type: ignore[attr-defined]
        names = [slot for e, slot in zip(effects, slots) if effect is None or e.effect.data == effect]
        name = names[0] if names else default
        if name not in self.state:
            raise BlueprintRunError(f"{op.name}: no state buffer '{name}'")
        return name, self.state[name]


def precision_of(op: Operation) -> dict[str, FormatAttr]:
    """The formats of a node's `precision` (weight, activation, output, accumulate), those it has."""
    p = op.attributes.get("precision")
    return p.fields() if p is not None else {}  # type: ignore[attr-defined]
