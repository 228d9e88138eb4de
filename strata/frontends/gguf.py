"""Read llama.cpp's GGUF files: the metadata gives the config, the tensors give the weights.

    g = GgufFile("tiny.gguf")
    fields = hf_config_dict(g)                      # strata.frontends.gguf_config: the metadata as HF config fields
    store = GgufWeights(g, config, params, ...)     # what `Model.open_weights` returns for a GGUF

The pipeline reads `fields` by the family they name (`strata.pipeline.model.gguf_config`).

The file is parsed by the `gguf` package's `GGUFReader` and quantized tensors are dequantized by
`gguf.quants.dequantize` (an optional dependency, imported only here). Types read: F32, F16 and
BF16 (zero-copy views) and every block type the gguf package dequantizes (Q4_0 ... Q8_0, the
K-quants Q2_K ... Q6_K, IQ4_NL, IQ4_XS and the other IQ types, TQ1_0, TQ2_0, MXFP4), each
dequantized to f32 once on first use and kept (what the op level and the CPU target compute
with). `block_formats()` gives each block-quantized tensor's ggml type, which the module level
records (`ggml_formats`) so that the op level knows what llama.cpp multiplies (`op.param`'s
`format`, ggml-cpu's quantized activations). At the blueprint level Q8_0 and Q4_0 are weight
formats (`int8/block32`, `int4/block32`; the recipes `q8_0`, `q4_0`), which round a GGUF of that
type to itself (`strata.ir.ggml_blocks`). For the cpu target's native kernels, `packed(name)`
gives a tensor as the file stores it: a uint8 view of the mapping's blocks, never dequantized.
Before the reader cuts any view, every tensor info is checked against the file (a known type,
rows of whole blocks, its bytes inside the file and apart from every other tensor's), so a
truncated file or a tensor whose byte size disagrees with its type and shape gets one line
naming the tensor before any kernel can read past the mapping.

**The metadata** (`strata.frontends.gguf_config`). `general.architecture` names the family (`ARCHITECTURES`); its keys
(`{arch}.block_count`, `embedding_length`, `attention.head_count`, ...) are mapped to an HF
`config.json` dict, which the family's own config reader reads, so a GGUF model is checked as
strictly as a checkpoint directory. What GGUF does not carry is what llama.cpp assumes:
tied embeddings when there is no `output.weight`, q/k/v biases when `blk.0.attn_q.bias` is
there, sparse layers where `blk.N.ffn_gate_inp.weight` is, and renormalised top-k expert
weights (llama.cpp's MoE graphs always renormalise). Llama 3's RoPE scaling is stored only as
its frequency factors (`rope_freqs.weight`): its parameters are fitted to them (`llama3_scaling`).

**The tensors.** The op level addresses weights by llama.cpp's names, but with the checkpoint's
(HF's) values: where llama.cpp's converter changes a tensor, the op level's `op.param` says how
(`convert = plus_one | neg_exp | squeeze | ungroup_rows`) and applies it itself. So the GGUF store
gives every param in the form the IR expects, undoing the converter's changes explicitly:

* llama: `attn_q` / `attn_k` rows (and biases) were permuted for llama.cpp's "norm" RoPE
  (`LlamaModel.permute`); the op level ropes NeoX-style on HF's order, so they are permuted back;
* zero-centred norms (the hybrids' RmsNorm, `weight_offset` in the IR) were stored `1 + w`;
  the store gives `w` (op.param's `plus_one` adds the 1 again; f32 makes that exact);
* Gated DeltaNet's `A_log` was stored as `ssm_a = -exp(A_log)`; the store gives `log(-ssm_a)`
  (op.param's `neg_exp`);
* the conv1d `[C, 1, K]` was squeezed to `[C, K]`; the store gives it back with its 1;
* Qwen3.5's linear-attention value heads were reordered from grouped (by key head) to tiled
  (`_LinearAttentionVReorderBase`): the v rows of attn_qkv, attn_gate, ssm_beta, ssm_alpha,
  ssm_a, ssm_dt.bias, the v channels of the conv1d and the columns of ssm_out are put back;
* Qwen3-Next's grouped `in_proj_qkvz` was split into `attn_qkv` and `attn_gate`; the store
  regroups them as the IR's `ssm_in` (which op.param's `ungroup_rows` splits again).

Every error is a one-line `GgufError` naming the file and the key or tensor.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.ir.ggml_types import gguf_type_name
from strata.ir.split import split_piece

MAGIC = b"GGUF"
#: general.architecture -> the HF architecture whose family reads it.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "qwen35": "Qwen3_5ForCausalLM",
    "qwen35moe": "Qwen3_5MoeForCausalLM",
    "qwen3next": "Qwen3NextForCausalLM",
}
HYBRID = ("qwen35", "qwen35moe", "qwen3next")
MOE = ("qwen3moe", "qwen35moe", "qwen3next")
#: The architectures llama.cpp ropes with IMROPE (interleaved M-RoPE sections).
IMROPE_ARCHS = ("qwen35", "qwen35moe")
#: The float tensor types read as views; block types are read when the gguf package dequantizes them.
FLOAT_TYPES = ("F32", "F16", "BF16")
#: general.file_type -> the model's element type (quantized files compute in f32).
_FILE_DTYPES = {0: "float32", 1: "float16", 32: "bfloat16"}


class GgufError(StrataError):
    """A GGUF file that strata cannot read or does not support."""


def is_gguf(path: str | Path) -> bool:
    """Whether `path` is a file that starts with GGUF's magic (or is named *.gguf)."""
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        return True
    if not p.is_file():
        return False
    try:
        with open(p, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


def _gguf():
    try:
        import gguf
    except ImportError:
        raise GgufError("reading GGUF files needs the 'gguf' package (pip install 'strata[gguf]')") from None
    return gguf


# ---------------------------------------------------------------------------------------------
# The file


class GgufFile:
    """One GGUF file, parsed by the gguf package's reader: its metadata and its tensors."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        gguf = _gguf()
        if not self.path.is_file():
            raise GgufError(f"{self.path}: no such file" if not self.path.exists() else f"{self.path}: not a file")
        try:
            with open(self.path, "rb") as fh:
                magic = fh.read(4)
            size = self.path.stat().st_size
        except OSError as e:
            raise GgufError(f"{self.path}: cannot read: {e.strerror or e}") from None
        if len(magic) < len(MAGIC) and MAGIC.startswith(magic):
            raise GgufError(f"{self.path}: truncated GGUF file ({size} bytes)")
        if magic != MAGIC:
            raise GgufError(f"{self.path}: not a GGUF file (it does not start with 'GGUF')")
        try:
            reader = _checked_reader(gguf, self.path)
        except GgufError as e:
            raise GgufError(f"{self.path}: {e}") from None
        except Exception as e:  # noqa: BLE001 - the reader reports a bad file with many exception types
            raise GgufError(f"{self.path}: truncated or corrupt GGUF file ({size} bytes; the gguf reader says: "
                            f"{_first_line(e)})") from None
        self.reader = reader
        self.tensors = {t.name: t for t in reader.tensors}
        readable: dict[Any, bool] = {}
        for t in reader.tensors:
            kind = t.tensor_type
            if kind.name in FLOAT_TYPES:
                continue
            if kind not in readable:
                readable[kind] = _dequantizes(gguf, kind)
            if not readable[kind]:
                raise GgufError(f"{self.path}: tensor '{t.name}' has type {kind.name}, which the gguf package "
                                f"cannot dequantize (strata reads {', '.join(FLOAT_TYPES)} and {readable_types()})")
        self.arch = self.text("general.architecture")
        #: The indices of the multi-token-prediction layers (set as the config is read).
        self.mtp_layers: range = range(0)
        #: What compiled code depends on: the metadata and tensor infos (not the tensor data).
        self.header_sha256 = hashlib.sha256(np.asarray(reader.data[:reader.data_offset])).hexdigest()

    # -- metadata -------------------------------------------------------------------------

    def value(self, key: str, default: Any = ...) -> Any:
        field = self.reader.get_field(key)
        if field is None:
            if default is ...:
                raise GgufError(f"{self.path}: metadata key '{key}' is missing")
            return default
        try:
            return field.contents()
        except Exception as e:  # noqa: BLE001
            raise GgufError(f"{self.path}: metadata key '{key}' cannot be read ({_first_line(e)})") from None

    def text(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is not default and not isinstance(v, str):
            raise GgufError(f"{self.path}: metadata key '{key}' must be a string, got {_show(v)}")
        return v

    def integer(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is default:
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GgufError(f"{self.path}: metadata key '{key}' must be a non-negative integer, got {_show(v)}")
        return v

    def number(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is default:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise GgufError(f"{self.path}: metadata key '{key}' must be a finite number, got {_show(v)}")
        # GGUF stores f32: its shortest decimal is the value the HF config had (1e-05, not 9.99e-06).
        return float(str(np.float32(v)))

    def array(self, key: str, default: Any = ...) -> Any:
        v = self.value(key, default)
        if v is not default and not isinstance(v, list):
            raise GgufError(f"{self.path}: metadata key '{key}' must be an array, got {_show(v)}")
        return v

    # -- tensors --------------------------------------------------------------------------

    def shape(self, name: str) -> tuple[int, ...]:
        """Tensor `name`'s shape, row-major (ggml's dims reversed)."""
        return tuple(int(d) for d in reversed(self.tensors[name].shape.tolist()))

    def dtype_name(self, name: str) -> str:
        """The element type the store gives tensor `name` in (f32 for the block types)."""
        return {"F16": "f16", "BF16": "bf16"}.get(self.tensors[name].tensor_type.name, "f32")

    def format_name(self, name: str) -> str | None:
        """The ggml block type tensor `name` is stored in (`q4_K`), or None for a float tensor."""
        kind = self.tensors[name].tensor_type.name
        return None if kind in FLOAT_TYPES else gguf_type_name(kind)

    def packed(self, name: str) -> tuple[int, np.ndarray]:
        """Tensor `name` as stored: (its ggml type id, a read-only uint8 view [rows, row bytes]
        of the memory-mapped file); the rows are those of its innermost dim (every dim but the
        last, row-major), each a whole number of blocks (checked when the file was opened)."""
        t = self.tensors[name]
        shape = self.shape(name)
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)  # a view of the mapping, whatever the element type
        rows = math.prod(shape[:-1])
        return int(t.tensor_type), raw.reshape(rows, -1)

    def load(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Tensor `name`: a view of the file for F32, F16 and BF16, else dequantized to f32 (a
        block of rows at a time); `rows` (lo, hi): only those indices of its first (row-major)
        dim, of which a block format dequantizes nothing else (its blocks lie within a row)."""
        t = self.tensors[name]
        kind, shape = t.tensor_type.name, self.shape(name)
        lo, hi = rows if rows is not None else (0, shape[0])
        try:
            if kind in ("F32", "F16"):
                return t.data.reshape(shape)[lo:hi]
            if kind == "BF16":
                import ml_dtypes

                return t.data.view(ml_dtypes.bfloat16).reshape(shape)[lo:hi]
            out = _dequantize(t, shape, lo, hi)
        except Exception as e:  # noqa: BLE001 - a truncated tensor fails in numpy or the dequantizer
            raise GgufError(f"{self.path}: tensor '{name}' ({kind}) cannot be read ({_first_line(e)})") from None
        out.flags.writeable = False
        return out


