"""The built-in default model: a tiny random llama with a real vocabulary (`default_vocab`: a
byte-level BPE of 512 tokens and ChatML's chat template), so that strata runs, text in and text
out, with no download. Its weights are random: what it writes is gibberish."""

from __future__ import annotations

import shutil
from pathlib import Path

from strata.artifacts.directory import locked, new_directory
from strata.errors import StrataError
from strata.ir.weights import INDEX_FILE, SINGLE_FILE
from strata.models import save_random_checkpoint
from strata.models.default_vocab import DATA_DIR, FILES, VOCAB_SIZE
from strata.models.llama_config import LlamaConfig

DEFAULT_MODEL_NAME = "default-llama"
DEFAULT_SEED = 0

DEFAULT_CONFIG = LlamaConfig(
    arch="LlamaForCausalLM",
    name=DEFAULT_MODEL_NAME,
    vocab_size=VOCAB_SIZE,
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,  # grouped-query attention, so that GQA paths are exercised by default
    head_dim=16,
    intermediate_size=160,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    rope_scaling=None,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    attention_bias=False,
    o_bias=False,
    qk_norm=False,
    dtype="float32",
)


def _has_weights(directory: Path) -> bool:
    return (directory / "config.json").is_file() and ((directory / SINGLE_FILE).is_file()
                                                      or (directory / INDEX_FILE).is_file())


def _is_complete(directory: Path) -> bool:
    return _has_weights(directory) and all((directory / f).is_file() for f in FILES)


def ensure_default_model(root: Path) -> Path:
    """Return ``root/default-llama``, writing its config, weights (seed 0) and tokenizer files on
    first use (and over a default model of an earlier strata, which had no tokenizer).

    The files are written through the atomic directory writer, so a crash never leaves a
    half-written model, and concurrent callers take turns (the second finds it complete)."""
    final = Path(root) / DEFAULT_MODEL_NAME
    if _is_complete(final):
        return final
    with locked(final):
        if _is_complete(final):
            return final
        if final.exists() and not (_has_weights(final) and not (final / "tokenizer.json").exists()):
            raise StrataError(f"{final}: exists but holds no complete model; delete it to rebuild")
        with new_directory(final) as tmp:
            save_random_checkpoint(DEFAULT_CONFIG, tmp, seed=DEFAULT_SEED)
            for name in FILES:
                shutil.copyfile(DATA_DIR / name, tmp / name)
    return final
