"""`strata demo`: the main job on the built-in default model (a tiny llama with seeded random
weights and a real 512-token vocabulary, written on first use): its listing, its prefill trace,
then a compile for the CPU and text generated from a prompt, greedily and sampled with a seed.
The weights are random: the text is gibberish."""

from __future__ import annotations

import sys
from pathlib import Path

from strata.runtime.sampling import SamplingParams
from strata.runtime.commands.textgen import TextPrompt, generate_text

PROMPT = "Once upon a time"


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
    print(f"== strata generate --prompt {PROMPT!r} --max-new-tokens 16   (random weights: gibberish)", flush=True)
    generate_text(model_dir, TextPrompt(PROMPT), 16)
    print(f"== strata generate --prompt {PROMPT!r} --max-new-tokens 16 --temperature 0.8 --top-p 0.95 --seed 1",
          flush=True)
    generate_text(model_dir, TextPrompt(PROMPT), 16, SamplingParams(temperature=0.8, top_p=0.95, seed=1))