def _label(name: str) -> str:
    """A tensor name as it appears in a one-line message (a corrupt file's names may hold anything)."""
    text = "".join(c if c.isprintable() and c not in "\r\n" else "?" for c in name)
    return text if len(text) <= 80 else text[:77] + "..."


def _checked_reader(gguf: Any, path: Path) -> Any:
    """The gguf package's reader of `path`, after every tensor info is checked against the file:
    a known type, a row of whole blocks, its bytes (from its type and shape) inside the file and
    apart from every other tensor's. The reader itself would cut a short view of the mapping, or
    fail on the whole file; this names the tensor (GgufError, without the path: the caller adds it)."""

    class CheckedReader(gguf.GGUFReader):
        def _build_tensors(self, start_offs: int, fields: list) -> None:
            _check_tensor_infos(gguf, int(start_offs), fields, int(self.data.shape[0]))
            super()._build_tensors(start_offs, fields)

    return CheckedReader(path)


def _check_tensor_infos(gguf: Any, start: int, fields: list, size: int) -> None:
    spans = []
    for field in fields:
        _, name_data, _, dims, raw_type, offset = field.parts
        name = _label(bytes(name_data).decode("utf-8", errors="replace"))
        try:
            kind = gguf.GGMLQuantizationType(int(raw_type[0]))
        except ValueError:
            raise GgufError(f"tensor '{name}' has an unknown ggml type {int(raw_type[0])}") from None
        shape = [int(d) for d in dims.tolist()]
        block, nbytes = gguf.GGML_QUANT_SIZES[kind]
        count = math.prod(shape)
        if not shape or shape[0] % block:
            raise GgufError(f"tensor '{name}' ({kind.name}) has shape {list(reversed(shape))}, whose rows are not "
                            f"whole blocks of {block} values, or which the file cannot hold")
        lo = start + int(offset[0])
        hi = lo + count // block * nbytes
        if hi > size:
            raise GgufError(f"truncated GGUF file ({size} bytes): tensor '{name}' ({kind.name}, shape "
                            f"{list(reversed(shape))}) needs bytes {lo}..{hi}")
        spans.append((lo, hi, name))
    spans.sort()
    for (lo, hi, name), (next_lo, _, other) in zip(spans, spans[1:]):
        if hi > next_lo:
            raise GgufError(f"tensor '{name}' ends at byte {hi}, inside tensor '{other}' (from byte {next_lo}): "
                            "its byte size disagrees with its type and shape")


