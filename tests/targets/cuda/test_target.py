"""The CUDA target: `strata compile --target cuda` writes kernels.py and model.py; run
under Triton's interpreter on the CPU (TRITON_INTERPRET=1, set by tests/conftest.py) the
generated code decodes greedily as the CPU target does.

The interpreter gets bf16 arithmetic and f32 -> fp8 downcasts wrong, so the runs compare in
f32: the f32 recipe against the CPU target (same ids, logits within 1e-4), and the fp8 /
int4 recipes with their weights quantized and dequantized on the host against the blueprint
interpreter with the same weights and unrounded (f32) activations.
"""

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

from support import EXAMPLES, HYBRID_FAMILIES, ROOT, TINY, run_tool, write_checkpoint  # noqa: E402
from strata.pipeline import compile_model, load_model, lower  # noqa: E402
from strata.targets.codegen import CodegenError  # noqa: E402
from strata.targets.cpu.program import load_compiled  # noqa: E402
from support import cpu_generate as generate
from strata.targets.cuda.program import load_model_py  # noqa: E402
from strata.targets.cuda.kernel_source import unresolved  # noqa: E402

PROMPT = [3, 1, 4]
STEPS = 5  # the prefill's token and 4 decode steps
FAMILIES = {k: TINY[k] for k in ("llama", "qwen2", "qwen3")} | HYBRID_FAMILIES


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda_target")
    return {k: write_checkpoint(c, root / k) for k, c in FAMILIES.items()}


def _cuda(ckpt, out, recipe="f32", **knobs):
    return compile_model(load_model(ckpt), "cuda", out, {"ctx": 32, "recipe": recipe, **knobs})


@pytest.mark.parametrize("fam", sorted(FAMILIES))
def test_greedy_matches_cpu_target(ckpts, tmp_path, fam):
    """Prefill then 4 decode steps through the generated kernels: the CPU target's ids, logits within 1e-4."""
    model = load_model(ckpts[fam])
    store = model.open_weights(quiet=True)
    want_ids, want = generate(load_compiled(compile_model(model, "cpu", tmp_path / "cpu", {"ctx": 32})), store,
                              PROMPT, STEPS)
    m = load_model_py(_cuda(ckpts[fam], tmp_path / "cuda")).Model(store)
    assert m.interpret and m.device.type == "cpu"
    ids, got = m.generate(PROMPT, STEPS)
    assert ids == want_ids
    assert float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_long_prompt(ckpts, tmp_path):
    """12 prompt rows: the prefill's projections take the tiled GEMM (more than GEMV_MAX_ROWS),
    biases included."""
    fam = "qwen2"
    prompt = [5, 9, 1, 2, 7, 3, 3, 8, 1, 0, 4, 6]
    model = load_model(ckpts[fam])
    store = model.open_weights(quiet=True)
    want_ids, want = generate(load_compiled(compile_model(model, "cpu", tmp_path / "cpu", {"ctx": 32})), store,
                              prompt, 3)
    ids, got = load_model_py(_cuda(ckpts[fam], tmp_path / "cuda")).Model(store).generate(prompt, 3)
    assert ids == want_ids
    assert float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def _blueprint_greedy(module, store, steps: int):
    """Greedy ids and logits of the blueprint interpreter on `module` (the target's lowering),
    activations unrounded (f32), weights quantized as each node's format says."""
    from xdsl.dialects import func

    from strata.semantics import blueprint_interp as BI

    fns = {f.sym_name.data: f for f in module.walk() if isinstance(f, func.FuncOp)}
    state = {k: np.zeros(tuple(t.get_shape()), np.float32)
             for k, t in fns["decode"].attributes["blueprint.state"].data.items()}
    cache: dict = {}
    logits = [BI.run_blueprint(fns["prefill"], store, state, [np.array(PROMPT, np.int32)[:, None]], pos=0,
                               cache=cache)[1][-1]]
    for i in range(1, steps):
        tok = np.array([[int(np.argmax(logits[-1]))]], np.int32)
        logits.append(BI.run_blueprint(fns["decode"], store, state, [tok], pos=len(PROMPT) + i - 1, cache=cache)[1][-1])
    return [int(np.argmax(x)) for x in logits], np.stack(logits)


@pytest.mark.parametrize("fam,recipe", [("qwen3", "fp8-bf16head"), ("qwen3", "w4a16"), ("qwen3_moe", "fp8-bf16head")])
def test_quantized_recipes_match_blueprint(ckpts, tmp_path, monkeypatch, fam, recipe):
    """fp8 block / int4 weights quantized on the host as the blueprint interpreter quantizes
    them (dequantized for the Triton interpreter), experts included; activations in f32 on both sides."""
    from strata.semantics import blueprint_interp as BI
    from strata.targets import target

    rounding, quantize = BI.round_activation, BI.quantize_weight

    def weight(w, f):  # bf16 weights (the head) still rounded: only the activations stay f32
        if f is not None and f.elem.data in ("bf16", "f16"):
            return rounding(np.asarray(w, np.float32), f)
        return quantize(w, f)

    monkeypatch.setattr(BI, "round_activation", lambda x, f: x.astype(np.float32) if x.dtype.kind == "f" else x)
    monkeypatch.setattr(BI, "quantize_weight", weight)
    model = load_model(ckpts[fam])
    store = model.open_weights(quiet=True)
    knobs = {**target("cuda").knobs, "ctx": 32, "recipe": recipe, "kv": "contiguous"}
    want_ids, want = _blueprint_greedy(lower(model, target("cuda").pipeline(knobs)), store, STEPS)
    ids, got = load_model_py(_cuda(ckpts[fam], tmp_path / "c", recipe)).Model(store).generate(PROMPT, STEPS)
    assert ids == want_ids
    assert float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))


