"""Ahead-of-time compilation of the CUDA kernels for Hopper (sm_90a), without a GPU:

    triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32))

gives PTX and a cubin (Triton's bundled ptxas). The cubin's resources are read with the bundled
`cuobjdump --dump-resource-usage` (`CompiledKernel.n_regs` / `n_spills` are only filled in when a
GPU driver loads the kernel): registers per thread, static shared memory, local memory (spills
and stack). Triton's dynamic shared memory is `metadata.shared`.

`SPECS` holds each kernel of the library at the constexprs of Qwen3-8B (bf16) and
Qwen3.6-35B-A3B (fp8 weights, Gated DeltaNet, MoE), the sizes of the examples the target is judged on.

    python -m strata.targets.cuda.aot [--json] [--out DIR] [--only NAME] [--jobs N]

exits non-zero if a kernel fails to compile or exceeds the H200's limits. It must run with
TRITON_INTERPRET unset (the interpreter replaces @triton.jit functions, which then cannot compile).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: H200 (sm_90): registers per thread, shared memory per block (opt-in maximum).
MAX_REGS = 255
MAX_SHARED = 227 * 1024


@dataclass(frozen=True)
class Spec:
    name: str
    kernel: str  # "module.kernel" under strata.targets.cuda.kernels
    constexprs: dict[str, Any]
    ptrs: dict[str, str] = field(default_factory=dict)  # pointer params' element types (default *fp32)
    num_warps: int = 4
    num_stages: int = 2


@dataclass
class AotResult:
    name: str
    kernel: str
    regs: int
    shared: int  # bytes: Triton's dynamic shared memory + the cubin's static shared memory
    local: int  # bytes of local memory per thread (register spills and stack)
    target: str  # the PTX's .target (sm_90a)
    ok: bool
    problems: list[str]


FLOATS = {"eps", "scale"}
#: Specs known to exceed the limits (test_aot fails when one stops exceeding them, so that it is
#: removed here). None: the chunked delta rule's products read their operands from global memory 16
#: columns at a time (gdn._mm_global) instead of holding [64, 64] and [64, 128] operand tiles in
#: registers, which spilled ~8 KiB (prep) and ~1 KiB (state) per thread with IEEE f32 tl.dot.
KNOWN_SPILLS: frozenset[str] = frozenset()

_BF = {p: "*bf16" for p in ("x_ptr", "y_ptr", "r_ptr", "h_ptr", "w_ptr", "b_ptr")}
_FP8 = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "z_ptr": "*i32", "y_ptr": "*bf16", "ids_ptr": "*i32"}
_I4 = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*fp32", "z_ptr": "*u8", "y_ptr": "*bf16"}
_GG = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*u8", "z_ptr": "*u8", "y_ptr": "*bf16"}
_GGE = dict(_GG, ids_ptr="*i32")
#: The GGUF block formats' FMT codes (kernels/ggml_packed.py's GGML_FORMATS)
_GGML = (("q8_0", 3), ("q4_0", 4), ("q4_1", 5), ("q4_K", 6), ("q5_K", 7), ("q6_K", 8))
_GEMV = dict(HAS_BIAS=False, SILU_OUT=False, SILU_IN=False, HAS_IDS=False, X_DIV=1, QBN=1, QBK=1,
             BLOCK_N=16, BLOCK_K=256)
_GEMM = dict(HAS_BIAS=False, SILU_OUT=False, DOT_BF16=True, QBN=1, QBK=1, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
_ATT = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "bt_ptr": "*i32", "pos_ptr": "*i32"}
_TOK = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "table_ptr": "*i32", "pos_ptr": "*i32",
        "blk_ptr": "*i32"}
_CELLS = {"k_ptr": "*bf16", "v_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "cell_ptr": "*i64"}

SPECS: tuple[Spec, ...] = (
    # Qwen3-8B, bf16: hidden 4096, 32 q heads / 8 KV heads of 128, intermediate 12288, vocab 151936
    Spec("q8b.rms_norm_residual", "norms.rms_norm_kernel", dict(HAS_RES=True, BLOCK=4096), _BF),
    Spec("q8b.qk_norm", "norms.rms_norm_kernel", dict(HAS_RES=False, BLOCK=128), _BF),
    Spec("q8b.gemv_bf16", "gemm.gemv_kernel", dict(_GEMV, FMT=0), _BF),
    Spec("q8b.gemv_bf16_gate_up_silu", "gemm.gemv_kernel", dict(_GEMV, FMT=0, SILU_OUT=True), _BF),
    Spec("q8b.gemm_bf16", "gemm.gemm_kernel", dict(_GEMM, FMT=0), _BF, num_warps=8, num_stages=3),
    Spec("q8b.gemm_bf16_gate_up_silu", "gemm.gemm_kernel", dict(_GEMM, FMT=0, SILU_OUT=True), _BF, num_warps=8,
         num_stages=3),
    Spec("q8b.rope_neox", "attention.rope_kernel",
         dict(HEAD_DIM=128, N_DIMS=128, MODE=0, S0=0, S1=0, S2=0, S3=0, BLOCK_H=64, BLOCK_T=1),
         {"x_ptr": "*bf16", "y_ptr": "*bf16", "pos_ptr": "*i32"}),
    Spec("q8b.kv_write", "attention.kv_write_kernel", dict(PAGED=False, PAGE=16, BLOCK=1024, POS_DEV=True),
         {"k_ptr": "*bf16", "v_ptr": "*bf16", "kc_ptr": "*bf16", "vc_ptr": "*bf16", "bt_ptr": "*i32", "pos_ptr": "*i32"}),
    Spec("q8b.attention_decode", "attention.attention_kernel",
         dict(GROUP=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_M=16, BLOCK_N=16, PAGED=False, PAGE=16, DOT_BF16=True,
              POS_DEV=True), _ATT),
    Spec("q8b.attention_prefill", "attention.attention_kernel",
         dict(GROUP=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_M=64, BLOCK_N=64, PAGED=False, PAGE=16, DOT_BF16=True,
              POS_DEV=False), _ATT,
         num_warps=8),
    # the batched and paged entries: K/V to each token's cell, attention through each row's table
    # (a decode step's run: 16 x 16; a prompt chunk's: token_tiles' 32 x 32, 64 x 64, and 32 x 16 for a head of 256)
    Spec("q8b.kv_write_cells", "token_attention.kv_write_cells_kernel", dict(BLOCK=1024), _CELLS),
    Spec("q8b.token_attention_step", "token_attention.token_attention_kernel",
         dict(PAGE=16, GROUP=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_M=16, BLOCK_N=16, DOT_BF16=True), _TOK),
    Spec("q8b.token_attention_chunk32", "token_attention.token_attention_kernel",
         dict(PAGE=16, GROUP=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_M=32, BLOCK_N=32, DOT_BF16=True), _TOK, num_warps=8),
    Spec("q8b.token_attention_chunk", "token_attention.token_attention_kernel",
         dict(PAGE=16, GROUP=4, HEAD_DIM=128, BLOCK_D=128, BLOCK_M=64, BLOCK_N=64, DOT_BF16=True), _TOK, num_warps=8),
    Spec("q8b.residual_add", "elementwise.binary_kernel", dict(OP=0, BLOCK=1024),
         {"a_ptr": "*bf16", "b_ptr": "*bf16", "y_ptr": "*bf16"}),
    Spec("q8b.embed", "elementwise.embed_kernel", dict(BLOCK=1024),
         {"ids_ptr": "*i32", "table_ptr": "*bf16", "y_ptr": "*bf16"}),
    Spec("q8b.argmax", "elementwise.argmax_kernel", dict(BLOCK=4096), {"x_ptr": "*bf16", "y_ptr": "*i32"}),
    # the sampler on the device (f32 logits of every recipe), with the penalties' token counts and a
    # grammar's token mask
    Spec("q8b.sample", "sampling.sample_kernel", dict(HAS_COUNTS=True, HAS_MASK=True, BLOCK=1024, SEARCH=128),
         {"key_ptr": "*i64", "top_k_ptr": "*i32", "pc_ptr": "*i32", "oc_ptr": "*i32", "mask_ptr": "*i32",
          "y_ptr": "*i32"}),
    # Qwen3.6-35B-A3B, fp8-bf16head: hidden 2048; GDN 16 k heads / 32 v heads of 128, conv 4;
    # gated attention 16 q / 2 KV heads of 256, rotary 64 (imrope 11/11/10); 256 experts, top 8, 512
    Spec("q36.gemv_fp8", "gemm.gemv_kernel", dict(_GEMV, FMT=1, QBN=128, QBK=128), _FP8),
    Spec("q36.gemm_fp8", "gemm.gemm_kernel", dict(_GEMM, FMT=1, QBN=128, QBK=128), _FP8, num_warps=8, num_stages=3),
    Spec("q36.gemv_int4", "gemm.gemv_kernel", dict(_GEMV, FMT=2, QBN=1, QBK=128), _I4),
    Spec("q36.gemm_int4", "gemm.gemm_kernel", dict(_GEMM, FMT=2, QBN=1, QBK=128), _I4, num_warps=8, num_stages=3),
    Spec("q36.gemv_fp8_gate_up_silu", "gemm.gemv_kernel", dict(_GEMV, FMT=1, QBN=128, QBK=128, SILU_OUT=True,
                                                                BLOCK_N=8), _FP8),
    Spec("q36.gemv_int4_gate_up_silu", "gemm.gemv_kernel", dict(_GEMV, FMT=2, QBN=1, QBK=128, SILU_OUT=True,
                                                                 BLOCK_N=8), _I4),
    Spec("q36.gemm_fp8_gate_up_silu", "gemm.gemm_kernel", dict(_GEMM, FMT=1, QBN=128, QBK=128, SILU_OUT=True,
                                                               BLOCK_N=32), _FP8, num_warps=8, num_stages=3),
    Spec("q36.gemm_int4_gate_up_silu", "gemm.gemm_kernel", dict(_GEMM, FMT=2, QBN=1, QBK=128, SILU_OUT=True,
                                                                BLOCK_N=32), _I4, num_warps=8, num_stages=3),
    Spec("q36.expert_gate_up_fp8", "gemm.gemv_kernel", dict(_GEMV, FMT=1, QBN=128, QBK=128, HAS_IDS=True, X_DIV=8),
         _FP8),
    Spec("q36.expert_silu_down_fp8", "gemm.gemv_kernel", dict(_GEMV, FMT=1, QBN=128, QBK=128, HAS_IDS=True,
                                                               SILU_IN=True), _FP8),
    # GGUF's block formats read in place (recipe gguf), at Qwen3-8B's sizes with bf16 activations
    # (launch_linear's narrow tiles: 8 x 128 GEMV, 64 x 32 GEMM with 32-wide K steps)
    *(Spec(f"q8b.gemv_{t}", "gemm.gemv_kernel", dict(_GEMV, FMT=f, BLOCK_N=8, BLOCK_K=128), _GG)
      for t, f in _GGML),
    *(Spec(f"q8b.gemm_{t}", "gemm.gemm_kernel", dict(_GEMM, FMT=f, BLOCK_N=32, BLOCK_K=32), _GG, num_warps=8,
           num_stages=3) for t, f in _GGML),
    *(Spec(f"q8b.gemv_{t}_gate_up_silu", "gemm.gemv_kernel", dict(_GEMV, FMT=f, SILU_OUT=True, BLOCK_N=8,
                                                                    BLOCK_K=128), _GG) for t, f in _GGML),
    *(Spec(f"q8b.gemm_{t}_gate_up_silu", "gemm.gemm_kernel", dict(_GEMM, FMT=f, SILU_OUT=True, BLOCK_N=32,
                                                                    BLOCK_K=32), _GG, num_warps=8, num_stages=3)
      for t, f in _GGML),
    *(Spec(f"q8b.embed_{t}", "ggml_packed.gather_ggml_rows_kernel", dict(FMT=f, BLOCK=1024),
           {"ids_ptr": "*i32", "w_ptr": "*u8", "y_ptr": "*bf16"}) for t, f in _GGML),
    *(Spec(f"q36.expert_gate_up_{t}", "gemm.gemv_kernel", dict(_GEMV, FMT=f, HAS_IDS=True, X_DIV=8, BLOCK_N=8,
                                                                 BLOCK_K=128), _GGE) for t, f in _GGML),
    *(Spec(f"q36.expert_silu_down_{t}", "gemm.gemv_kernel", dict(_GEMV, FMT=f, HAS_IDS=True, SILU_IN=True,
                                                                   BLOCK_N=8, BLOCK_K=128), _GGE) for t, f in _GGML),
    Spec("q36.gdn_gates", "gdn.gdn_gates_kernel", dict(FMT=0, QBN=1, QBK=1, BLOCK_H=32, BLOCK_K=64),
         {"x_ptr": "*bf16", "w_ptr": "*bf16"}),
    Spec("q36.conv_l2", "gdn.conv_l2_kernel", dict(KW=4, HAS_SNAP=True, DK=128, BLOCK_D=128, BLOCK_S=4),
         {"x_ptr": "*bf16", "w_ptr": "*bf16"}),
    Spec("q36.gdn_step", "gdn.gdn_step_kernel", dict(DK=128, DV=128, GROUPED=True, BLOCK_K=128, BLOCK_V=32)),
    # the chunked delta rule (its launcher's 8 warps: with 4 the state kernel spills)
    Spec("q36.gdn_chunk_prep", "gdn.gdn_chunk_prep_kernel",
         dict(DK=128, DV=128, GROUPED=True, CH=64, SQUARINGS=5, PREC="ieee", BLOCK_K=32, BLOCK_V=32, KS=16),
         num_warps=8, num_stages=1),
    Spec("q36.gdn_chunk_state", "gdn.gdn_chunk_state_kernel",
         dict(DK=128, DV=128, GROUPED=True, CH=64, PREC="ieee", BLOCK_K=64, BLOCK_V=32, KS=16), num_warps=8,
         num_stages=1),
    Spec("q36.gated_rms_norm", "norms.gated_rms_norm_kernel", dict(HEAD_DIM=128, BLOCK=128),
         {"z_ptr": "*bf16", "y_ptr": "*bf16", "w_ptr": "*bf16"}),
    Spec("q36.split_qg", "elementwise.split_qg_kernel", dict(HEAD_DIM=256, BLOCK=256),
         {"x_ptr": "*bf16", "q_ptr": "*bf16", "g_ptr": "*bf16"}),
    Spec("q36.rope_imrope", "attention.rope_kernel",
         dict(HEAD_DIM=256, N_DIMS=64, MODE=3, S0=11, S1=11, S2=10, S3=0, BLOCK_H=32, BLOCK_T=256),
         {"x_ptr": "*bf16", "y_ptr": "*bf16", "pos_ptr": "*i32"}),
    Spec("q36.attention_decode_paged", "attention.attention_kernel",
         dict(GROUP=8, HEAD_DIM=256, BLOCK_D=256, BLOCK_M=16, BLOCK_N=16, PAGED=True, PAGE=16, DOT_BF16=True,
              POS_DEV=True), _ATT),
    Spec("q36.attention_prefill", "attention.attention_kernel",
         dict(GROUP=8, HEAD_DIM=256, BLOCK_D=256, BLOCK_M=64, BLOCK_N=32, PAGED=False, PAGE=16, DOT_BF16=True,
              POS_DEV=False), _ATT,
         num_warps=8),
    Spec("q36.token_attention_step", "token_attention.token_attention_kernel",
         dict(PAGE=16, GROUP=8, HEAD_DIM=256, BLOCK_D=256, BLOCK_M=16, BLOCK_N=16, DOT_BF16=True), _TOK),
    Spec("q36.token_attention_chunk", "token_attention.token_attention_kernel",
         dict(PAGE=16, GROUP=8, HEAD_DIM=256, BLOCK_D=256, BLOCK_M=32, BLOCK_N=16, DOT_BF16=True), _TOK),
    Spec("q36.sigmoid_gate_mul", "elementwise.binary_kernel", dict(OP=1, BLOCK=1024),
         {"a_ptr": "*bf16", "b_ptr": "*bf16", "y_ptr": "*bf16"}),
    Spec("q36.topk_softmax", "moe.topk_softmax_kernel", dict(TOP_K=8, NORM=True, BLOCK_E=256, BLOCK_K=8),
         {"id_ptr": "*i32"}),
    Spec("q36.blend_shared", "moe.blend_kernel", dict(TOP_K=8, SHARED=True, BLOCK_H=1024, BLOCK_K=1024),
         {"ed_ptr": "*bf16", "sd_ptr": "*bf16", "x_ptr": "*bf16", "sg_ptr": "*bf16", "y_ptr": "*bf16"}),
)


def signature(fn, spec: Spec) -> dict[str, str]:
    sig = {}
    for p in fn.params:
        if p.is_constexpr:
            if p.name not in spec.constexprs:
                raise ValueError(f"{spec.name}: constexpr {p.name} not given")
            sig[p.name] = "constexpr"
        elif p.name.endswith("_ptr"):
            sig[p.name] = spec.ptrs.get(p.name, "*fp32")
        else:
            sig[p.name] = "fp32" if p.name in FLOATS else "i32"
    return sig


def resource_usage(cubin: bytes) -> dict[str, int]:
    """REG, SHARED, LOCAL, STACK of the cubin's one function (bundled cuobjdump)."""
    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", f.name], capture_output=True,
                              text=True, check=True).stdout
    line = next(ln for ln in text.splitlines() if "REG:" in ln)
    return {k: int(v) for k, v in re.findall(r"(REG|SHARED|LOCAL|STACK):(\d+)", line)}


