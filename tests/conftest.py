"""Shared fixtures: tiny models of every family, as configs and as random checkpoints."""

from __future__ import annotations

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
