"""CPU MoE benchmark: strata's generated numpy code against HF transformers (eager PyTorch) on a
cut-down Qwen3.6-35B-A3B.

    .venv/bin/python bench/cpu_moe.py [--cache-dir DIR] [--prompt 128] [--new 64] [--reps 5]

The model has Qwen3.6-35B-A3B's layer shapes (hidden 2048; Gated DeltaNet with 16 key and 32
value heads of 128, conv kernel 4; gated attention with 16 query and 2 KV heads of 256, partial
rotary 0.25, interleaved M-RoPE [11, 11, 10], rope_theta 1e7; sparse MoE with experts of 512 and
a shared expert of 512; vocab 248320, untied lm_head), cut to 4 layers (3 linear attention + 1
full attention) and 64 experts, top-8, fp32: about 7.3 GB. Its random weights (HF's init std
0.02; A_log and dt_bias given a trained model's spread, as the HF parity tests do) are written
once into the cache dir and reused. The experts are stored merged, as transformers 5 holds them
(`mlp.experts.gate_up_proj` [E, 2 I, H], `mlp.experts.down_proj` [E, H, I]): HF loads them as they
are, and strata memory-maps them (one-by-one experts would be stacked into memory at load).

Each engine lives in its own subprocess (so that its peak RSS, ru_maxrss, is its own) and warms
up (a prefill and a decode step); the engines are loaded one at a time. Then the parent
alternates their runs (--reps each) of a prefill of --prompt tokens and --new greedy decode
steps, context 256, on the same weights; the best prefill and decode time of each engine counts
(the vCPUs here slow down at random for seconds at a time; alternating exposes both engines to
the same spells). With --one-at-a-time each engine runs all its reps and exits before the other
loads (for machines where both engines' weights do not fit in memory at once).

Checked: the first token's logits (max |diff|, against the logits' scale) and how many of the
greedy ids agree; and that strata's decode reads only the routed experts (one more decode step
with each stacked expert tensor spied on: indexed only expert by expert, at most top-k distinct
experts per step).

The decode time is set against the memory roofline: the bytes of weights one decode token reads
(every tensor but the embedding, the experts' share top-k / E of theirs) over the copy bandwidth
measured here (np.copyto of 512 MiB, one slice per core, read + write bytes per second).

The last line is exactly
    decode_ratio=<strata/torch decode tok/s> prefill_ratio=<strata/torch prefill tok/s>
(HF time / strata time: above 1 means strata is faster).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import CTX, SEED, Engine  # noqa: E402

NAME = "qwen3.6-35b-a3b-4l-64e"


def qwen36_cut():
    from strata.models.qwen35 import Qwen35Config

    return Qwen35Config(
        arch="Qwen3_5MoeForCausalLM", name=NAME, vocab_size=248320, hidden_size=2048, num_layers=4,
        layer_types=("linear_attention",) * 3 + ("full_attention",), moe_layers=(True,) * 4,
        num_heads=16, num_kv_heads=2, head_dim=256, intermediate_size=0, rms_norm_eps=1e-6,
        rope_theta=1e7, rotary_dim=64, mrope_section=(11, 11, 10), mrope_interleaved=True,
        max_position_embeddings=262144, tie_word_embeddings=False, dtype="float32",
        lin_k_heads=16, lin_v_heads=32, lin_k_dim=128, lin_v_dim=128, conv_kernel=4,
        num_experts=64, top_k=8, moe_intermediate_size=512, shared_intermediate_size=512)


def merge_experts_and_perturb(directory: Path, seed: int) -> None:
    """Rewrite ``directory``'s model.safetensors (written expert by expert) with each layer's
    experts merged as transformers 5 holds them, and A_log / dt_bias given a realistic spread:
    decays exp(A_log) from ~0.3 to ~4.5 and biases of std 0.5 (as test_parity_hybrid_hf)."""
    import re

    from strata.ir.weights import SINGLE_FILE, SafetensorsFile, write_safetensors

    src = SafetensorsFile(directory / SINGLE_FILE)
    rng = np.random.default_rng(seed)
    experts: dict[str, dict[str, dict[int, np.ndarray]]] = {}
    tensors: dict[str, np.ndarray] = {}
    pattern = re.compile(r"(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight")
    for name in sorted(src.entries):
        m = pattern.fullmatch(name)
        if m:
            experts.setdefault(m[1], {}).setdefault(m[3], {})[int(m[2])] = src.array(name)
        elif name.endswith(".A_log"):
            x = src.array(name)
            tensors[name] = rng.uniform(-1.2, 1.5, x.shape).astype(x.dtype)
        elif name.endswith(".dt_bias"):
            x = src.array(name)
            tensors[name] = (0.5 * rng.standard_normal(x.shape)).astype(x.dtype)
        else:
            tensors[name] = src.array(name)  # a view of the map: copied when written
    for prefix, parts in experts.items():
        n = len(parts["gate"])
        gate = np.stack([parts["gate"][i] for i in range(n)])
        up = np.stack([parts["up"][i] for i in range(n)])
        tensors[f"{prefix}.gate_up_proj"] = np.concatenate((gate, up), axis=1)
        del gate, up
        tensors[f"{prefix}.down_proj"] = np.stack([parts["down"][i] for i in range(n)])
    tmp = directory / (SINGLE_FILE + ".tmp")
    write_safetensors(tmp, tensors, {"format": "pt"})
    del tensors, experts, src
    os.replace(tmp, directory / SINGLE_FILE)


def ensure_model(cache: Path) -> Path:
    """The random-weight model in ``cache``, written (atomically) on first use."""
    from strata.models import save_random_checkpoint

    def write(directory: Path) -> None:
        save_random_checkpoint(qwen36_cut(), directory, seed=SEED, dtype="float32")
        merge_experts_and_perturb(directory, seed=SEED + 1)

    return harness.ensure_model(cache, f"{NAME}-f32", write)


def weight_bytes_per_token(model_dir: Path) -> int:
    """Bytes of weights one decode step reads: every tensor but the embedding (one row of it),
    the routed experts' share (top-k / E) of the expert tensors."""
    from strata.pipeline import load_model

    model = load_model(model_dir)
    cfg = model.config
    store = model.open_weights(check=False, quiet=True)
    total = 0.0
    for name in store.names():
        if name == "token_embd.weight":
            continue
        shape, _ = store.info(name)
        nbytes = 4 * int(np.prod(shape))
        total += nbytes * cfg.top_k / cfg.num_experts if "_exps" in name else nbytes
    return int(total)


