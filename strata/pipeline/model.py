"""A model read from disk: its config (read by its family), its module level (built once)
and where its weights are.

    model = load_model("models/tiny")       # a directory, its config.json, or a GGUF file
    store = model.open_weights()            # checked against the module's params

Reading goes one way, downward: the file's JSON (`strata.frontends.hf_config`, or a GGUF's
metadata as the same fields, `strata.frontends.gguf`), then the family that its
`architectures` names (`strata.models`) reads the fields and builds the module level.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.artifacts.stage import sha256_file
from strata.dialects.instances import TensorInstance, find_model, instantiate
from strata.errors import StrataError, warn
from strata.ir.weights import Composite, WeightStore
from strata.models import build_module, read_config, read_config_dict


def model_root(path: str | Path) -> Path:
    """The model directory for a directory or a `config.json` path."""
    p = Path(path)
    return p.parent if p.is_file() else p


#: Beside config.json and the safetensors, the files of an HF model directory that a loader reads.
_MODEL_SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                     "generation_config.json", "chat_template.jinja", "chat_template.json", "vocab.json",
                     "merges.txt")


def model_files(path: str | Path) -> dict[Path, str]:
    """The files a model is read from (a GGUF file; a directory's config.json, safetensors, their
    index and tokenizer files), each with what it is for messages: what no output may replace."""
    from strata.frontends.gguf import is_gguf

    if is_gguf(path):
        return {Path(path): f"the model's GGUF file {Path(path).name}"}
    root = model_root(path)
    names = ["config.json", *_MODEL_SIDE_FILES]
    try:
        names += sorted(p.name for p in root.iterdir() if p.name.endswith((".safetensors", ".safetensors.index.json")))
    except OSError:
        pass  # no directory: nothing of it to protect (the load reports it)
    return {root / name: f"the model's {name}" for name in names if (root / name).exists()}


@dataclass
class Model:
    """A model read from disk: its config, and its module level built once."""

    root: Path
    config: Any
    module: ModuleOp
    #: The block size of an fp8 block-quantized checkpoint (its quantization_config), else None.
    fp8_block: tuple[int, int] | None = None
    #: The GGUF file the model was read from (`strata.frontends.gguf.GgufFile`), else None.
    gguf: Any = None
    _params: dict[str, TensorInstance] | None = field(default=None, repr=False)
    _tensors: list[TensorInstance] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.config.name)

    @property
    def source(self) -> Path:
        """What the model was read from, for messages: its GGUF file, or its directory."""
        return self.gguf.path if self.gguf is not None else self.root

    @property
    def model_op(self):
        return find_model(self.module)

    def param_instances(self) -> list[TensorInstance]:
        """Every param instance of the model (a tied one too), from one walk of its blocks."""
        if self._tensors is None:
            self._tensors = [t for t in instantiate(self.model_op).tensors() if t.kind == "param"]
        return self._tensors

    def params(self) -> dict[str, TensorInstance]:
        """Every distinct param (tied ones once), by its llama.cpp name."""
        if self._params is None:
            self._params = {t.ggml: t for t in self.param_instances() if t.tied_from is None}
        return self._params

    def weight_names(self) -> tuple[dict[str, str], set[str], dict[str, Composite]]:
        """(stored HF name -> IR name, the stored names the model knowingly ignores, the IR
        tensors assembled from several stored ones)."""
        tensors = self.param_instances()
        names = {t.hf: t.ggml for t in tensors if t.tied_from is None and "*" not in t.hf and not t.hf_merged}
        composites = {t.ggml: composite_of(t) for t in tensors if "*" in t.hf or t.hf_merged}
        # A tied model's checkpoint may still carry the tied copy (lm_head.weight).
        ignore = {t.tied_from for t in tensors if t.tied_from is not None}
        # What a family's checkpoints carry besides the language model (a vision tower, MTP heads).
        ignored = self.model_op.attributes.get("ignored_weights")
        if ignored is not None:
            ignore |= {a.data for a in ignored.data}
        return names, ignore, composites

    def open_weights(self, check: bool = True, quiet: bool = False) -> WeightStore:
        """The model's weight store, addressed by IR names; checked against the params."""
        expected = {name: (t.shape, t.dtype) for name, t in self.params().items()}
        if self.gguf is not None:
            from strata.frontends.gguf import GgufWeights

            store = GgufWeights(self.gguf, self.config, expected, self.centred_norms())
        else:
            names, ignore, composites = self.weight_names()
            store = WeightStore.open(self.root, names, ignore, composites, fp8_block=self.fp8_block)
        if check:
            store.check(expected)
        if store.unused and not quiet:
            shown = ", ".join(f"'{n}'" for n in store.unused[:3]) + (", ..." if len(store.unused) > 3 else "")
            warn(f"{store.label}: {len(store.unused)} stored tensor(s) are not used by this model ({shown})")
        return store

    def input_files(self) -> dict[Path, str]:
        """The files the model is read from (see `model_files`)."""
        return model_files(self.gguf.path if self.gguf is not None else self.root)

    @property
    def cache_root(self) -> Path:
        """Where `strata run` keeps compiled stages by default: `.strata-cache` next to the
        checkpoint, one folder per GGUF file (files that share a folder do not share a cache)."""
        cache = self.root / ".strata-cache"
        return cache / self.gguf.path.name if self.gguf is not None else cache

    def centred_norms(self) -> set[str]:
        """The zero-centred norm weights (used as 1 + w: the op level's `plus_one`)."""
        return {inst.params["weight"].ggml for inst in instantiate(self.model_op).walk()
                if inst.attr("weight_offset") is not None and "weight" in inst.params}

    def config_fingerprint(self) -> dict[str, str]:
        """The file that gave the config and its sha256 (a GGUF's: of its metadata and tensor infos)."""
        if self.gguf is not None:
            return {"file": self.gguf.path.name, "header_sha256": self.gguf.header_sha256}
        config = self.root / "config.json"
        return {"file": config.name, "sha256": sha256_file(config)}