def compile_spec(spec: Spec, out_dir: Path | None = None, fn=None, arch: tuple[int, int] = (90, 32)) -> AotResult:
    """Compile `spec` (its kernel from the library, or `fn`, a generated kernels.py's) for
    GPUTarget("cuda", *arch)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from strata.targets.cuda.kernel_table import kernel

    fn = fn if fn is not None else kernel(spec.kernel)
    if not hasattr(fn, "params"):
        raise RuntimeError("TRITON_INTERPRET is set: the kernels are interpreted functions and cannot be compiled")
    src = ASTSource(fn=fn, signature=signature(fn, spec), constexprs=dict(spec.constexprs))
    ck = triton.compile(src, target=GPUTarget("cuda", *arch),
                        options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    use = resource_usage(ck.asm["cubin"])
    shared = int(ck.metadata.shared) + use.get("SHARED", 0)
    local = use.get("LOCAL", 0) + use.get("STACK", 0)
    problems = []
    if use["REG"] > MAX_REGS:
        problems.append(f"{use['REG']} registers > {MAX_REGS}")
    if shared > MAX_SHARED:
        problems.append(f"{shared} bytes of shared memory > {MAX_SHARED}")
    if local:
        problems.append(f"{local} bytes of local memory per thread (spills)")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{spec.name}.ptx").write_text(ck.asm["ptx"])
        (out_dir / f"{spec.name}.cubin").write_bytes(ck.asm["cubin"])
    m = re.search(r"^\.target\s+(\S+)", ck.asm["ptx"], re.M)
    return AotResult(spec.name, spec.kernel, use["REG"], shared, local, m.group(1) if m else "?", not problems,
                     problems)


def _compile_or_report(s: Spec, out: Path | None) -> AotResult:
    try:
        return compile_spec(s, out)
    except Exception as e:  # noqa: BLE001 - a failed compile is a reported result
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return AotResult(s.name, s.kernel, 0, 0, 0, "", False, [f"compile failed: {msg}"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strata.targets.cuda.aot", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--out", type=Path, help="write each kernel's PTX and cubin here")
    ap.add_argument("--only", action="append", help="compile only these specs (by name)")
    ap.add_argument("--jobs", type=int, default=1, help="compile in this many processes")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("error: unset TRITON_INTERPRET to compile the kernels ahead of time", file=sys.stderr)
        return 2
    specs = [s for s in SPECS if not args.only or s.name in args.only]
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_compile_or_report, specs, [args.out] * len(specs)))
    else:
        results = [_compile_or_report(s, args.out) for s in specs]
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        for r in results:
            status = "ok" if r.ok else "FAIL " + "; ".join(r.problems)
            print(f"{r.name:32} {r.target:7} regs {r.regs:3}  shared {r.shared:6}  local {r.local:5}  {status}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
