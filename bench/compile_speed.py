"""Compile speed: Qwen3-8B module IR -> op IR (prefill and decode), and a 72-layer variant.

Each stage is timed separately: building the module IR, verifying it, lowering it,
verifying the op IR and printing it. The peer here is the layer count: the cost must
be linear in layers, so the 72-layer run should take about twice the 36-layer one.

Last line: `module_to_op_s=<36 layers, prefill, build+lower+verify+print> ratio_72_36=<72/36>`.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from strata.ir.text import print_ir  # noqa: E402
from strata.models import build_module  # noqa: E402
from strata.pipeline import entry_pipeline, load_config, run_pipeline  # noqa: E402


def compile_once(cfg, entry: str, emit: bool) -> dict[str, float]:
    """Seconds per stage for one module -> op lowering."""
    times: dict[str, float] = {}
    t = time.perf_counter()
    module = build_module(cfg)
    times["build"] = time.perf_counter() - t
    t = time.perf_counter()
    module.verify()
    times["verify_module"] = time.perf_counter() - t
    t = time.perf_counter()
    opts = {"prefill": dict(tokens=5, start=0), "decode": dict(start=4)}[entry]
    run_pipeline(module, entry_pipeline(entry, ctx=89856, kv_pad=256, **opts))  # lowers, then verifies
    times["lower_verify"] = time.perf_counter() - t
    t = time.perf_counter()
    text = print_ir(module)
    times["print"] = time.perf_counter() - t
    if emit:
        sys.stdout.write(text)
    times["total"] = sum(times.values())
    times["ops"] = text.count(" = op.")
    return times


def best_of(cfg, entry: str, repeats: int) -> dict[str, float]:
    runs = []
    for _ in range(repeats):
        gc.collect()
        runs.append(compile_once(cfg, entry, emit=False))
    return min(runs, key=lambda r: r["total"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--print-ir", action="store_true", help="also print the op IR of each 36-layer lowering")
    args = ap.parse_args()

    cfg36 = load_config(ROOT / "examples" / "qwen3-8b")
    cfg72 = dataclasses.replace(cfg36, num_layers=72, name="qwen3-8b-72l")
    compile_once(cfg36, "prefill", emit=False)  # warm up imports and caches
    results = {}
    for cfg in (cfg36, cfg72):
        for entry in ("prefill", "decode"):
            if args.print_ir and cfg is cfg36:
                compile_once(cfg, entry, emit=True)
            r = best_of(cfg, entry, args.repeats)
            results[(cfg.num_layers, entry)] = r
            stages = " ".join(f"{k}={v:.3f}s" for k, v in r.items() if k not in ("ops",))
            print(f"layers={cfg.num_layers} entry={entry} ops={int(r['ops'])} {stages}")
    t36 = results[(36, "prefill")]["total"]
    t72 = results[(72, "prefill")]["total"]
    print(f"module_to_op_s={t36:.3f} ratio_72_36={t72 / t36:.2f}")


if __name__ == "__main__":
    main()
