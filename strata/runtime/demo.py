"""`strata demo`: the main job on the built-in default model (a tiny llama with seeded random
weights, written on first use): its listing, its prefill trace, then a compile for the CPU and
a greedy generation."""

from __future__ import annotations

import sys
from pathlib import Path

from strata.runtime.engine import run_prompt


def run_demo(root: str | Path) -> None:
    from strata.models.default import ensure_default_model
    from strata.pipeline import load_model
    from strata.pipeline.views import Lowering, listing, trace

    model_dir = str(ensure_default_model(Path(root)))
    print(f"== default model: {model_dir}")
    model = load_model(model_dir)
    print("== strata inspect")
    sys.stdout.write(listing(model))
    print("== strata trace --entry prefill --tokens 5 --ctx 256 --kv-pad 256", flush=True)
    sys.stdout.write(trace(model, Lowering("prefill", 5, 0, 256, 256)))
    print("== strata run --prompt-ids 1,2,3,4,5 --max-new-tokens 16", flush=True)
    run_prompt(model_dir, [1, 2, 3, 4, 5], 16)
