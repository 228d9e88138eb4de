"""Ahead-of-time compilation of a compiled model's own kernels (`strata compile --aot sm_90a`).

The generated `model.py` runs prefills (`PREFILL_ROWS` tokens) and a CUDA-graph decode step on
torch's `meta` device (shapes only: no weights, no GPU), with every @triton.jit kernel of its
`kernels.py` replaced by a recorder: each launch gives the kernel, its constexprs, its pointer
element types and warps/stages, exactly as the model launches it. Each distinct launch is then
compiled from `kernels.py` itself for Hopper with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` (`aot.compile_spec`), and
its registers, shared memory and spills are read from the cubin.

Weights are meta tensors of the params' shapes, so a config without safetensors compiles too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from strata.artifacts.modules import import_generated
from strata.errors import StrataError
from strata.targets.cuda.aot import AotResult, Spec, compile_spec

ARCHS = {"sm_90a": (90, 32)}
#: The prefills recorded: a long prompt and every length up to 64, so that each tile size the
#: launchers pick by row count (GEMV up to 8 rows, GEMM and attention row blocks of 16, 32 and
#: 64 (token, query head) rows for any group size) is compiled.
PREFILL_ROWS = (512, *range(1, 65))
_PTR = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16", "float8_e4m3fn": "*fp8e4nv",
        "int32": "*i32", "int64": "*i64", "uint8": "*u8"}


class AotError(StrataError):
    """AOT compilation that cannot run (Triton missing or interpreted, an unknown architecture)."""


class _Recorder:
    def __init__(self, name: str, fn, seen: dict):
        self.name, self.fn, self.seen = name, fn, seen

    def __getitem__(self, grid):
        return self._launch

    def _launch(self, *args, **kwargs):
        import torch

        warps, stages = int(kwargs.pop("num_warps", 4)), int(kwargs.pop("num_stages", 3))
        params = self.fn.params
        values = dict(zip((p.name for p in params), args)) | kwargs
        constexprs, ptrs = {}, {}
        for p in params:
            v = values.get(p.name)
            if p.is_constexpr:
                constexprs[p.name] = v
            elif torch.is_tensor(v):
                ptrs[p.name] = _PTR[str(v.dtype).removeprefix("torch.")]
        spec = Spec(self.name, self.name, constexprs, ptrs, warps, stages)
        if launch_key(spec) not in self.seen:
            n = sum(k[0] == self.name for k in self.seen)
            self.seen[launch_key(spec)] = replace(spec, name=f"{self.name}.{n}")


def launch_key(spec: Spec) -> tuple:
    """What makes two launches one compiled kernel: the kernel, its constexprs, its pointers'
    element types, warps and stages."""
    return (spec.kernel, tuple(sorted(spec.constexprs.items())), tuple(sorted(spec.ptrs.items())), spec.num_warps,
            spec.num_stages)


class _OneRankOfMany:
    """The process group a tensor-parallel program's rank 0 is recorded with: its size and rank
    (a rank's launches have every rank's shapes)."""

    def __init__(self, ranks: int):
        self.ranks = ranks

    def size(self) -> int:
        return self.ranks

    def rank(self) -> int:
        return 0


def _rank_options(model_class) -> dict:
    ranks = int(getattr(model_class, "RANKS", 1))
    return {"group": _OneRankOfMany(ranks)} if ranks > 1 else {}


def _model_class(model_class):
    """The Model, a tensor-parallel one's collectives recorded as what they return (they launch
    no kernel of kernels.py: torch.distributed's own)."""
    if int(getattr(model_class, "RANKS", 1)) == 1:
        return model_class
    return type("RecordedRank", (model_class,), {"all_reduce": lambda self, x, inplace: x,
                                                 "all_gather": lambda self, x, out: out})