# ---------------------------------------------------------------------------------------------
# Engines (each runs in its own subprocess; see harness.engine_main)


class _Spy(np.ndarray):
    """An expert tensor that records how it is indexed (by one expert id, or otherwise)."""

    log: list

    def __getitem__(self, key):
        self.log.append(int(key) if isinstance(key, (int, np.integer)) else "other")
        return super().__getitem__(key)


def check_routed_experts(model, engine: Engine) -> dict:
    """Run one more decode step with each stacked expert tensor [E, M, K] spied on: how many
    distinct experts each tensor read, and whether any was read other than expert by expert."""
    spies = {}
    for attr, value in list(vars(model).items()):
        if attr.endswith("_exps") or "_exps_" in attr:
            spy = value.view(_Spy)
            spy.log = []
            setattr(model, attr, spy)
            spies[attr] = (value, spy)
    engine.decode(engine.ids[-1], engine.n_prompt + engine.n_new - 1)
    distinct = [len({k for k in spy.log if k != "other"}) for _, spy in spies.values()]
    other = sum(spy.log.count("other") for _, spy in spies.values())
    for attr, (value, _) in spies.items():
        setattr(model, attr, value)
    return {"expert_tensors": len(spies), "max_distinct": max(distinct, default=0), "other_reads": other}


