"""Shared fixtures: tiny models of every family, as configs and as random checkpoints."""

from __future__ import annotations

import os

# The CUDA target's kernel tests (tests/targets/cuda) run Triton's interpreter on the CPU. Triton
# reads TRITON_INTERPRET when it defines its @triton.jit functions (its own tl.sum, ... included),
# and torch or transformers may import triton while other tests are collected, so it is set here,
# before any test module is imported. tests/targets/cuda/test_aot.py compiles without it.
os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path

import pytest

from support import TINY, write_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One random f32 checkpoint per tiny config of `support.TINY`, written once per session."""
    root = tmp_path_factory.mktemp("tiny")
    return {name: write_checkpoint(cfg, root / name, seed=3) for name, cfg in TINY.items()}


@pytest.fixture(params=sorted(TINY))
def family(request) -> str:
    """Each tiny family in turn."""
    return request.param