class _MetaWeights:
    """Meta tensors of the params' shapes; a weight the program reads in one GGUF block format
    (`q4_K`, ...) also as meta blocks of it, so that its packed kernels are the ones recorded."""

    def __init__(self, params: Mapping[str, tuple[int, ...]], weights: Sequence[tuple], formats: Mapping):
        self.params, self.formats = params, formats
        self.types = {name: spec[2] for spec in weights for name in spec[1] if spec[2] in formats}

    def __call__(self, name: str):
        import torch

        if name not in self.params:
            raise KeyError(name)
        return torch.empty(tuple(self.params[name]), dtype=torch.float32, device="meta")

    def packed(self, name: str):
        import torch

        if name not in self.types or name not in self.params:
            return None
        *rows, k = self.params[name]
        _, qk, nbytes, type_id = self.formats[self.types[name]]
        count = 1
        for r in rows:
            count *= int(r)
        return type_id, torch.empty((count, int(k) // qk * nbytes), dtype=torch.uint8, device="meta"), None


def record_launches(out_dir: str | Path, params: Mapping[str, tuple[int, ...]],
                    rows: int | Sequence[int] = PREFILL_ROWS) -> list[Spec]:
    """The distinct kernel launches of the model in `out_dir`: a prefill of `rows` tokens (of
    each count, if several) and a decode step as the CUDA graph runs it (the position on the
    device), on the meta device."""
    import torch

    out_dir = Path(out_dir)
    model = import_generated(out_dir / "model.py", what="the cuda model", tag="aot_model")
    kernels = model._load_kernels()
    seen: dict = {}
    originals = {}
    for name, fn in vars(kernels).items():
        if type(fn).__name__ == "JITFunction":
            originals[name] = fn
    if not originals:
        raise AotError("the kernels are interpreted (TRITON_INTERPRET is set): unset it to compile them")
    for name, fn in originals.items():
        setattr(kernels, name, _Recorder(name, fn, seen))
    try:
        m = _model_class(model.Model)(_MetaWeights(params, model.Model.WEIGHTS, kernels.GGML_FORMATS), device="meta",
                                      interpret=False, **_rank_options(model.Model))
        counts = [rows] if isinstance(rows, int) else list(rows)
        for count in counts:
            count = max(1, min(int(count), int(m.N_CTX) - 1))
            m.prefill(torch.zeros((count, 1), dtype=torch.int32, device="meta"), 0)
        pos = torch.zeros((1,), dtype=torch.int32, device="meta")
        m._decode(torch.zeros((1, 1), dtype=torch.int32, device="meta"), 1, pos, m._rope_positions(count, 1))
        if hasattr(m, "_tokens"):
            _record_batched(model, m)
    finally:
        for name, fn in originals.items():
            setattr(kernels, name, fn)
    return list(seen.values())


#: The runs of one sequence's tokens the batched entries' attention is recorded at: a decode
#: step and chunks whose (token, query head) rows take each tile `token_tiles` picks.
BATCHED_RUNS = (1, 4, 8, 16, 64)


def _record_batched(model, m) -> None:
    """The launches of the batched entries (`_tokens`): one run of each length of BATCHED_RUNS,
    its K/V through a table of the program's page size."""
    import numpy as np
    import torch

    layout = next(iter(m.LAYOUTS.values()))
    page = int(layout["PageSize"]) if layout["kv"] == "paged" else int(layout["MaxSeq"])
    for length in BATCHED_RUNS:
        length = max(1, min(length, int(m.N_CTX) - 1))
        pos = torch.zeros((length,), dtype=torch.int32, device="meta")
        call = model.TokenCall(torch.zeros((length,), dtype=torch.int64, device="meta"),
                               torch.zeros((1, 1), dtype=torch.int32, device="meta"), page, pos,
                               np.array([[0, length, 0]], np.int64), torch.zeros((1,), dtype=torch.int64, device="meta"))
        m._tokens(torch.zeros((length, 1), dtype=torch.int32, device="meta"), length, m._token_rope(pos), call,
                  {**m.pool, **m.run_state})


def _compile_one(kernels_path: str, spec: Spec, out: str | None, arch: str) -> AotResult:
    module = import_generated(Path(kernels_path), what="the cuda kernels", tag="aot_kernels")
    try:
        return compile_spec(spec, Path(out) if out else None, fn=getattr(module, spec.kernel), arch=ARCHS[arch])
    except Exception as e:  # noqa: BLE001 - a failed compile is a reported result
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return AotResult(spec.name, spec.kernel, 0, 0, 0, "", False, [f"compile failed: {msg}"])


def compile_model_kernels(out_dir: str | Path, params: Mapping[str, tuple[int, ...]], *, arch: str = "sm_90a",
                          aot_dir: str | Path | None = None, rows: int | Sequence[int] = PREFILL_ROWS,
                          jobs: int | None = None) -> list[AotResult]:
    """Record the model's launches and compile each for `arch`; PTX and cubin into `aot_dir`."""
    if arch not in ARCHS:
        raise AotError(f"unknown architecture '{arch}' (known: {', '.join(ARCHS)})")
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise AotError("TRITON_INTERPRET is set: unset it to compile the kernels ahead of time")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise AotError("--aot needs triton (pip install 'strata[cuda]')") from None
    kpath = Path(out_dir) / "kernels.py"
    return compile_launches([(kpath, s) for s in record_launches(out_dir, params, rows)], arch=arch, aot_dir=aot_dir,
                            jobs=jobs)


def compile_launches(launches: Sequence[tuple[str | Path, Spec]], *, arch: str = "sm_90a",
                     aot_dir: str | Path | None = None, jobs: int | None = None) -> list[AotResult]:
    """Compile each (kernels.py, launch) for `arch`, from that kernels.py; PTX and cubin into `aot_dir`."""
    if arch not in ARCHS:
        raise AotError(f"unknown architecture '{arch}' (known: {', '.join(ARCHS)})")
    paths = [str(k) for k, _ in launches]
    specs = [s for _, s in launches]
    out = [str(aot_dir) if aot_dir is not None else None] * len(specs)
    jobs = jobs or max(1, min(8, os.cpu_count() or 1))
    if jobs == 1 or len(specs) <= 1:
        return [_compile_one(k, s, o, arch) for k, s, o in zip(paths, specs, out)]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_compile_one, paths, specs, out, [arch] * len(specs)))


def report(results: list[AotResult]) -> str:
    lines = []
    for r in results:
        status = "ok" if r.ok else "; ".join(r.problems)
        lines.append(f"{r.name:28} {r.target:7} regs {r.regs:3}  shared {r.shared:6}  local {r.local:5}  {status}")
    return "\n".join(lines) + "\n"


def verdict(results: list[AotResult], allow_spills: bool) -> str | None:
    """None when every kernel fits (spills allowed if `allow_spills`), else the one-line reason."""
    bad = []
    for r in results:
        problems = [p for p in r.problems if not (allow_spills and "spills" in p)]
        if problems:
            bad.append(f"{r.name} ({problems[0]})")
    if not bad:
        return None
    hint = "" if allow_spills or not all("spills" in b for b in bad) else "; --allow-spills accepts spills"
    return f"{len(bad)} kernel(s) exceed the H200's limits: {', '.join(bad)}{hint}"