def strata_engine(model_dir: Path, compiled: Path, n_prompt: int, n_new: int) -> Engine:
    model, prompt = harness.strata_model(model_dir, compiled, n_prompt)

    def prefill():
        model.reset()  # a fresh sequence: zero conv and recurrent state
        return model.prefill(prompt, 0)[-1]

    def decode(token, pos):
        return model.decode(token, pos)[-1]

    prefill()  # warm-up: the allocator, the kernels' first calls, the weight pages the prompt routes to
    decode(int(prompt[8]), n_prompt)
    engine = Engine(prefill, decode, n_prompt, n_new)
    engine.final_checks = lambda: {"routed": check_routed_experts(model, engine)}
    return engine


def torch_engine(model_dir: Path, n_prompt: int, n_new: int) -> Engine:
    import inspect

    import torch

    model, prompt = harness.torch_model(model_dir, n_prompt)
    # transformers 5.24 renamed past_key_values to cache (the old name warns until 5.40)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = {}

    def run(ids, **kw):
        with torch.inference_mode():
            out = model(ids, use_cache=True, **kw)
        cache[key] = out[key]
        return out.logits[0, -1].numpy()

    def prefill():
        cache.clear()  # a fresh sequence
        return run(prompt, logits_to_keep=1)

    def decode(token, pos):
        return run(torch.tensor([[token]]), **cache)

    prefill()  # warm-up
    decode(int(prompt[0, 8]), n_prompt)
    engine = Engine(prefill, decode, n_prompt, n_new)
    engine.extra = {"experts_implementation": str(getattr(model.config, "_experts_implementation", None))}
    return engine


def main() -> int:
    p = harness.arg_parser(__doc__)
    p.add_argument("--one-at-a-time", action="store_true",
                   help="run each engine's reps and end it before loading the other (less memory, no alternation)")
    args = p.parse_args()
    if args.engine:
        return harness.engine_main(args, strata_engine, torch_engine)
    harness.check_lengths(args)
    if args.prompt < 9 or args.new < 1:
        raise SystemExit("--prompt must be at least 9 (the warm-up's) and --new at least 1")

    from strata.pipeline import cached_compile, load_model

    cache = Path(args.cache_dir)
    model_dir = ensure_model(cache)
    t0 = time.perf_counter()
    compiled, why = cached_compile(load_model(model_dir), "cpu", cache / f"cpu-{NAME}", {"ctx": CTX, "flash_attn": True})
    print(f"compile ({'built: ' + why if why else 'reused'}): {time.perf_counter() - t0:.2f} s", file=sys.stderr)

    bw = harness.copy_bandwidth()
    wbytes = weight_bytes_per_token(model_dir)
    results = harness.run_engines(Path(__file__), model_dir, compiled, args, one_at_a_time=args.one_at_a_time,
                                  announce=True)

    cfg = qwen36_cut()
    print(f"model: Qwen3.6-35B-A3B layer shapes, 4 layers (3 linear + 1 full attention), {cfg.num_experts} experts "
          f"top-{cfg.top_k}, fp32 random weights; {wbytes / 1e9:.2f} GB read per decode token, ctx {CTX}; "
          f"HF experts implementation: {results['torch'].get('experts_implementation')}")
    rates = harness.report_speed(results, args, bw, wbytes, prefill_ms=True)
    routed = results["strata"].get("routed", {})
    print(f"strata routing: a decode step read {routed.get('max_distinct')} distinct experts at most from each of "
          f"{routed.get('expert_tensors')} expert tensors ({cfg.top_k} routed of {cfg.num_experts}); "
          f"reads other than expert by expert: {routed.get('other_reads')}")
    diff, same = harness.parity(results)
    b = results["torch"]["first_logits"]
    print(f"parity: max |logits diff| after prefill {diff:.2e} (logits max |x| {float(np.max(np.abs(b))):.2f}, "
          f"std {float(np.std(b)):.2f}); greedy ids agree on {same}/{args.new}")
    harness.print_ratios(rates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