def _dequantize(t: Any, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi-1 of the first dim of block tensor `t`, dequantized to f32 a few MiB at a
    time (the gguf package's dequantizer makes several temporaries the size of its input)."""
    data = t.data.reshape(shape[0], -1)[lo:hi]  # the rows' blocks (they lie within a row)
    per_row = int(np.prod(shape[1:], dtype=np.int64))
    out = np.empty((hi - lo, per_row), np.float32)
    step = max(1, (1 << 22) // max(per_row, 1))  # about 16 MiB of f32 at a time
    for i in range(0, hi - lo, step):
        out[i:i + step] = _gguf().quants.dequantize(data[i:i + step], t.tensor_type).reshape(-1, per_row)
    return out.reshape((hi - lo, *shape[1:]))


def _dequantizes(gguf: Any, kind: Any) -> bool:
    """Whether the gguf package dequantizes tensors of type `kind` (tried on one zero block)."""
    size = gguf.GGML_QUANT_SIZES.get(kind)
    if size is None:
        return False
    try:
        gguf.quants.dequantize(np.zeros(size[1], np.uint8), kind)
    except Exception:  # noqa: BLE001 - NotImplementedError, or whatever a partial port raises
        return False
    return True


def readable_types() -> str:
    """The block types this installation reads (those the gguf package dequantizes), as text."""
    gguf = _gguf()
    return ", ".join(k.name for k in gguf.GGMLQuantizationType
                     if k.name not in FLOAT_TYPES and gguf.GGML_QUANT_SIZES.get(k, (1, 0))[0] > 1 and _dequantizes(gguf, k))


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------------------------------------
# The tensors as a weight store


def _reorder_heads(w: np.ndarray, axis: int, outer: int, inner: int, head: int) -> np.ndarray:
    """Along `axis`, heads in order (outer, inner) of `head` each -> order (inner, outer)."""
    shape = list(w.shape)
    split = shape[:axis] + [outer, inner, head] + shape[axis + 1:]
    return np.swapaxes(w.reshape(split), axis, axis + 1).reshape(shape)


def _unpermute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of llama.cpp's LlamaModel.permute (rows per head: halves interleaved -> split)."""
    rest = w.shape[1:]
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


@dataclass(frozen=True)
class _Plan:
    """How the store makes one IR tensor: the GGUF tensors it reads, how it joins them (None:
    there is one), then the steps that undo the converter's changes."""

    sources: tuple[str, ...]
    join: Callable[..., np.ndarray] | None = None
    steps: tuple[Callable[[np.ndarray], np.ndarray], ...] = ()

    @property
    def as_stored(self) -> bool:
        return self.join is None and not self.steps


class GgufWeights:
    """The weight store of a model read from a GGUF: addressed by llama.cpp's names, each param in
    the form its `op.param` expects (HF's values; see the module docstring). The interface is
    `strata.ir.weights.WeightStore`'s."""

    def __init__(self, g: GgufFile, config: Any, params: Mapping[str, tuple[tuple[int, ...], str]],
                 centred: set[str]) -> None:
        self.g, self.label, self.config = g, g.path, config
        self._shapes = {name: tuple(shape) for name, (shape, _) in params.items()}
        self._cache: dict[str, np.ndarray] = {}
        self._plans = {name: self._plan(name, name in centred) for name in params}
        used = {s for plan in self._plans.values() for s in plan.sources}
        # rope_freqs.weight was read into the config (its llama3 RoPE scaling); the multi-token-
        # prediction layers' tensors are not the language model's, as HF's mtp.* are not.
        known = {"rope_freqs.weight"} | {n for n in g.tensors for i in g.mtp_layers if n.startswith(f"blk.{i}.")}
        #: Stored tensors the model does not use, sorted.
        self.unused = sorted(n for n in g.tensors if n not in used and n not in known)

    # -- the undoing of the converter -----------------------------------------------------

    def _plan(self, name: str, centred: bool) -> _Plan:
        cfg, arch = self.config, self.g.arch
        parts = name.split(".")
        kind = parts[2] if parts[0] == "blk" and len(parts) > 2 else parts[0]
        if arch == "qwen3next" and kind == "ssm_in":
            prefix = name[: -len("ssm_in.weight")]
            return _Plan((prefix + "attn_qkv.weight", prefix + "attn_gate.weight"), self._regroup_qkvz)
        steps: list[Callable[[np.ndarray], np.ndarray]] = []
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            heads = cfg.num_heads if kind == "attn_q" else cfg.num_kv_heads
            steps.append(lambda w: _unpermute_rope(w, heads))
        if centred:
            steps.append(lambda w: np.asarray(w, dtype=np.float32) - np.float32(1.0))
        if kind == "ssm_a":
            steps.append(lambda w: np.log(np.negative(np.asarray(w, dtype=np.float32))))
        if arch in ("qwen35", "qwen35moe") and cfg.lin_k_heads != cfg.lin_v_heads:
            steps += self._v_heads(kind)
        return _Plan((name,), None, tuple(steps))

    def _v_heads(self, kind: str) -> list[Callable[[np.ndarray], np.ndarray]]:
        """Qwen3.5's value heads back from tiled to grouped order (the inverse of the converter's
        `_reorder_v_heads`: its (k, v-per-k) heads are read as (v-per-k, k))."""
        cfg = self.config
        hk, r, dv = cfg.lin_k_heads, cfg.lin_v_heads // cfg.lin_k_heads, cfg.lin_v_dim
        qk = 2 * cfg.lin_k_heads * cfg.lin_k_dim

        def rows(w: np.ndarray, head: int, skip: int = 0) -> np.ndarray:
            w = np.asarray(w)
            return np.concatenate([w[:skip], _reorder_heads(w[skip:], 0, r, hk, head)], axis=0)

        if kind in ("attn_qkv", "ssm_conv1d"):  # only the v rows / channels, after q and k
            return [lambda w: rows(w, dv, qk)]
        if kind == "attn_gate":
            return [lambda w: rows(w, dv)]
        if kind in ("ssm_beta", "ssm_alpha", "ssm_dt", "ssm_a"):
            return [lambda w: rows(w, 1)]
        if kind == "ssm_out":  # its input columns
            return [lambda w: _reorder_heads(np.asarray(w), 1, r, hk, dv)]
        return []

    def _regroup_qkvz(self, qkv: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Qwen3-Next's in_proj_qkvz, grouped per key head as [q | k | v | z], from llama.cpp's
        attn_qkv [q | k | v] and attn_gate z (the inverse of its converter's split)."""
        cfg = self.config
        hk, dk, vz = cfg.lin_k_heads, cfg.lin_k_dim, cfg.lin_v_heads // cfg.lin_k_heads * cfg.lin_v_dim
        cols = qkv.shape[1]
        if qkv.shape[0] != 2 * hk * dk + hk * vz or z.shape != (hk * vz, cols):
            raise GgufError(f"{self.label}: tensors attn_qkv {list(qkv.shape)} and attn_gate {list(z.shape)} do not "
                            f"split into {hk} key heads of q, k ({dk}) and v, z ({vz})")
        q = qkv[: hk * dk].reshape(hk, dk, cols)
        k = qkv[hk * dk: 2 * hk * dk].reshape(hk, dk, cols)
        v = qkv[2 * hk * dk:].reshape(hk, vz, cols)
        return np.concatenate([q, k, v, np.asarray(z).reshape(hk, vz, cols)], axis=1).reshape(-1, cols)

    # -- the store's interface --------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(n for n in self._plans if n in self)

    def __contains__(self, name: str) -> bool:
        plan = self._plans.get(name)
        return plan is not None and all(s in self.g.tensors for s in plan.sources)

    def stored_name(self, name: str) -> str:
        """The GGUF tensor that IR tensor `name` is read from (the first, when several)."""
        return self._plans[name].sources[0] if name in self._plans else name

    def sources(self, name: str) -> tuple[str, ...]:
        """The GGUF tensors that IR tensor `name` is made from."""
        return self._plans[name].sources if name in self._plans else (name,)

    def info(self, name: str) -> tuple[tuple[int, ...], str]:
        plan = self._plans[name]
        return tuple(self.get(name).shape), self.g.dtype_name(plan.sources[0]) if plan.as_stored else "f32"

    # -- the file's block types ---------------------------------------------------------------

    def block_formats(self) -> dict[str, tuple[str, tuple[int, ...] | None]]:
        """Each block-quantized tensor the model reads, by its GGUF name: (its ggml type, the
        order of its blocked axis as the IR sees it, or None: see `op.param`'s block_order)."""
        out: dict[str, tuple[str, tuple[int, ...] | None]] = {}
        for name, plan in self._plans.items():
            for src in plan.sources:
                fmt = self.g.format_name(src) if src in self.g.tensors else None
                if fmt is not None:
                    out[src] = (fmt, self._block_order(src))
        return out

    def _block_order(self, name: str) -> tuple[int, ...] | None:
        """Qwen3.5's ssm_out: its input columns are value heads, tiled in the file and grouped in
        the IR (`_v_heads`): viewed as [key heads, values per key, head dim], the file has them
        as [values per key, key heads, head dim]."""
        cfg = self.config
        if (self.g.arch in ("qwen35", "qwen35moe") and name.endswith(".ssm_out.weight")
                and cfg.lin_k_heads != cfg.lin_v_heads):
            return (cfg.lin_k_heads, cfg.lin_v_heads // cfg.lin_k_heads, cfg.lin_v_dim)
        return None

    def piece(self, name: str, axis: int, pieces: int, parts: Sequence[int], index: int) -> np.ndarray:
        """This rank's piece of tensor `name` (op.param's `split`, see `strata.ir.split`). A row
        split of a tensor used as stored reads (and dequantizes) only the piece's rows; any other
        is made whole (not kept), then cut."""
        plan = self._plans.get(name) or _Plan((name,))
        if plan.as_stored and axis == 0 and plan.sources[0] in self.g.tensors:
            src = plan.sources[0]
            total = self.g.shape(src)[0]
            sizes = list(parts) or [total // pieces]
            if sum(sizes) * pieces == total:
                out, start = [], 0
                for p in sizes:
                    out.append(self.g.load(src, (start + index * p, start + (index + 1) * p)))
                    start += pieces * p
                return out[0] if len(out) == 1 else np.concatenate(out)
        try:
            out = np.ascontiguousarray(split_piece(self._make(name), axis, pieces, parts, index))
        except ValueError as e:
            raise GgufError(f"{self.label}: tensor '{name}': {e}") from None
        out.flags.writeable = False
        return out

    def packed(self, name: str) -> tuple[int, np.ndarray, np.ndarray | None] | None:
        """Tensor `name` as the file stores it, for kernels that compute on the packed blocks:
        (its ggml type id, a read-only uint8 view [rows, row bytes] of the mapping, and None, or
        the row order that makes the IR's rows: llama's attn_q / attn_k rows are permuted in the
        file, so IR row i is stored row order[i]); None when the IR's tensor is not the stored
        one row for row (joined, converted, reordered within a row)."""
        plan = self._plans.get(name)
        if plan is None or plan.join is not None or name not in self.g.tensors:
            return None
        kind, rows = self.g.packed(name)
        if plan.as_stored:
            return kind, rows, None
        cfg, parts = self.config, name.split(".")
        rope_rows = len(parts) == 4 and parts[2] in ("attn_q", "attn_k") and parts[3] == "weight"
        if len(plan.steps) == 1 and self.g.arch == "llama" and rope_rows and len(self.g.shape(name)) == 2:
            heads = cfg.num_heads if parts[2] == "attn_q" else cfg.num_kv_heads
            order = _unpermute_rope(np.arange(rows.shape[0], dtype=np.int64), heads)
            return kind, rows, np.ascontiguousarray(order)
        return None

    def all_finite(self, name: str) -> bool:
        """Whether tensor `name` holds only finite values. A block-quantized tensor read from one
        stored tensor is dequantized a block of rows at a time and nothing is kept (the native
        kernels read its blocks; its values need never be in memory at once); any other is read
        as `get` gives it."""
        plan = self._plans.get(name) or _Plan((name,))
        src = plan.sources[0]
        if name in self._cache or plan.join is not None or src not in self.g.tensors or self.g.format_name(src) is None:
            chunks = [self.get(name).reshape(-1)]
        else:  # the steps of a block tensor permute rows at most (llama's q / k): finiteness is the stored one
            rows = self.g.shape(src)[0]
            step = max(1, (1 << 22) // max(1, math.prod(self.g.shape(src)[1:])))
            chunks = (self.g.load(src, (lo, min(rows, lo + step))) for lo in range(0, rows, step))
        for chunk in chunks:
            flat = chunk.reshape(-1)
            for i in range(0, flat.size, 1 << 22):
                if not np.isfinite(np.asarray(flat[i:i + (1 << 22)], dtype=np.float32)).all():
                    return False
        return True

    def get(self, name: str) -> np.ndarray:
        """Tensor `name` in the IR's form: a view of the file, or an array made once and kept."""
        if name not in self._cache:
            self._cache[name] = self._make(name)
        return self._cache[name]

    def _make(self, name: str) -> np.ndarray:
        plan = self._plans.get(name) or _Plan((name,))
        missing = [s for s in plan.sources if s not in self.g.tensors]
        if missing:
            raise GgufError(f"{self.label}: tensor '{missing[0]}' is missing")
        arrays = [self.g.load(s) for s in plan.sources]
        w = plan.join(*arrays) if plan.join is not None else arrays[0]
        shape = self._shapes.get(name)
        if shape is not None and w.shape != shape and [d for d in w.shape if d != 1] == [d for d in shape if d != 1]:
            w = w.reshape(shape)  # a size-1 dim that the converter squeezed (the conv1d's)
        for step in plan.steps:
            w = step(w)
        if not plan.as_stored:
            w = np.ascontiguousarray(w, dtype=np.float32)
            w.flags.writeable = False
        return w

    def check(self, expected: Mapping[str, tuple[tuple[int, ...], str]]) -> None:
        """Check that every tensor of `expected` (name -> (shape, dtype)) is there, of its shape."""
        for name, (shape, _) in expected.items():
            plan = self._plans.get(name) or _Plan((name,))
            for s in plan.sources:
                if s not in self.g.tensors:
                    raise GgufError(f"{self.label}: tensor '{s}' is missing; expected shape {list(shape)}"
                                    if plan.sources == (name,) else f"{self.label}: tensor '{s}' is missing")
            if plan.join is None:
                stored = self.g.shape(plan.sources[0])
                if [d for d in stored if d != 1] != [d for d in shape if d != 1]:
                    raise GgufError(f"{self.label}: tensor '{name}' has shape {list(stored)}, expected {list(shape)}")
            elif tuple(self.get(name).shape) != tuple(shape):
                raise GgufError(f"{self.label}: tensors {', '.join(plan.sources)} make '{name}' of shape "
                                f"{list(self.get(name).shape)}, expected {list(shape)}")

    def fingerprint(self) -> list[dict[str, object]]:
        """The file's name and size and the sha256 of its metadata and tensor infos (tensor data
        is read at run time and not hashed)."""
        return [{"file": self.label.name, "size": self.label.stat().st_size, "header_sha256": self.g.header_sha256}]
