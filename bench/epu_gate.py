"""Quadric Chimera's gate on examples/sarashina2.2-3b cut to N layers (random weights): the EPU compile
(calibrate -> smoothquant -> w4a16 -> fixed -> cpp), the g++ build, the driver's first token
against ONNX Runtime on the same int4 graph.

    python bench/epu_gate.py [--layers 4] [--workdir DIR] [--prompt 9,803,301,8880,369,2,8]

Last line: `rank_of_ort_argmax=.. rel_rmse_affine=.. topk_overlap=.. compile_s=.. build_s=..
run_s=..` (the issue's bar: rank 0 and rel_rmse_affine <= 0.045 with a g++ build under 60 s;
Chimera's best build reached 0.0448).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from strata.dialects import parse_ir  # noqa: E402
from strata.targets.epu.build import build_epu, run_epu  # noqa: E402
from strata.targets.epu.stages import compile_epu  # noqa: E402
from strata.verify.epu_gate import ort_logits  # noqa: E402
from strata.models import save_random_checkpoint  # noqa: E402
from strata.pipeline import load_config, load_model  # noqa: E402
from strata.targets.epu.cost import QCU, step_cost  # noqa: E402
from strata.verify.metrics import logit_metrics  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--workdir", default=None, help="keep the checkpoint and the stages here (default: a temp dir)")
    ap.add_argument("--prompt", default="9,803,301,8880,369,2,8", help="Chimera's Sarashina2.2-3B run's 7 prompt ids by default")
    ap.add_argument("--headroom", type=int, default=2)
    args = ap.parse_args()
    prompt = [int(t) for t in args.prompt.split(",")]
    tmp = None if args.workdir else tempfile.TemporaryDirectory()
    work = Path(args.workdir or tmp.name)  # type: ignore[union-attr]
    cfg = dataclasses.replace(load_config(ROOT / "examples" / "sarashina2.2-3b"), num_layers=args.layers,
                              name=f"sarashina2.2-3b-{args.layers}l")
    ckpt = work / "ckpt"
    if not (ckpt / "config.json").is_file():
        t0 = time.perf_counter()
        save_random_checkpoint(cfg, ckpt, seed=0, std=0.02)
        print(f"random checkpoint ({args.layers} layers) in {time.perf_counter() - t0:.1f} s", flush=True)
    model = load_model(ckpt)
    t0 = time.perf_counter()
    out, rebuilt = compile_epu(model, work / "epu", {"ctx": 64, "headroom": args.headroom, "calib_prompts": 4,
                                                      "calib_len": 8})
    compile_s = time.perf_counter() - t0
    print(f"compile {compile_s:.1f} s (rebuilt: {', '.join(rebuilt) or 'nothing'})", flush=True)
    t0 = time.perf_counter()
    build_epu(out)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, logits, frac = run_epu(out, prompt, 1)
    run_s = time.perf_counter() - t0
    m = logit_metrics(logits[0] * 2.0 ** -frac, ort_logits(model, out, prompt))
    cost = step_cost(parse_ir((out / "fixed" / "fixed.mlir").read_text()), pos=len(prompt))
    per_layer = [r for r in cost.rows if not r[0].startswith(("embed", "result_", "w4a16NBitsMatMul result_"))]
    layer_cycles = sum(r[3] for r in per_layer) / args.layers
    full = cost.cycles + (32 - args.layers) * layer_cycles
    print(f"cost ESTIMATE (roofline, {QCU.name}): {args.layers} layers {cost.cycles / 1e6:.2f} M cycles; "
          f"scaled to 32 layers {full / 1e6:.2f} M cycles, {QCU.clock_hz / full:.0f} tokens/s "
          f"(Chimera's ISS measured 32.6 M cycles, 46 tokens/s)")
    print(f"{len(prompt)}-token prompt: {len(prompt)} device steps in {run_s:.1f} s; logits FixedPoint32<{frac}>")
    print(f"rank_of_ort_argmax={m['rank_of_ort_argmax']} rel_rmse_affine={m['rel_rmse_affine']:.4f} "
          f"topk_overlap={m['topk_overlap']:.2f} compile_s={compile_s:.1f} build_s={build_s:.1f} run_s={run_s:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
