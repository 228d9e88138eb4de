"""Shared pytest fixtures and paths."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seeds"
EXAMPLES = ROOT / "examples"
