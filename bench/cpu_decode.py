"""CPU decode benchmark: strata's generated numpy code against HF transformers (eager PyTorch).

    .venv/bin/python bench/cpu_decode.py [--cache-dir DIR] [--prompt 128] [--new 64]

A Qwen3-0.6B-shaped model (28 layers, hidden 1024, 16 heads, 8 KV heads, head_dim 128,
intermediate 3072, vocab 151936, tied embeddings) with random fp32 weights, written once as
safetensors into the cache dir and reused. Each engine lives in its own subprocess (so that
its peak RSS, ru_maxrss, is its own) and warms up; then the parent alternates their runs
(--reps each) of a prefill of --prompt tokens and --new greedy decode steps, context 256,
on the same weights. The best prefill and decode time of each engine counts: the vCPUs of
the machine this was written on slow down 5x for seconds at a time, at random, and
alternating runs exposes both engines to the same spells. The decode time is set against
the memory roofline: the bytes of weights read per token over the copy bandwidth measured
here (np.copyto of 512 MiB, one slice per core, STREAM-style read + write bytes per second).

The last line is exactly
    decode_ratio=<strata/torch decode tok/s> prefill_ratio=<strata/torch prefill tok/s>
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import CTX, SEED, Engine  # noqa: E402


def qwen3_06b_shaped():
    from strata.models.llama_config import LlamaConfig

    return LlamaConfig(
        arch="Qwen3ForCausalLM", name="qwen3-0.6b-shaped", vocab_size=151936, hidden_size=1024,
        num_layers=28, num_heads=16, num_kv_heads=8, head_dim=128, intermediate_size=3072,
        rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None, max_position_embeddings=40960,
        tie_word_embeddings=True, attention_bias=False, o_bias=False, qk_norm=True, dtype="float32",
    )


def ensure_model(cache: Path) -> Path:
    """The random-weight model in ``cache``, written (atomically) on first use."""
    from strata.models import save_random_checkpoint

    return harness.ensure_model(
        cache, "qwen3-0.6b-shaped-f32",
        lambda d: save_random_checkpoint(qwen3_06b_shaped(), d, seed=SEED, dtype="float32"))


def weight_bytes_per_token(model_dir: Path) -> int:
    """Bytes of weights one decode step reads: every matrix and norm, the tied embedding
    once (as the output projection; the embedding lookup reads one row)."""
    from strata.ir.weights import WeightStore

    store = WeightStore.open(model_dir)
    return sum(store.get(n).nbytes for n in store.names())


# ---------------------------------------------------------------------------------------------
# Engines (each runs in its own subprocess; see harness.engine_main)


def strata_engine(model_dir: Path, compiled: Path, n_prompt: int, n_new: int) -> Engine:
    model, prompt = harness.strata_model(model_dir, compiled, n_prompt)
    # warm-up: touch every weight page and the allocator
    model.prefill(prompt[:8], 0)
    model.decode(int(prompt[8]), 8)
    return Engine(lambda: model.prefill(prompt, 0)[-1], lambda t, pos: model.decode(t, pos)[-1], n_prompt, n_new)


def torch_engine(model_dir: Path, n_prompt: int, n_new: int) -> Engine:
    import torch

    model, prompt = harness.torch_model(model_dir, n_prompt)
    cache = {}

    def prefill():
        with torch.inference_mode():
            out = model(prompt, use_cache=True, logits_to_keep=1)
        cache["past"] = out.past_key_values
        return out.logits[0, -1].numpy()

    def decode(token, pos):
        with torch.inference_mode():
            out = model(torch.tensor([[token]]), past_key_values=cache["past"], use_cache=True)
        cache["past"] = out.past_key_values
        return out.logits[0, -1].numpy()

    with torch.inference_mode():  # warm-up
        out = model(prompt[:, :8], use_cache=True)
        model(prompt[:, 8:9], past_key_values=out.past_key_values, use_cache=True)
    return Engine(prefill, decode, n_prompt, n_new)


def main() -> int:
    args = harness.arg_parser(__doc__).parse_args()
    if args.engine:
        return harness.engine_main(args, strata_engine, torch_engine)
    harness.check_lengths(args)

    from strata.pipeline import cached_compile, load_model

    cache = Path(args.cache_dir)
    model_dir = ensure_model(cache)
    t0 = time.perf_counter()
    compiled, _ = cached_compile(load_model(model_dir), "cpu", cache / "cpu", {"ctx": CTX, "flash_attn": True})
    print(f"compile (or reuse): {time.perf_counter() - t0:.2f} s", file=sys.stderr)

    bw = harness.copy_bandwidth()
    wbytes = weight_bytes_per_token(model_dir)
    results = harness.run_engines(Path(__file__), model_dir, compiled, args)

    print(f"model: Qwen3-0.6B-shaped, fp32 random weights, {wbytes / 1e9:.2f} GB read per decode token, ctx {CTX}")
    rates = harness.report_speed(results, args, bw, wbytes)
    diff, same = harness.parity(results)
    print(f"parity: max |logits diff| after prefill {diff:.2e}; greedy ids agree on {same}/{args.new}")
    harness.print_ratios(rates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