def test_paged_kv_layout(ckpts, tmp_path):
    """kv=paged: the cache in pages of 16 rows behind a block table, same result."""
    store = load_model(ckpts["qwen2"]).open_weights(quiet=True)
    a = load_model_py(_cuda(ckpts["qwen2"], tmp_path / "c")).Model(store).generate(PROMPT, 3)
    mod = load_model_py(_cuda(ckpts["qwen2"], tmp_path / "p", kv="paged"))
    assert mod.Model.PAGED
    b = mod.Model(store).generate(PROMPT, 3)
    assert a[0] == b[0] and np.allclose(a[1], b[1], atol=1e-5)


@pytest.mark.parametrize("fam", ["qwen3_5"])  # gated attention, M-RoPE positions, GDN state
def test_decode_with_the_position_on_the_device(ckpts, tmp_path, fam):
    """The decode step as the CUDA graph runs it (the position an int32 device scalar read by
    the kernels, the rope positions a buffer) gives what the eager step gives."""
    import torch

    store = load_model(ckpts[fam]).open_weights(quiet=True)
    m = load_model_py(_cuda(ckpts[fam], tmp_path / "c")).Model(store)
    tok, _ = m.prefill(PROMPT, 0)
    saved = {k: v.clone() for k, v in m.state.items()}
    pos = len(PROMPT)
    eager = m.decode(tok, pos)
    for k, v in saved.items():
        m.state[k].copy_(v)
    graph = m._decode(m._ids(tok), 1, torch.tensor([pos], dtype=torch.int32), m._rope_positions(pos, 1))
    assert torch.equal(graph["next"], eager[0])
    assert torch.allclose(graph["logits"], eager[1], atol=1e-6)


def test_generated_files_import_nothing_from_strata(ckpts, tmp_path):
    """kernels.py and model.py import only numpy, torch and triton; run with strata not
    importable (python -I, `strata` blocked), they give what they give in-process."""
    out = _cuda(ckpts["llama"], tmp_path / "c")
    for name in ("kernels.py", "model.py"):
        tree = ast.parse((out / name).read_text())
        mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert mods <= {"__future__", "dataclasses", "math", "numpy", "torch", "triton", "hashlib", "importlib",
                        "linecache", "os", "re", "sys", "pathlib"}, (name, mods)
    assert not unresolved((out / "kernels.py").read_text())
    store = load_model(ckpts["llama"]).open_weights(quiet=True)
    names = [n for spec in load_model_py(out).Model.WEIGHTS for n in spec[1]]
    np.savez(tmp_path / "w.npz", **{n.replace(".", "~"): np.asarray(store.get(n)) for n in names})
    code = ("import sys; sys.modules['strata'] = None\n"
            "import importlib.util, numpy as np\n"
            f"spec = importlib.util.spec_from_file_location('m', {str(out / 'model.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            f"w = np.load({str(tmp_path / 'w.npz')!r}, allow_pickle=False)\n"
            "model = m.Model({k.replace('~', '.'): w[k] for k in w.files})\n"
            f"print(model.generate({PROMPT}, 3)[0])\n")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(load_model_py(out).Model(store).generate(PROMPT, 3)[0])


