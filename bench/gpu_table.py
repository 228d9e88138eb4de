"""The one table `bench/gpu_check.sh` prints at its end, from what its steps left in its output
folder:

    tests.txt, tests.rc      pytest's output and exit status (the GPU tests)
    qwen3.json               bench/gpu_qwen3_8b.py bench --json
    serve.json               bench/gpu_serve.py --json
    <step>.log               each step's own output (the table points at it when a step failed)

    python bench/gpu_table.py OUT

A missing or unreadable file is a row saying so; the table is always printed (Markdown).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    if not path.is_file():
        return None, f"no {path.name} (see {path.with_suffix('.log').name})"
    try:
        return json.loads(path.read_text()), None
    except ValueError as e:
        return None, f"{path.name} is not JSON ({e})"


def test_rows(out: Path) -> list[tuple[str, str, str, str]]:
    text = (out / "tests.txt").read_text(errors="replace") if (out / "tests.txt").is_file() else ""
    rc = (out / "tests.rc").read_text().strip() if (out / "tests.rc").is_file() else "?"
    summary = next((ln.strip("= ") for ln in reversed(text.splitlines()) if re.search(r"\d+ (passed|failed|error)", ln)),
                   "no pytest summary (see tests.txt)")
    return [("GPU tests (pytest)", summary, "", f"exit {rc}")]


def _fmt(v: float | None, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:,.1f}{unit}"


def model_rows(out: Path) -> list[tuple[str, str, str, str]]:
    rep, problem = _read_json(out / "qwen3.json")
    if rep is None:
        return [("decode / prefill", "failed", "", problem or "")]
    eng = rep["engines"]
    ref = "compile" if "compile" in eng else "eager"
    ref_name = "torch.compile" if ref == "compile" else "HF eager (torch.compile: " + \
        rep["errors"].get("compile", "not run") + ")"
    rows = []
    for what, key in (("prefill", "prefill_tok_s"), ("decode", "decode_tok_s")):
        s, r = eng["strata"][key], eng[ref][key]
        label = f"{what} tok/s ({rep['model']}, {rep['recipe']}, {rep['prompt']}-token prompt)"
        rows.append((label, _fmt(s), _fmt(r), f"{s / r:.3g}x {ref_name}"))
    pct = rep.get("hbm_pct")
    rows.append(("decode HBM bandwidth", _fmt(pct, " %"), "",
                 f"{rep['decode_gb_per_token']:.2f} GB/token over {rep['hbm_tb_s']} TB/s ({rep['device']})"
                 if pct is not None else f"no bandwidth figure for {rep['device']}"))
    rows.append(("greedy ids vs HF eager", f"{rep['ids_agree']}/{rep['new']}", "",
                 f"first logits within {rep['first_logits_max_diff']:.2e}"))
    return rows


def serve_rows(out: Path) -> list[tuple[str, str, str, str]]:
    rep, problem = _read_json(out / "serve.json")
    if rep is None:
        return [("strata serve", "failed", "", problem or "")]
    if "error" in rep:
        return [(f"strata serve --target {rep['target']}", "failed", "", rep["error"])]
    rows = []
    for r in rep["runs"]:
        label = f"serve tok/s, {r['clients']} client{'s' if r['clients'] > 1 else ''}"
        rows.append((label, "failed", "", r["error"]) if "error" in r else
                    (label, _fmt(r["tok_s"]), "", f"TTFT p50 {r['ttft_p50_ms']:.0f} ms, {r['requests']} requests"))
    return rows


def table(out: Path) -> str:
    rows = [("check", "strata", "reference", "note")]
    rows += test_rows(out) + model_rows(out) + serve_rows(out)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python bench/gpu_table.py OUT (the folder bench/gpu_check.sh wrote)", file=sys.stderr)
        return 2
    print(table(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
