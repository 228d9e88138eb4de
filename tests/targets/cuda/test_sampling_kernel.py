"""The CUDA target's sampling kernel (strata/targets/cuda/kernels/sampling.py): under Triton's
interpreter (TRITON_INTERPRET=1, CPU torch tensors) it draws exactly the numpy reference's ids
(strata.semantics.sampling.sample), and it compiles ahead of time for sm_90a with only the IEEE
f32 operations the reference performs (no FMA contraction, no approximate exp or division)."""

from __future__ import annotations

import json
import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on the CPU

import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("triton", reason="the CUDA kernel tests need triton (the `test` extra)")
import torch  # noqa: E402

from support import ROOT  # noqa: E402
from strata.semantics import kernels as K  # noqa: E402
from strata.semantics import sampling as S  # noqa: E402
from strata.targets.cuda.kernel_source import kernel_source, unresolved  # noqa: E402
from strata.targets.cuda.kernels import sampling as KS  # noqa: E402

assert type(KS.sample_kernel).__name__ == "InterpretedFunction", "the kernels were imported without TRITON_INTERPRET=1"

PARAMS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")


def random_rows(rng, rows: int, vocab: int, ties: bool) -> dict:
    """Logits, per-row parameters (every filter on and off, greedy rows among them), counts, a key."""
    logits = (rng.standard_normal((rows, vocab)) * rng.uniform(0.5, 8)).astype(np.float32)
    if ties:
        logits = np.round(logits).astype(np.float32)
    logits[rng.random((rows, vocab)) < 0.03] = -np.inf
    logits[:, 0] = np.maximum(logits[:, 0], -50.0)  # a finite maximum in every row
    pick = lambda *vals, dtype=np.float32: rng.choice(vals, size=rows).astype(dtype)  # noqa: E731
    return dict(
        logits=logits,
        key=rng.integers(-2**63, 2**63 - 1, size=2, dtype=np.int64),
        step=int(rng.integers(0, 2**31)),
        temperature=pick(0.0, 0.25, 0.8, 1.0, 1.7),
        top_k=pick(0, 1, 3, 40, vocab, vocab + 9, dtype=np.int32),
        top_p=pick(1.0, 0.95, 0.6, 0.2, 0.0),
        min_p=pick(0.0, 0.0, 0.03, 0.3),
        repetition_penalty=pick(1.0, 1.25, 0.8),
        presence_penalty=pick(0.0, 0.5, -0.3),
        frequency_penalty=pick(0.0, 0.2, -0.1),
        prompt_counts=(rng.random((rows, vocab)) < 0.05).astype(np.int32),
        output_counts=rng.integers(0, 4, (rows, vocab)).astype(np.int32) * (rng.random((rows, vocab)) < 0.05),
    )


def on_device(case: dict, block: int, counts: bool = True, search_block: int | None = None) -> np.ndarray:
    kw = {p: torch.from_numpy(np.ascontiguousarray(case[p])) for p in PARAMS}
    if counts:
        kw |= {c: torch.from_numpy(case[c]) for c in ("prompt_counts", "output_counts")}
    got = KS.launch_sample(torch.from_numpy(case["logits"]), torch.from_numpy(case["key"]), case["step"], block=block,
                           search_block=search_block or block, **kw)
    assert got.dtype == torch.int32 and got.shape == (case["logits"].shape[0], 1)
    return got.numpy()[:, 0]


def reference(case: dict, counts: bool = True) -> np.ndarray:
    kw = {p: case[p] for p in PARAMS}
    if counts:
        kw |= {c: case[c] for c in ("prompt_counts", "output_counts")}
    return S.sample(case["logits"], case["key"], case["step"], **kw)


# vocabularies that are not powers of two, in one block (37, 300) and in several (1000, 2049),
# the searches' tiles as wide as the blocks or narrower
@pytest.mark.parametrize("vocab, block, search", [(37, 1024, 1024), (300, 1024, 128), (1000, 256, 256),
                                                  (2049, 512, 512)])
def test_same_ids_as_the_numpy_sampler(vocab: int, block: int, search: int):
    """Keys and parameter sets per vocabulary (12 rows): the kernel's ids equal the reference's."""
    rng = np.random.default_rng(vocab)
    sampled = greedy = 0
    for i in range(4):
        case = random_rows(rng, 3, vocab, ties=i % 2 == 1)
        want = reference(case)
        assert np.array_equal(on_device(case, block, search_block=search), want), (vocab, i, want)
        greedy += int((case["temperature"] == 0).sum())
        sampled += int((case["temperature"] > 0).sum())
    assert greedy and sampled


def test_many_keys():
    """24 keys (seeds >= 2**32 and negative ones among them), 2 rows each, one block of 37."""
    rng = np.random.default_rng(48)
    for i in range(24):
        case = random_rows(rng, 2, 37, ties=i % 3 == 0)
        case["key"][0] = [2**32 + i, -i - 1, i][i % 3]
        assert np.array_equal(on_device(case, 64), reference(case)), (i, case["key"])


