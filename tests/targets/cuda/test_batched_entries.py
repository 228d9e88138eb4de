"""The cuda target's batched and paged entries (@prefill's kernel groups over many rows' tokens,
attention through each row's table of cells) in Triton's interpreter, f32: each equals the cpu
target's (numpy kernels) on the same calls, within 1e-4 of the largest value, at sizes that are
not powers of two, on a dense model, a grouped-query one with q/k norms, a MoE one and a hybrid
(a Gated DeltaNet's recurrent state per row, in the slots)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("triton", reason="the CUDA target tests need triton (the `test` extra)")
pytest.importorskip("torch", reason="the CUDA target tests need torch (the `test` extra)")

from support import EXAMPLES, HYBRID_FAMILIES, ROOT, write_checkpoint  # noqa: E402
from strata.pipeline import compile_model, load_model  # noqa: E402
from strata.targets.cpu.program import load as cpu_load  # noqa: E402
from strata.targets.cuda import program as cuda_program  # noqa: E402

CTX = 32


def _programs(checkpoint, tmp_path, knobs):
    model = load_model(checkpoint)
    store = model.open_weights(quiet=True)
    cuda = cuda_program.load(compile_model(model, "cuda", tmp_path / "cuda", {**knobs, "recipe": "f32"}), store,
                             interpret=True)
    cpu = cpu_load(compile_model(model, "cpu", tmp_path / "cpu", {**knobs, "kernels": "numpy"}), store)
    return cuda, cpu


def _same(cuda, cpu, entry, **args):
    got, want = cuda.call(entry, **args), cpu.call(entry, **args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w), entry
        scale = max(1.0, float(np.abs(w).max()))
        assert float(np.abs(np.asarray(g, np.float64) - w).max()) <= 1e-4 * scale, entry
    return got


def _slots(table, rows, positions, page):
    return np.asarray([table[r, p // page] * page + p % page for r, p in zip(rows, positions)], np.int32)


@pytest.mark.parametrize("cfg", ["odd_llama", "qwen3_moe"])
def test_step_paged_equals_the_cpu_targets(odd_configs, tmp_path, cfg):
    """Scheduler-like steps over pages scattered in the pool: a prompt of 11 tokens over two
    pages in two chunks (the first returns no row), then a decode step of that row beside two
    new prompts' chunks, one row idle; only the rows' live pages hold anything."""
    config = odd_configs.get(cfg) or HYBRID_FAMILIES[cfg]
    page = 8
    cuda, cpu = _programs(write_checkpoint(config, tmp_path / "ckpt"), tmp_path,
                          {"ctx": CTX, "entries": "step_paged", "Batch": 2, "Rows": 4, "PageSize": page, "Pages": 4})
    table = np.array([[3, 5, -1, -1], [0, -1, -1, -1], [7, 1, 2, -1], [-1, -1, -1, -1]], np.int32)
    idle = dict(step_tokens=np.zeros((4, 1), np.int32), step_positions=np.full(4, -1, np.int32))
    rows, pos = np.zeros(4, np.int32), np.arange(4, dtype=np.int32)
    (logits,) = _same(cuda, cpu, "step_paged", tokens=np.array([5, 9, 1, 2], np.int32), positions=pos, rows=rows,
                      slots=_slots(table, rows, pos, page), last=np.full(4, -1, np.int32), table=table, **idle)
    assert logits.shape[0] == 8 and not logits.any()  # a prompt's first chunk: no row asked for
    rows, pos = np.zeros(7, np.int32), np.arange(4, 11, dtype=np.int32)
    rest = dict(tokens=np.array([7, 3, 3, 8, 1, 0, 4], np.int32), positions=pos, rows=rows,
                slots=_slots(table, rows, pos, page), last=np.array([6, -1, -1, -1], np.int32), table=table, **idle)
    (logits,) = _same(cuda, cpu, "step_paged", **rest)
    assert logits.shape[0] == 8 and logits[0].any() and not logits[1:].any()  # only row 0's last token
    rows = np.array([2, 2, 2, 2, 2, 1, 1, 1], np.int32)
    pos = np.array([0, 1, 2, 3, 4, 0, 1, 2], np.int32)
    second = dict(tokens=np.array([4, 4, 2, 9, 1, 6, 7, 3], np.int32), positions=pos, rows=rows,
                  slots=_slots(table, rows, pos, page), last=np.array([-1, 7, 4, -1], np.int32), table=table,
                  step_tokens=np.array([[11], [0], [0], [0]], np.int32), step_positions=np.array([11, -1, -1, -1], np.int32))
    _same(cuda, cpu, "step_paged", **second)


def test_the_other_batched_entries_equal_the_cpu_targets(odd_configs, tmp_path):
    """decode_rows and prefill_slots (bench), prefill_packed, decode_paged, log_probs_packed
    (perplexity), hidden_packed and forward on a model of head dim 96, 3 query heads per KV
    head: one program of them all, the cache of Batch rows shared as the cpu target shares it."""
    entries = "decode_rows,prefill_slots,prefill_packed,log_probs_packed,hidden_packed,forward,decode_paged"
    cuda, cpu = _programs(write_checkpoint(odd_configs["odd_qwen3"], tmp_path / "ckpt"), tmp_path,
                          {"ctx": CTX, "entries": entries, "Batch": 3, "PageSize": 8})
    prompts = np.array([[5, 9, 1, 2, 7], [3, 3, 8, 0, 0], [1, 0, 4, 6, 2]], np.int32)
    _same(cuda, cpu, "prefill_slots", tokens=prompts, slots=np.array([2, 0, 1], np.int32),
          lengths=np.array([5, 3, 4], np.int32))
    _same(cuda, cpu, "decode_rows", tokens=np.array([[4], [7], [1]], np.int32), positions=np.array([3, 4, 5], np.int32))
    _same(cuda, cpu, "prefill_packed", tokens=np.array([8, 2, 2, 5, 6], np.int32),
          rows=np.array([1, 1, 1, 0, 0], np.int32), positions=np.array([5, 6, 7, 4, 5], np.int32),
          segments=np.array([0, 0, 0, 1, 1], np.int32), last=np.array([4, 2, -1], np.int32))
    packed = dict(tokens=np.array([5, 9, 1, 2, 7, 3, 3, 8, 1], np.int32),
                  positions=np.array([0, 1, 2, 3, 4, 0, 1, 2, 3], np.int32),
                  segments=np.array([0, 0, 0, 0, 0, 1, 1, 1, 1], np.int32))
    targets = np.array([9, 1, 2, 7, 7, 3, 8, 1, 1], np.int64)
    (log_probs,) = _same(cuda, cpu, "log_probs_packed", targets=targets, **packed)
    assert log_probs.shape == (9,) and (log_probs < 0).all()
    _same(cuda, cpu, "hidden_packed", **packed)
    _same(cuda, cpu, "forward", tokens=prompts)
    _same(cuda, cpu, "decode_paged", tokens=np.array([[4], [7], [1]], np.int32), positions=np.array([9, 0, 3], np.int32),
          table=np.array([[4, 6, -1, -1], [1, -1, -1, -1], [0, -1, -1, -1]], np.int32))
    # model.py stands alone: the host-input functions copied in, nothing of strata imported, each name once
    text = (tmp_path / "cuda" / "model.py").read_text(encoding="utf-8")
    tree = ast.parse(text)
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                and "strata" in (getattr(n, "module", None) or "") + "".join(a.name for a in n.names)]
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert len(names) == len(set(names)) and {"entry_call", "EntriesRuntime", "TokenCall"} <= set(names)


def test_a_hybrids_entries_keep_each_rows_recurrent_state(odd_configs, tmp_path):
    """Qwen3.5-MoE at odd sizes (a Gated DeltaNet layer, then gated attention; 6 experts): each
    sequence's tokens run with its slot's recurrent state (zeros for a new one) and write it back,
    as the cpu target's do: three step_paged calls (a row continuing from its slot's state in the
    third), prefill_slots with padded prompts (the state after each prompt's last real token)
    and fresh segments in log_probs_packed; read_slot / write_slot move a slot's state."""
    page = 8
    cuda, cpu = _programs(write_checkpoint(odd_configs["odd_qwen35_moe"], tmp_path / "ckpt"), tmp_path,
                          {"ctx": CTX, "entries": "step_paged,prefill_slots,log_probs_packed", "Batch": 2,
                           "Rows": 2, "PageSize": page, "Pages": 4})
    table = np.array([[3, 5, -1, -1], [0, 7, -1, -1]], np.int32)
    calls = [  # (tokens, rows, positions, last, step_tokens, step_positions)
        ([5, 9, 1, 2, 7, 3, 3, 8, 1, 0, 4], [0] * 11, list(range(11)), [10, -1], [0, 0], [-1, -1]),
        ([4, 4, 2, 9, 1], [1] * 5, [0, 1, 2, 3, 4], [-1, 4], [11, 0], [11, -1]),
        ([3, 8], [1, 1], [5, 6], [-1, 1], [2, 0], [12, -1]),
    ]
    for tokens, rows, pos, last, step_tokens, step_pos in calls:
        rows, pos = np.array(rows, np.int32), np.array(pos, np.int32)
        _same(cuda, cpu, "step_paged", tokens=np.array(tokens, np.int32), positions=pos, rows=rows,
              slots=_slots(table, rows, pos, page), last=np.array(last, np.int32), table=table,
              step_tokens=np.array(step_tokens, np.int32)[:, None], step_positions=np.array(step_pos, np.int32))
    saved = cuda.read_slot(1)
    assert saved and all(np.abs(v).max() > 0 for v in saved.values())
    _same(cuda, cpu, "prefill_slots", tokens=np.array([[5, 9, 1, 2, 7], [3, 3, 8, 0, 0]], np.int32),
          slots=np.array([1, 0], np.int32), lengths=np.array([5, 3], np.int32))
    _same(cuda, cpu, "log_probs_packed", tokens=np.array([5, 9, 1, 2, 7, 3, 3, 8], np.int32),
          positions=np.array([0, 1, 2, 3, 0, 1, 2, 3], np.int32), segments=np.array([0, 0, 0, 0, 1, 1, 1, 1], np.int32),
          targets=np.array([9, 1, 2, 7, 3, 8, 1, 1], np.int64))
    cuda.write_slot(0, saved)
    assert all(np.array_equal(cuda.read_slot(0)[k], v) for k, v in saved.items())
    with pytest.raises(ValueError, match="slot 2 is not one of the 2 sequence slots"):
        cuda.read_slot(2)


def test_bad_arguments_are_one_line(odd_configs, tmp_path):
    cuda, _ = _programs(write_checkpoint(odd_configs["odd_llama"], tmp_path / "ckpt"), tmp_path,
                        {"ctx": CTX, "entries": "decode_rows", "Batch": 2})
    with pytest.raises(ValueError, match=r"decode_rows: positions\[1\] = 40 is not in \[0, 31\]"):
        cuda.call("decode_rows", tokens=np.array([[1], [2]], np.int32), positions=np.array([0, 40], np.int32))


def test_aot_records_the_batched_entries_launches(tmp_path):
    """`strata compile --aot sm_90a` of Qwen3-8B (bf16, config only) with step_paged: the token
    attention at a decode step's tile and at the chunks' (32 and 64 rows), and the cell write,
    compile for sm_90a within the H200's limits, no spills (a subprocess: TRITON_INTERPRET unset)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "strata.cli", "compile", str(EXAMPLES / "qwen3-8b"), "--target", "cuda",
                           "--set", "entries=step_paged", "--aot", "sm_90a", "-o", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "aot" / "report.json").read_text())
    mine = [r for r in report if r["kernel"] in ("token_attention_kernel", "kv_write_cells_kernel")]
    assert sorted(r["kernel"] for r in mine) == ["kv_write_cells_kernel"] + ["token_attention_kernel"] * 3
    assert all(r["ok"] and r["local"] == 0 and r["target"] == "sm_90a" for r in mine), mine
