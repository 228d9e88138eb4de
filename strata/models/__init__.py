"""Model families: each a config reader, a builder of the module level and its tensor-name table.

A family plugs in from the side: nothing under strata/ir, dialects, passes, semantics,
targets or frontends imports this package; the pipeline finds a family here by the
`architectures` entry (or the `model_type`) of an HF config.

    config = read_config_dict(data, file, name)      # the family's own config class
    module = build_module(config)                    # the module-level program

Adding a family: write `strata/models/<family>.py` with a config reader, a builder
(`build(config) -> ModuleOp`) that composes standard block kinds, and its name table, then
list it in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp


@dataclass(frozen=True)
class Family:
    name: str
    architectures: tuple[str, ...]
    #: (parsed config.json, file name for errors, model name) -> the family's config.
    read_config: Callable[[Any, str, str], Any]
    #: (config, max_seq) -> the module-level program.
    build: Callable[..., ModuleOp]
    #: HF model_type -> architecture, for a config that names no architecture.
    model_types: Mapping[str, str]


def _llama() -> Family:
    from strata.models import llama_config
    from strata.models.llama import build_llama

    archs = llama_config.ARCHITECTURES
    return Family("llama", tuple(archs), llama_config.read_config, build_llama, {mt: a for a, mt in archs.items()})


def _qwen35() -> Family:
    from strata.models import qwen35

    return Family("qwen35", qwen35.ARCHITECTURES + tuple(qwen35.CONDITIONAL), qwen35.read_config, qwen35.build, {})


#: The families, each made on first use (their imports are not free).
FAMILIES: list[Callable[[], Family]] = [_llama, _qwen35]


def families() -> list[Family]:
    return [make() for make in FAMILIES]


def read_config(path: Any) -> Any:
    """The config at `path` (a model directory or its config.json), read by its family."""
    from strata.frontends.hf_config import read_config_file

    data, file, name = read_config_file(path)
    return read_config_dict(data, file, name)


def read_config_dict(data: Any, file: str, name: str) -> Any:
    """A parsed config.json (`file` labels errors), read by its family as model `name`."""
    from strata.frontends.hf_config import ConfigError, architecture_of

    arch, model_type = architecture_of(data, file)
    fams = families()
    if arch is None:
        if model_type is None:
            raise ConfigError(f"{file}: field 'architectures' is missing (and so is 'model_type')")
        found = [fam for fam in fams if model_type in fam.model_types]
        if not found:
            known = ", ".join(mt for fam in fams for mt in fam.model_types)
            raise ConfigError(f"{file}: unknown model_type {model_type!r} (supported: {known})")
        return found[0].read_config(data, file, name)
    for fam in fams:
        if arch in fam.architectures:
            return fam.read_config(data, file, name)
    known = ", ".join(a for fam in fams for a in fam.architectures)
    raise ConfigError(f"{file}: unknown architecture {arch!r} (supported: {known})")


def family_of(config: Any) -> Family:
    """The family whose builder takes `config` (by its architecture)."""
    arch = getattr(config, "arch", None)
    for fam in families():
        if arch in fam.architectures:
            return fam
    raise KeyError(f"no model family builds architecture {arch!r}")


def build_module(config: Any, max_seq: int | None = None) -> ModuleOp:
    """The module-level program of `config`, built by its family."""
    return family_of(config).build(config, max_seq=max_seq)


def save_random_checkpoint(config: Any, directory: str | Path, seed: int, dtype: str = "float32", shards: int = 1,
                           std: float = 0.02) -> Path:
    """A checkpoint of `config` with seeded random weights (`strata.quant.random_checkpoint`):
    its config.json and HF-named safetensors; returns the directory."""
    import dataclasses

    from strata.frontends.hf_config import write_hf_config
    from strata.quant.random_checkpoint import write_random_checkpoint

    def write_config(d: Path, stored: str) -> None:
        write_hf_config(dataclasses.replace(config, dtype=stored), d)

    return write_random_checkpoint(build_module(config), write_config, directory, seed, dtype, shards, std)