#: The quantization_config fields read, and the one format and block size supported.
FP8_FMT = "e4m3"
FP8_BLOCK = [128, 128]


def fp8_block_of(root: Path) -> tuple[int, int] | None:
    """The block size of an fp8 block-quantized checkpoint, read off the `quantization_config`
    of its config.json (DeepSeek-V3's and Qwen's FP8 checkpoints: `quant_method: fp8`,
    `fmt: e4m3`, `weight_block_size: [128, 128]`; transformers' defaults for a missing `fmt`
    or `weight_block_size` are these), or None for a checkpoint without one. The activation
    scheme is not read: strata computes in the IR's types on the dequantized weights."""
    from strata.frontends.hf_config import ConfigError

    path = root / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None  # not ours to report: the config was read already, or the store was opened without one
    q = config.get("quantization_config") if isinstance(config, dict) else None
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ConfigError(f"{path}: field 'quantization_config' must be an object")
    method = q.get("quant_method")
    if method != "fp8":
        raise ConfigError(f"{path}: field 'quantization_config.quant_method' is {method!r}; "
                          "strata reads only 'fp8' (block-quantized e4m3) checkpoints")
    fmt = q.get("fmt", FP8_FMT)
    if fmt != FP8_FMT:
        raise ConfigError(f"{path}: field 'quantization_config.fmt' is {fmt!r}; strata reads only {FP8_FMT!r}")
    block = q.get("weight_block_size", FP8_BLOCK)
    if block != FP8_BLOCK or not all(type(b) is int for b in block):
        raise ConfigError(f"{path}: field 'quantization_config.weight_block_size' is {block!r}; "
                          f"strata reads only {FP8_BLOCK}")
    return FP8_BLOCK[0], FP8_BLOCK[1]


def composite_of(t: TensorInstance) -> Composite:
    """How the store assembles a param stored in pieces (see module.param)."""
    stack = tuple(t.hf.replace("*", str(i)) for i in range(t.shape[0])) if "*" in t.hf else ()
    merged, part, parts = None, 0, 1
    if t.hf_merged:
        merged, _, which = t.hf_merged.rpartition(":")
        first, _, count = which.partition("/")
        part, parts = int(first), int(count)
    return Composite(stack=stack, merged=merged, part=part, parts=parts, axis=1)


