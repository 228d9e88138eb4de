"""The w4a16 judge on a small random Llama: calibrate -> smoothquant ->
quantize-w4a16 (block 128) -> ONNX Runtime on the int4 graph (MatMulNBits for every projection
and the head), against the blueprint level under the w4a16 recipe and the f32 op level.

Prints, per variant (with and without SmoothQuant): the largest per-projection gap between ORT's
MatMulNBits and numpy's dequant-matmul, ORT's logits against the op level on the dequantized
weights, and the gate metrics of the first token.

Last line: `rank_of_ort_argmax=<blueprint vs ORT> rel_rmse_affine=<blueprint vs f32 op level>
rel_rmse_affine_vs_ort=<blueprint vs ORT> ort_vs_dequant=<...>` for the SmoothQuant variant.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from strata.quant.calibrate import calibrate, random_prompts, ranges_bytes  # noqa: E402
from strata.models.llama_config import LlamaConfig  # noqa: E402
from strata.models import save_random_checkpoint  # noqa: E402
from strata.pipeline import load_model  # noqa: E402
from strata.verify.onnx_judge import check_projections, judge_w4a16  # noqa: E402
from strata.quant.w4a16 import W4A16Weights, plan_model, smoothed_weights, write_w4a16  # noqa: E402

SMALL = LlamaConfig(
    arch="LlamaForCausalLM", name="small-llama-w4a16", vocab_size=512, hidden_size=256, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=64, intermediate_size=512, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
    max_position_embeddings=256, tie_word_embeddings=False, attention_bias=False, o_bias=False, qk_norm=False,
    dtype="float32")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--std", type=float, default=0.05, help="the random matrices' std")
    args = ap.parse_args()
    prompt = [11, 305, 42, 7, 260, 99, 1, 480]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        save_random_checkpoint(SMALL, root / "model", seed=args.seed, std=args.std)
        model = load_model(root / "model")
        store = model.open_weights(quiet=True)
        t = time.perf_counter()
        ranges = calibrate(model, random_prompts(8, 16, SMALL.vocab_size, seed=0), store)
        (root / "ranges.json").write_bytes(ranges_bytes(ranges))
        print(f"calibrate: 8 prompts x 16 tokens in {time.perf_counter() - t:.2f} s")
        results = {}
        for label, rng in (("plain", None), ("smoothquant", root / "ranges.json")):
            plan = plan_model(model, rng, 0.5, 128)
            write_w4a16(model, plan, root / label, store)
            stage = W4A16Weights.open(root / label)
            proj = max(check_projections(stage).values())
            r = judge_w4a16(model, store, smoothed_weights(store, plan), stage, prompt)
            results[label] = (r, proj)
            bf, bo, of = r["blueprint_vs_f32"], r["blueprint_vs_ort"], r["ort_vs_f32"]
            print(f"{label:12s} MatMulNBits vs numpy (max rel) {proj:.2e}  ORT vs op level on dequantized weights "
                  f"{r['ort_vs_dequant']:.2e}")
            print(f"{'':12s} blueprint w4a16 vs f32 op level: rank {bf['rank_of_ort_argmax']} rel_rmse_affine "
                  f"{bf['rel_rmse_affine']:.4f} | vs ORT: rank_of_ort_argmax {bo['rank_of_ort_argmax']} "
                  f"rel_rmse_affine {bo['rel_rmse_affine']:.4f} | ORT vs f32: {of['rel_rmse_affine']:.4f}")
    r, proj = results["smoothquant"]
    print(f"rank_of_ort_argmax={r['blueprint_vs_ort']['rank_of_ort_argmax']} "
          f"rel_rmse_affine={r['blueprint_vs_f32']['rel_rmse_affine']:.4f} "
          f"rel_rmse_affine_vs_ort={r['blueprint_vs_ort']['rel_rmse_affine']:.4f} "
          f"ort_vs_dequant={r['ort_vs_dequant']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
