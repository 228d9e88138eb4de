"""Model families: each a config reader, a builder of the module level and its tensor-name table.

A family plugs in from the side: nothing under strata/ir, dialects, passes, semantics or
targets imports this package; the pipeline and the CLI find a family here by the
`architectures` entry of an HF config.

Adding a family: write `strata/models/<family>.py` with a config reader, a builder
(`build(config) -> ModuleOp`) that composes standard block kinds, and its name table, then
list it in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


def _llama() -> Family:
    from strata.frontends.hf_config import ARCHITECTURES, from_hf_dict
    from strata.models.llama import build_llama

    return Family("llama", tuple(ARCHITECTURES), lambda data, file, name: from_hf_dict(data, file, name), build_llama)


def _qwen35() -> Family:
    from strata.models import qwen35

    return Family("qwen35", qwen35.ARCHITECTURES + tuple(qwen35.CONDITIONAL), qwen35.read_config, qwen35.build)


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

    arch = architecture_of(data, file)
    for fam in families():
        if arch in fam.architectures:
            return fam.read_config(data, file, name)
    known = ", ".join(a for fam in families() for a in fam.architectures)
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
