"""The CPU target: generated numpy code, the compile driver, `strata run`."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, TensorType, f32, i32, i64

from strata.dialects import op as O
from strata.dialects import read_ir
from strata.errors import StrataError
from strata.frontends.hf_config import write_hf_config
from strata.models.llama_config import LlamaConfig
from strata.ir.weights import WeightError, WeightStore
from strata.models import save_random_checkpoint
from strata.pipeline import compile_model, load_model, stage_inputs
from strata.semantics.op_interp import alloc_state, find_function, run_function
from strata.artifacts.stage import StageError, stage_matches
from strata.targets import target
from strata.targets.codegen import CodegenError, literal_name, sanitize_label
from strata.targets.cpu import emit_cpu, sanitize_identifier
from strata.targets.cpu.program import load_compiled
from support import cpu_generate as generate
from support import open_store
from support import tiny as support_tiny

CTX = 64


def compile_cpu(model_dir: Path, out: Path, ctx: int | None = None, flash_attn: bool = True) -> Path:
    return compile_model(load_model(model_dir), "cpu", out, {"ctx": ctx, "flash_attn": flash_attn})


def manifest_matches(out: Path, model_dir: Path, knobs: dict) -> bool:
    """Whether `out` is the stage a compile of `model_dir` with `knobs` would write."""
    model = load_model(model_dir)
    tgt = target("cpu")
    from strata.pipeline import resolve_knobs

    resolved = resolve_knobs(tgt, model, knobs)
    inputs = stage_inputs(model, model.open_weights(quiet=True), tgt, resolved)
    return stage_matches(out, inputs, {"model.py", "op.mlir"})[0]


def run_args(model: Path, **changes) -> list[str]:
    """`strata run` arguments on the command line."""
    args = ["run", str(model), "--prompt-ids", "1,2,3", "--max-new-tokens", "3", "--ctx", str(CTX)]
    for flag, value in changes.items():
        args += [f"--{flag.replace('_', '-')}", str(value)]
    return args


def cmd_run(args: list[str]) -> int:
    """The run command on parsed arguments, its errors raised (not printed)."""
    from strata.cli import build_parser

    parsed = build_parser().parse_args(args)
    return parsed.func(parsed)


#: The tiny configs of these tests: llama with GQA, and qwen3 (q/k norm, tied lm_head).
ARCHS = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def tiny(arch: str, **kw) -> LlamaConfig:
    family = next(k for k, a in ARCHS.items() if a == arch)
    return support_tiny(family, **({"head_dim": 8} if family == "qwen3" else {}), **{"name": "tiny", **kw})


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    out = {}
    for key, arch in ARCHS.items():
        out[key] = save_random_checkpoint(tiny(arch, name=key), root / key, seed=3)
    out["bf16"] = save_random_checkpoint(tiny("LlamaForCausalLM", name="bf16"), root / "bf16", seed=4, dtype="bfloat16")
    return out


@pytest.fixture(scope="module")
def compiled(models, tmp_path_factory) -> dict[tuple[str, bool], Path]:
    root = tmp_path_factory.mktemp("compiled")
    out = {}
    for key in ("llama", "qwen3", "bf16"):
        for fa in (True, False):
            out[key, fa] = compile_cpu(models[key], root / f"{key}-{int(fa)}", ctx=CTX, flash_attn=fa)
    return out


def _interp_vs_generated(out: Path, weights: WeightStore, tol: float) -> None:
    ir = read_ir(out / "op.mlir")
    prefill, decode = find_function(ir, "prefill"), find_function(ir, "decode")
    state = alloc_state(prefill)
    model = load_compiled(out).Model(weights)
    prompt = [1, 7, 3, 9, 2]
    got = model.prefill(prompt, 0)
    want = run_function(prefill, weights, state, prompt, 0)
    assert got.dtype == np.float32 and got.shape == want.shape == (1, 48)
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)
    token = int(got[-1].argmax())
    for i in range(8):
        got = model.decode(token, len(prompt) + i)
        want = run_function(decode, weights, state, [token], len(prompt) + i)
        np.testing.assert_allclose(got, want, atol=tol, rtol=0)
        token = int(want[-1].argmax())
    for name, buf in state.items():  # the caches saw the same writes
        np.testing.assert_allclose(getattr(model, name).astype(np.float32), buf.astype(np.float32), atol=tol)


# ---------------------------------------------------------------------------------------------
# Numerics


@pytest.mark.parametrize("flash_attn", [True, False], ids=["flash", "unfused"])
@pytest.mark.parametrize("key", ["llama", "qwen3"])
def test_matches_op_interpreter(models, compiled, key, flash_attn):
    _interp_vs_generated(compiled[key, flash_attn], open_store(models[key]), 1e-5)


@pytest.mark.parametrize("flash_attn", [True, False], ids=["flash", "unfused"])
def test_bf16_keeps_bf16_storage(models, compiled, flash_attn):
    out = compiled["bf16", flash_attn]
    weights = open_store(models["bf16"])
    model = load_compiled(out).Model(weights)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert model.blk_0_attn_q_weight.dtype == bf16
    assert model.cache_k_l0.dtype == model.cache_v_l1.dtype == bf16
    # bound without a copy: a view of the memory-mapped file
    assert not model.token_embd_weight.flags.owndata
    assert np.shares_memory(model.blk_0_ffn_up_weight, weights.get("blk.0.ffn_up.weight"))
    _interp_vs_generated(out, weights, 1e-5)


def test_generate_greedy(models, compiled):
    weights = open_store(models["qwen3"])
    module = load_compiled(compiled["qwen3", True])
    seen = []
    ids, logits = generate(module, weights, [4, 5, 6], 6, on_token=lambda i, t: seen.append((i, t)))
    assert logits.shape == (6, 48) and logits.dtype == np.float32
    assert ids == [int(r.argmax()) for r in logits] == [t for _, t in seen]
    # row 0 is the last prompt position's logits; row i comes from decoding token i - 1
    model = module.Model(weights)
    np.testing.assert_array_equal(logits[0], model.prefill([4, 5, 6], 0)[-1])
    np.testing.assert_array_equal(logits[1], model.decode(ids[0], 3)[-1])
    ids0, empty = generate(module, weights, [4], 0)
    assert ids0 == [] and empty.shape == (0, 48)


# ---------------------------------------------------------------------------------------------
# The generated module


#: Environment variables of OpenBLAS, OpenMP, MKL, GotoBLAS, BLIS, Accelerate and numexpr.
BLAS_SETTINGS = ("OPENBLAS_", "OMP_", "MKL_", "GOTO", "BLIS_", "VECLIB_", "NUMEXPR_")


def test_generated_code_is_self_contained(models, compiled, tmp_path):
    out = compiled["llama", True]
    source = (out / "model.py").read_text()
    imports = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imports |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imports.add(node.module)
    assert imports == {"numpy", "ml_dtypes", "__future__"}
    assert "strata" not in source.replace("strata.semantics.kernels", "").split('"""', 2)[2]
    assert "exec(" not in source and "eval(" not in source
    # only the kernels this model uses are copied (no argmax, cpy, scale, soft_max with flash)
    defs = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert {"mul_mat", "rope", "flash_attn_ext", "host_input", "_ggml_repeat_binary"} <= defs
    assert not {"argmax", "cpy", "scale", "transpose"} & defs

    # Run it where strata cannot be imported: -I -S (no site, no .pth editable install),
    # PYTHONPATH = numpy's site dir and the output dir only, weights from a plain npz.
    weights = open_store(models["llama"])
    np.savez(tmp_path / "w.npz", **{n.replace(".", "~"): np.asarray(weights.get(n)) for n in weights.names()})
    want = load_compiled(out).Model(weights).prefill([1, 2, 3], 0)
    np.save(tmp_path / "want.npy", want)
    site = {str(Path(np.__file__).parent.parent), str(Path(ml_dtypes.__file__).parent.parent)}
    script = textwrap.dedent("""
        import importlib.util, sys
        import numpy as np
        assert importlib.util.find_spec("strata") is None, "strata is importable"
        import model
        w = np.load("w.npz")
        weights = {k.replace("~", "."): w[k] for k in w.files}
        got = model.Model(weights).prefill([1, 2, 3], 0)
        assert "strata" not in sys.modules
        np.testing.assert_array_equal(got, np.load("want.npy"))
        print("ok")
    """)
    # The BLAS and thread settings travel with it: they choose which kernel (and so which last bit)
    # numpy's GEMM computes, and this checks the generated code, not the BLAS.
    blas = {k: v for k, v in os.environ.items() if k.startswith(BLAS_SETTINGS)}
    env = {"PYTHONPATH": os.pathsep.join(sorted(site) + [str(out)]), "PATH": os.environ.get("PATH", ""), **blas}
    r = subprocess.run([sys.executable, "-S", "-c", script], check=False, cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_compile_is_deterministic(models, tmp_path):
    a = compile_cpu(models["qwen3"], tmp_path / "a", ctx=CTX)
    b = compile_cpu(models["qwen3"], tmp_path / "b", ctx=CTX)
    files = sorted(p.name for p in a.iterdir())
    assert files == ["manifest.json", "model.py", "op.mlir"] == sorted(p.name for p in b.iterdir())
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # recompiling over an existing output replaces it, same bytes, no stray temp dirs
    compile_cpu(models["qwen3"], a, ctx=CTX)
    assert (a / "model.py").read_bytes() == (b / "model.py").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["inputs"]["knobs"]["ctx"] == CTX
    assert set(manifest) == {"format", "target", "model", "inputs", "versions", "outputs"}  # no timestamps


def test_manifest_reuse(models, tmp_path, capsys):
    model = tmp_path / "m"
    save_random_checkpoint(tiny("LlamaForCausalLM", name="m"), model, seed=5)
    out = compile_cpu(model, tmp_path / "out", ctx=CTX)
    assert manifest_matches(out, model, {"ctx": CTX, "flash_attn": True})
    assert not manifest_matches(out, model, {"ctx": 32, "flash_attn": True})
    assert not manifest_matches(out, model, {"ctx": CTX, "flash_attn": False})
    assert not manifest_matches(tmp_path / "nothing", model, {"ctx": CTX, "flash_attn": True})

    args = run_args(model, cache_dir=str(tmp_path / "cache"))
    assert cmd_run(args) == 0
    first = capsys.readouterr()
    assert "compiled" in first.err and "reusing" not in first.err
    assert cmd_run(args) == 0
    second = capsys.readouterr()
    assert "reusing" in second.err and second.out == first.out

    # an edited output or a changed config is not reused
    cache = tmp_path / "cache"
    (cache / "model.py").write_text((cache / "model.py").read_text() + "\n# edited\n")
    assert not manifest_matches(cache, model, {"ctx": CTX, "flash_attn": True})
    assert cmd_run(args) == 0
    assert "compiled" in capsys.readouterr().err
    write_hf_config(tiny("LlamaForCausalLM", name="m", rms_norm_eps=1e-6), model)
    assert not manifest_matches(cache, model, {"ctx": CTX, "flash_attn": True})


def test_cli_run_dump_logits(models, tmp_path, capsys):
    from strata.cli import main

    dump = tmp_path / "logits.npy"
    rc = main(["run", str(models["qwen3"] / "config.json"), "--prompt-ids", "3, 4,5", "--max-new-tokens", "4",
               "--dump-logits", str(dump), "--ctx", str(CTX), "--cache-dir", str(tmp_path / "c")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    last = cap.out.strip().splitlines()[-1]
    assert last.startswith("ids=")
    ids = [int(t) for t in last[4:].split(",")]
    logits = np.load(dump)  # allow_pickle defaults to False
    assert logits.shape == (4, 48) and logits.dtype == np.float32
    assert ids == [int(r.argmax()) for r in logits]
    assert "prefill" in cap.err and "tokens/s" in cap.err

    rc = main(["compile", str(models["qwen3"]), "-o", str(tmp_path / "o"), "--ctx", str(CTX), "--no-flash-attn"])
    assert rc == 0 and (tmp_path / "o" / "model.py").is_file()
    assert "flash_attn_ext(" not in (tmp_path / "o" / "model.py").read_text().split("class Model")[1]


# ---------------------------------------------------------------------------------------------
# Bad input


def test_bad_prompts(models, compiled):
    weights = open_store(models["llama"])
    module = load_compiled(compiled["llama", True])
    with pytest.raises(StrataError, match=r"prompt token id 48 is outside the vocabulary \[0, 48\)"):
        generate(module, weights, [1, 48], 2)
    with pytest.raises(StrataError, match=r"token id -1 is outside"):
        generate(module, weights, [-1], 2)
    with pytest.raises(StrataError, match="prompt is empty"):
        generate(module, weights, [], 2)
    with pytest.raises(StrataError, match=r"prompt \(60 tokens\) plus 6 new tokens need 65 positions, "
                                          r"more than the context of 64"):
        generate(module, weights, [1] * 60, 6)
    # Exactly fits: the last new token is returned, never fed back, so it needs no cache row.
    ids, _ = generate(module, weights, [1] * 60, 5)
    assert len(ids) == 5
    with pytest.raises(StrataError, match=r"prompt token id 10000000000.* is outside the vocabulary"):
        generate(module, weights, [1, 10**30], 2)
    with pytest.raises(StrataError, match="flat list of integer token ids"):
        generate(module, weights, [1, [2]], 2)
    with pytest.raises(ValueError, match="do not fit the context of 64"):
        module.Model(weights).decode(1, 64)


@pytest.mark.parametrize("text, message", [
    ("", "--prompt-ids is empty"),
    ("1,x,3", "'x' is not an integer token id"),
    ("1,,3", "'' is not an integer"),
])
def test_bad_prompt_ids_cli(models, tmp_path, text, message):
    args = run_args(models["llama"], prompt_ids=text, max_new_tokens=2, cache_dir=str(tmp_path / "c"))
    with pytest.raises(StrataError, match=message):
        cmd_run(args)


def test_weights_not_matching_config(tmp_path):
    model = save_random_checkpoint(tiny("LlamaForCausalLM"), tmp_path / "m", seed=1)
    write_hf_config(tiny("LlamaForCausalLM", intermediate_size=48), model)
    with pytest.raises(WeightError, match=r"tensor 'blk.0.ffn_gate.weight' .* has shape \[40, 32\], expected \[48, 32\]"):
        compile_cpu(model, tmp_path / "out", ctx=CTX)
    assert not (tmp_path / "out").exists()
    with pytest.raises(StrataError, match="ctx 4096 exceeds the model's max_position_embeddings"):
        compile_cpu(model, tmp_path / "out", ctx=4096)


def test_refuses_foreign_output_dir(models, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(StageError, match="not a strata output directory"):
        compile_cpu(models["llama"], out, ctx=CTX)
    assert (out / "notes.txt").read_text() == "precious" and len(list(out.iterdir())) == 1
    (tmp_path / "file").write_text("x")
    with pytest.raises(StageError, match="is not a directory"):
        compile_cpu(models["llama"], tmp_path / "file", ctx=CTX)


def test_no_half_written_output(models, tmp_path, monkeypatch):
    from strata.artifacts import directory

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(directory.os, "fsync", boom)
    with pytest.raises(StageError, match="No space left on device"):
        compile_cpu(models["llama"], tmp_path / "out", ctx=CTX)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Names


def test_sanitize_identifier():
    assert sanitize_identifier("blk.0.attn-q weight;import os") == "blk_0_attn_q_weight_import_os"
    assert sanitize_identifier("Qcur-0") == "Qcur_0"
    assert sanitize_identifier("0abc") == "v_0abc"
    assert sanitize_identifier("") == "v"
    assert sanitize_identifier("__init__") == "init"
    assert sanitize_identifier("class") == "class_"
    assert sanitize_identifier("print") == "print_"
    assert sanitize_identifier("naïve\nx") == "na_ve_x"
    assert sanitize_identifier("a-b", {"a_b", "a_b_2"}) == "a_b_3"
    for s in ("blk.0.attn-q weight;import os", "'); os.system('x", "\\u0041", "1+1"):
        assert sanitize_identifier(s).isidentifier()
    assert sanitize_label("x\n'y\"") == "x__y_"
    with pytest.raises(CodegenError, match="refusing"):
        literal_name("blk.0.attn-q weight;import os")
    assert literal_name("blk.0.attn_q.weight") == "'blk.0.attn_q.weight'"


def _tiny_graph(param_name: str, label: str) -> ModuleOp:
    table = O.ParamOp(param_name, TensorType(f32, (8, 4)))
    ids = O.InputOp("tokens", TensorType(i32, (2,)), "inp_tokens")
    rows = O.GetRowsOp.create(operands=[table.result, ids.result], result_types=[TensorType(f32, (2, 4))],
                              attributes={"name": StringAttr(label)})
    block_ops = [table, ids, rows, func.ReturnOp(rows.results[0])]
    fn = func.FuncOp("prefill", ((), (TensorType(f32, (2, 4)),)))
    fn.body.block.add_ops(block_ops)
    fn.attributes["op.n_ctx"] = fn.attributes["op.n_kv"] = IntegerAttr(16, i64)
    return ModuleOp([fn])


def test_odd_names_never_reach_the_code():
    # a hostile op label becomes a sanitized local and comment
    module = _tiny_graph("token_embd.weight", "x\nimport os; os.system('rm')")
    list(module.walk())[4].results[0].name_hint = "embd.x-0"
    src = emit_cpu(module, "evil\nname')")
    tree = ast.parse(src)
    assert not any(isinstance(n, ast.Name) and n.id == "os" for n in ast.walk(tree))
    assert "\nimport os" not in src and "evil\n" not in src and "MODEL_NAME = 'evil_name__'" in src
    assert "embd_x_0 = get_rows(self.token_embd_weight, v1)  # x_import_os__os.system__rm__: 2x4 f32" in src
    # a hostile tensor name is refused, not quoted
    with pytest.raises(CodegenError, match="tensor name 'blk.0.attn-q weight;import os'"):
        emit_cpu(_tiny_graph("blk.0.attn-q weight;import os", "embd"))


def test_emit_is_deterministic():
    a = emit_cpu(_tiny_graph("token_embd.weight", "embd"))
    b = emit_cpu(_tiny_graph("token_embd.weight", "embd"))
    assert a == b
    compile(a, "<generated>", "exec")
    assert "N_CTX = 16" in a and "def prefill(self, tokens, start):" in a