def test_cuts_through_ties_and_every_filter():
    """Rows built so that each filter decides: the top-p cut inside a group of equal logits, top-k
    ties at the k-th value, min-p at a boundary, a single kept token, penalties on the maximum."""
    vocab = 700
    base = np.repeat(np.float32([3.0, 2.0, 1.0, 0.0]), vocab // 4)[np.random.default_rng(0).permutation(vocab)]
    logits = np.stack([base] * 8)
    case = dict(logits=logits, key=np.array([2**35 + 1, 17], dtype=np.int64), step=5,
                temperature=np.float32([1.0, 1.0, 0.5, 1.0, 1.0, 2.0, 1.0, 0.0]),
                top_k=np.int32([0, 10, 0, 200, 0, 0, 1, 3]),
                top_p=np.float32([0.5, 1.0, 0.3, 0.9, 1.0, 0.0, 1.0, 0.5]),
                min_p=np.float32([0.0, 0.0, 0.0, 0.1, np.exp(-1.0), 0.0, 0.0, 0.0]),
                repetition_penalty=np.float32([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0]),
                presence_penalty=np.zeros(8, np.float32), frequency_penalty=np.zeros(8, np.float32),
                prompt_counts=np.zeros((8, vocab), np.int32), output_counts=np.zeros((8, vocab), np.int32))
    case["prompt_counts"][7, base == 3.0] = 1  # greedy row: penalized maxima
    w = S.sampling_masses(logits, **{p: case[p] for p in PARAMS},
                          prompt_counts=case["prompt_counts"], output_counts=case["output_counts"])
    kept = w > 0
    # row 0: top-p 0.5 keeps part of the 3.0 group; row 5: top-p 0 keeps one token
    assert 0 < kept[0].sum() < (base == 3.0).sum() and kept[5].sum() == 1
    assert kept[1].sum() == (base == 3.0).sum()  # top-k 10 keeps all the tied maxima
    for step in range(2):
        case["step"] = step
        assert np.array_equal(on_device(case, 256), reference(case)), step


def test_without_counts_and_determinism():
    """No counts (the kernel reads none); the same key and step give the same ids twice, another
    step other ids."""
    rng = np.random.default_rng(5)
    case = random_rows(rng, 4, 513, ties=False)
    case |= dict(temperature=np.full(4, 0.9, np.float32), top_k=np.zeros(4, np.int32), top_p=np.ones(4, np.float32),
                 min_p=np.zeros(4, np.float32))
    a = on_device(case, 256, counts=False)
    assert np.array_equal(a, reference(case, counts=False))
    assert np.array_equal(a, on_device(case, 256, counts=False))
    work = torch.full((5, 520), float("nan"))  # a caller's scratch, wider than the row
    kw = {p: torch.from_numpy(np.ascontiguousarray(case[p])) for p in PARAMS}
    got = KS.launch_sample(torch.from_numpy(case["logits"]), torch.from_numpy(case["key"]), case["step"], work=work,
                           block=256, **kw)
    assert np.array_equal(got.numpy()[:, 0], a)
    case["step"] += 1
    assert not np.array_equal(a, on_device(case, 256, counts=False))


def random_mask(rng, rows: int, vocab: int) -> np.ndarray:
    """A token bitmask [rows, ceil(vocab/32)] int32 allowing about a third of the tokens (at least
    one per row); the words' high bits set, so negative words are read as bits, not as numbers."""
    allowed = rng.random((rows, vocab)) < 0.35
    allowed[np.arange(rows), rng.integers(0, vocab, rows)] = True
    padded = np.zeros((rows, -(-vocab // 32) * 32), bool)
    padded[:, :vocab] = allowed
    bits = padded.reshape(rows, -1, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    return bits.sum(axis=2).astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("vocab, block, counts", [(37, 64, True), (300, 128, False), (2049, 512, True)])
def test_masked_same_ids_as_the_numpy_sampler(vocab: int, block: int, counts: bool):
    """With a token mask (greedy and sampled rows, every filter, with and without counts): the
    kernel's ids equal the reference's, and every id is an allowed token."""
    rng = np.random.default_rng(vocab + 7)
    for i in range(3):
        case = random_rows(rng, 4, vocab, ties=i == 1)
        mask = random_mask(rng, 4, vocab)
        kw = {p: torch.from_numpy(np.ascontiguousarray(case[p])) for p in PARAMS}
        ref = {p: case[p] for p in PARAMS}
        if counts:
            kw |= {c: torch.from_numpy(case[c]) for c in ("prompt_counts", "output_counts")}
            ref |= {c: case[c] for c in ("prompt_counts", "output_counts")}
        case["logits"][:, :] = np.where(np.isfinite(case["logits"]), case["logits"], 0.0)  # allowed rows stay finite
        got = KS.launch_sample(torch.from_numpy(case["logits"]), torch.from_numpy(case["key"]), case["step"],
                               block=block, search_block=block, mask=torch.from_numpy(mask), **kw).numpy()[:, 0]
        want = S.sample(case["logits"], case["key"], case["step"], mask=mask, **ref)
        assert np.array_equal(got, want), (vocab, i, got, want)
        words = mask.view(np.uint32)[np.arange(4), got // 32]
        assert np.all((words >> (got % 32).astype(np.uint32)) & 1), got


def test_temperature_zero_is_argmax():
    logits = np.round(np.random.default_rng(2).standard_normal((5, 333)) * 2).astype(np.float32)
    got = KS.launch_sample(torch.from_numpy(logits), [1, 2], 0, temperature=0.0, top_k=3, top_p=0.5, block=128)
    assert np.array_equal(got.numpy()[:, 0], K.argmax(logits))


def test_launcher_bad_input():
    logits = torch.zeros((2, 10))
    with pytest.raises(ValueError, match="step must be in"):
        KS.launch_sample(logits, [0, 0], 2**31)
    with pytest.raises(ValueError, match=r"output_counts \(2, 9\) do not match the logits \(2, 10\)"):
        KS.launch_sample(logits, [0, 0], 0, output_counts=torch.zeros((2, 9), dtype=torch.int32))
    with pytest.raises(ValueError, match=r"token mask \(2, 2\) is not one bit per token: \[2, 1\]"):
        KS.launch_sample(logits, [0, 0], 0, mask=torch.zeros((2, 2), dtype=torch.int32))


def test_kernels_py_carries_the_sampler():
    """A generated kernels.py that needs the sampler holds its kernel and helpers, nothing unresolved."""
    text, jit = kernel_source({"launch_sample"}, "m", "f32")
    assert {"sample_kernel", "sample_exp", "sample_key"} <= set(jit)
    assert "def _per_row" in text and not unresolved(text)


# ---------------------------------------------------------------------------------------------
# Ahead of time, for sm_90a

AOT_SCRIPT = r"""
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from strata.targets.cuda import aot
from strata.targets.cuda.kernels.sampling import sample_kernel

PTRS = {"key_ptr": "*i64", "top_k_ptr": "*i32", "pc_ptr": "*i32", "oc_ptr": "*i32", "mask_ptr": "*i32", "y_ptr": "*i32"}
out = []
for logits, has_counts, has_mask, fusion in (("*bf16", True, True, False), ("*fp32", False, False, False),
                                             ("*fp32", False, True, False), ("*fp32", True, True, True)):
    ptrs = dict(PTRS, x_ptr=logits)
    sig = {p.name: "constexpr" if p.is_constexpr else ptrs.get(p.name, "*fp32") if p.name.endswith("_ptr") else "i32"
           for p in sample_kernel.params}
    src = ASTSource(fn=sample_kernel, signature=sig, constexprs={"HAS_COUNTS": has_counts, "HAS_MASK": has_mask,
                                                                     "BLOCK": 1024, "SEARCH": 128})
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "enable_fp_fusion": fusion,
                                                                         "enable_reflect_ftz": False})
    ptx = ck.asm["ptx"]
    use = aot.resource_usage(ck.asm["cubin"])
    count = lambda pattern: len(re.findall(pattern, ptx))
    out.append(dict(logits=logits, counts=has_counts, mask=has_mask, fusion=fusion, regs=use["REG"],
                    shared=int(ck.metadata.shared) + use.get("SHARED", 0), local=use.get("LOCAL", 0) + use.get("STACK", 0),
                    target=re.search(r"^\.target\s+(\S+)", ptx, re.M).group(1), fma=count(r"\bfma\.rn(\.ftz)?\.f32"),
                    approx=count(r"\b(ex2|lg2|rcp|div)\.(approx|full)"), div_rn=count(r"\bdiv\.rn(\.ftz)?\.f32"),
                    ftz=count(r"\.ftz\.f32")))
print(json.dumps(out))
"""


def test_compiles_for_sm90a_with_ieee_f32_only():
    """sample_kernel compiles for GPUTarget("cuda", 90, 32) without a GPU, within the H200's
    registers and shared memory and without spills; its PTX has correctly rounded divisions and
    no FMA, approximate exp/division or flushed denormals, so the device performs the reference's
    operations. (The same kernel compiled with FP fusion does contract: the check can fail.)"""
    from strata.targets.cuda import aot

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", AOT_SCRIPT], env=env, capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    for r in results:
        print(r)
        assert r["target"] == "sm_90a", r
        assert r["regs"] <= aot.MAX_REGS and r["shared"] <= aot.MAX_SHARED and r["local"] == 0, r
        if r["fusion"]:
            assert r["fma"] > 0, r
        else:
            assert r["fma"] == 0 and r["approx"] == 0 and r["ftz"] == 0 and r["div_rn"] > 0, r
