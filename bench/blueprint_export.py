"""Blueprint export speed: examples/qwen3.6-35b-a3b (40 layers) from its config to kbp-graph/v1
(module -> op -> blueprint, precision, state placement, fusion, collapse, export), and the same
model with 80 layers. The peer is the layer count: the cost must be linear in layers, so the
80-layer run should take about twice the 40-layer one. The issue's budget: under 2 s for 40.

Last line: `blueprint_export_s=<40 layers> ratio_80_40=<80/40>`.
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

from xdsl.dialects import func  # noqa: E402

from strata.exporters.kbp_graph import export_kbp_graph, kbp_graph_json  # noqa: E402
from strata.models import build_module  # noqa: E402
from strata.pipeline import blueprint_pipeline, load_config, run_pipeline  # noqa: E402


def export_once(cfg) -> tuple[float, int]:
    t = time.perf_counter()
    module = run_pipeline(build_module(cfg), blueprint_pipeline("decode", 1, "fp8-bf16head"))
    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    doc = export_kbp_graph(fn, provenance={})
    kbp_graph_json(doc)
    return time.perf_counter() - t, len(doc["nodes"])


def best_of(cfg, repeats: int) -> tuple[float, int]:
    runs = []
    for _ in range(repeats):
        gc.collect()
        runs.append(export_once(cfg))
    return min(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = load_config(ROOT / "examples" / "qwen3.6-35b-a3b")
    doubled = dataclasses.replace(cfg, num_layers=2 * cfg.num_layers, layer_types=cfg.layer_types * 2,
                                  moe_layers=cfg.moe_layers * 2)
    t40, n40 = best_of(cfg, args.repeats)
    t80, n80 = best_of(doubled, args.repeats)
    print(f"40 layers: {n40} nodes in {t40:.3f} s")
    print(f"80 layers: {n80} nodes in {t80:.3f} s")
    print(f"blueprint_export_s={t40:.3f} ratio_80_40={t80 / t40:.2f}")


if __name__ == "__main__":
    main()