def load_config(path: str | Path):
    """The config at `path` (a model directory, its config.json, or a GGUF file), read by the
    family its `architectures` names."""
    from strata.frontends.gguf import GgufFile, is_gguf

    return gguf_config(GgufFile(path)) if is_gguf(path) else read_config(path)


def gguf_config(g: Any) -> Any:
    """The family config of a GGUF file (`strata.frontends.gguf.GgufFile`), named after its stem:
    its metadata read as the HF fields they stand for, then by the family."""
    import dataclasses

    from strata.frontends.gguf import GgufError
    from strata.frontends.gguf_config import config_overrides, gguf_message, hf_config_dict
    from strata.frontends.hf_config import ConfigError

    try:
        config = read_config_dict(hf_config_dict(g), str(g.path), g.path.stem)
    except ConfigError as e:  # the dict's fields come from the GGUF's keys: name those
        raise GgufError(gguf_message(g, str(e))) from None
    return dataclasses.replace(config, **config_overrides(g))


def load_model(path: str | Path, max_seq: int | None = None) -> Model:
    """Read the config at `path` (a model directory, its config.json, or a GGUF file) and build
    the module level (once)."""
    from strata.frontends.gguf import GgufFile, is_gguf

    gguf = GgufFile(path) if is_gguf(path) else None
    config = gguf_config(gguf) if gguf is not None else read_config(path)
    module = build_module(config, max_seq=max_seq)
    module.verify()
    root = model_root(path)
    model = Model(root, config, module, fp8_block=None if gguf else fp8_block_of(root), gguf=gguf)
    if gguf is not None:
        record_block_formats(model)
    if gguf is None and stores_another_head(model):
        # transformers does the same: a checkpoint's own lm_head wins over the tie
        warn(f"{root}: config.json ties the lm_head to the embedding (tie_word_embeddings), but the checkpoint "
             "stores another lm_head; using the stored one, as transformers does")
        config = dataclasses.replace(config, tie_word_embeddings=False)
        module = build_module(config, max_seq=max_seq)
        module.verify()
        model = Model(root, config, module, fp8_block=model.fp8_block)
    return model


def record_block_formats(model: Model) -> None:
    """Stamp a GGUF's block types on the module level's model: `ggml_formats` (ggml tensor name
    -> its ggml type, for every block-quantized tensor the model reads) and `ggml_block_orders`
    (name -> the order of its blocked axis, where the store reorders it). The op level reads
    them (`op.param`'s `format`, ggml-cpu's quantized activations)."""
    from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, StringAttr, i64

    from strata.frontends.gguf import GgufWeights

    expected = {name: (t.shape, t.dtype) for name, t in model.params().items()}
    formats = GgufWeights(model.gguf, model.config, expected, model.centred_norms()).block_formats()
    if not formats:
        return
    op = model.model_op
    op.attributes["ggml_formats"] = DictionaryAttr({n: StringAttr(f) for n, (f, _) in sorted(formats.items())})
    orders = {n: DenseArrayBase.from_list(i64, o) for n, (_, o) in sorted(formats.items()) if o is not None}
    if orders:
        op.attributes["ggml_block_orders"] = DictionaryAttr(orders)


def stores_another_head(model: Model) -> bool:
    """Whether a tied model's checkpoint stores the tied copy (lm_head.weight) with other values
    than the tensor it is tied to."""
    import numpy as np

    tied = [t for t in model.param_instances() if t.tied_from is not None]
    if not tied:
        return False
    try:
        store = WeightStore.open(model.root)
    except (StrataError, OSError):  # no or unreadable weights: the tie is all there is; open_weights reports it
        return False
    stored = {name: f for f in store.files for name in f.entries}
    for t in tied:
        if t.tied_from in stored and t.hf in stored:
            a, b = stored[t.tied_from].array(t.tied_from), stored[t.hf].array(t.hf)
            if a.shape == b.shape and not np.array_equal(a, b):
                return True
    return False