def test_deterministic_output(ckpts, tmp_path):
    a, b = _cuda(ckpts["qwen3_next"], tmp_path / "a", "fp8-bf16head"), _cuda(ckpts["qwen3_next"], tmp_path / "b",
                                                                              "fp8-bf16head")
    for name in ("kernels.py", "model.py", "manifest.json", "op.mlir"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_kernels_file_holds_only_what_the_groups_need(ckpts, tmp_path):
    dense = (_cuda(ckpts["llama"], tmp_path / "d") / "kernels.py").read_text()
    hybrid = (_cuda(ckpts["qwen3_5_moe"], tmp_path / "h") / "kernels.py").read_text()
    for name in ("gdn_step_kernel", "conv_l2_kernel", "topk_softmax_kernel", "blend_kernel", "split_qg_kernel"):
        assert f"def {name}(" in hybrid and f"def {name}(" not in dense
    assert "def gemv_kernel(" in dense and "def attention_kernel(" in dense


def test_unknown_group_rule_is_one_line_error(ckpts):
    from xdsl.dialects.builtin import StringAttr

    from strata.dialects import blueprint as B
    from strata.targets import target
    from strata.targets.cuda.emit import emit_cuda

    module = lower(load_model(ckpts["qwen3"]), target("cuda").pipeline({**target("cuda").knobs, "ctx": 32, "recipe": "f32"}))
    g = next(op for op in module.walk() if isinstance(op, B.GroupOp) and op.rule.data == "qk_norm_rows")
    g.rule = StringAttr("mystery_rule")
    with pytest.raises(CodegenError, match="no CUDA kernel for group rule 'mystery_rule'"):
        emit_cuda(module, "m")
    g.rule = StringAttr("qk_norm_rows")
    node = next(op for op in g.body.block.ops if op.name == "blueprint.qk_norm")
    node.param = StringAttr("blk.0.attn_q_norm.weight'); import os #")
    with pytest.raises(CodegenError):
        emit_cuda(module, "m")


# ---------------------------------------------------------------------------------------------
# The CLI


def test_run_interpret_prints_what_strata_run_prints(ckpts, tmp_path):
    ck = str(ckpts["llama"])
    cpu = run_tool("run", ck, "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--cache-dir", str(tmp_path / "a"))
    cuda = run_tool("run", ck, "--target", "cuda", "--interpret", "--prompt-ids", "1,2,3", "--max-new-tokens", "4",
                    "--cache-dir", str(tmp_path / "b"), "--dump-logits", str(tmp_path / "l.npy"))
    assert cpu.returncode == 0 and cuda.returncode == 0, cuda.stderr
    assert cuda.stdout.strip().splitlines()[-1] == cpu.stdout.strip().splitlines()[-1]
    assert np.load(tmp_path / "l.npy").shape == (4, 48)


def test_cli_errors(ckpts, tmp_path):
    import torch

    ck = str(ckpts["llama"])
    if not torch.cuda.is_available():
        proc = run_tool("run", ck, "--target", "cuda", "--prompt-ids", "1,2")
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
        assert "--interpret" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_tool("run", ck, "--recipe", "bf16", "--prompt-ids", "1,2")
    assert proc.returncode == 1 and "--recipe applies to --target cuda" in proc.stderr
    proc = run_tool("compile", ck, "--target", "cuda", "--print-pipeline", "--recipe", "fp8-bf16head")
    assert proc.returncode == 0 and "blueprint-assign-precision{recipe=fp8-bf16head}" in proc.stdout


# ---------------------------------------------------------------------------------------------
# Ahead of time, for sm_90a (Triton's compiler without a GPU; TRITON_INTERPRET must be unset)


def _aot(*args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "strata.cli", "compile", *args], capture_output=True, text=True,
                          env=env, timeout=1200)


def test_aot_qwen3_8b_within_limits(tmp_path):
    """Every kernel launch of Qwen3-8B (bf16; config only, no weights) compiles for sm_90a within
    the H200's registers, shared memory and without spills."""
    proc = _aot(str(EXAMPLES / "qwen3-8b"), "--target", "cuda", "--aot", "sm_90a", "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "o" / "aot" / "report.json").read_text())
    assert len(report) >= 10 and all(r["ok"] and r["target"] == "sm_90a" for r in report)
    kernels = {r["kernel"] for r in report}
    assert {"gemv_kernel", "gemm_kernel", "attention_kernel", "rms_norm_kernel", "argmax_kernel"} <= kernels
    assert (tmp_path / "o" / "aot" / f"{report[0]['name']}.cubin").stat().st_size > 0
    again = _aot(str(EXAMPLES / "qwen3-8b"), "--target", "cuda", "-o", str(tmp_path / "o"))  # a stage: replaced
    assert again.returncode == 0, again.stderr


def test_aot_qwen36_35b_a3b(tmp_path):
    """Qwen3.6-35B-A3B with fp8-bf16head: every launch compiles within the H200's limits, the
    chunked delta rule's prep and state kernels included (no spills); a spilling kernel would be a
    one-line error naming it, which --allow-spills accepts."""
    from strata.targets.cuda.aot_model import verdict
    from strata.targets.cuda.aot import AotResult

    proc = _aot(str(EXAMPLES / "qwen3.6-35b-a3b"), "--target", "cuda", "--recipe", "fp8-bf16head", "--aot", "sm_90a",
                "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = [AotResult(**r) for r in json.loads((tmp_path / "o" / "aot" / "report.json").read_text())]
    assert all(r.ok and r.local == 0 for r in report), [(r.name, r.problems) for r in report if not r.ok]
    assert all(r.regs <= 255 and r.shared <= 227 * 1024 and r.target == "sm_90a" for r in report)
    assert {"gemv_kernel", "topk_softmax_kernel", "blend_kernel", "gdn_step_kernel", "conv_l2_kernel",
            "gdn_chunk_prep_kernel", "gdn_chunk_state_kernel"} <= {r.kernel for r in report}
    assert verdict(report, allow_spills=False) is None
    spill = AotResult("x.gdn_chunk_state_kernel", "gdn_chunk_state_kernel", 255, 9216, 960, "sm_90a", False,
                      ["960 bytes of local memory per thread (spills)"])
    line = verdict(report + [spill], allow_spills=False)
    assert line is not None and "gdn_chunk_state_kernel" in line and "--allow-spills" in line and "\n" not in line
    assert verdict(report + [spill], allow_spills=True) is None
