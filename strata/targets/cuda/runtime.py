"""The host runtime of the CUDA target: the fixed part of a compiled model's `model.py`.

`strata.targets.cuda.emit` copies this file's source into `OUT/model.py` after the
generated header and appends the generated part (the weight table, the state table and one
method per entry, each a sequence of kernel launches, one per blueprint group). So this file
imports nothing from strata but, where it is installed, the base of its user errors: only
numpy, torch and (through `kernels.py`) triton.

What it does:

* loads `kernels.py`, the generated @triton.jit kernels and their launchers, beside this file;
* prepares each weight as its node's format says, on the device: fp8 e4m3 with one scale per
  block (each stored tensor quantized apart, a merged projection keeping a row map to its
  parts' scale rows), int4 asymmetric per block along K (ONNX Runtime's formula), bf16, or f32,
  after the weight table's conversions (`plus_one`, `neg_exp`, `squeeze`, `ungroup_rows`);
  under Triton's interpreter (`interpret`) quantized weights are dequantized on the host and
  every edge is f32 (the interpreter gets bf16 arithmetic and f32->fp8 casts wrong); a GGUF
  block format (`q4_K`, ..., or `gguf`: each part in its own) as the file's blocks, uint8,
  never dequantized (the store's `packed`, rows in the IR's order; the GEMV/GEMM kernels
  dequantize them in registers, under the interpreter too), or, where the store cannot give a
  part's blocks (rows it makes otherwise than the file has them: Qwen3.5's attn_qkv), the
  store's values of the node's weight in f32;
* allocates the state buffers (the KV cache, paged with an identity block table when the
  blueprint says paged, and the conv / recurrent state, zeroed when a sequence starts);
* runs an entry group by group, greedy sampling on the device (argmax), and for decode an
  optional CUDA graph (`Model(..., cuda_graph=True)`): the position is read by the kernels
  from a device scalar, so one captured step replays at every position;
* samples with the compiled sampler (`sample_logits`: the sampling kernel on the device, on
  the logits a step returned, or the numpy sampler on the host, by the sampler's placement).
"""

from __future__ import annotations

import hashlib
import importlib.util
import linecache
import os
import re
import sys
from pathlib import Path

import numpy as np
import torch

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i32": torch.int32}
#: ggml's type ids (GGUF's tensor types) of the block formats the kernels read in place
GGML_TYPE_NAMES = {8: "q8_0", 2: "q4_0", 3: "q4_1", 12: "q4_K", 13: "q5_K", 14: "q6_K"}
E4M3_MAX = 448.0
PAGE = 16  # strata.targets.target.KV_PAGE_SIZE (this file imports nothing from strata)


class ModelError(ValueError):
    """A request or an input the compiled model cannot take (one line). The cuda program
    (strata/targets/cuda/program.py) turns it into a StrataError at its boundary: this file
    imports nothing from strata."""


def _load_kernels():
    """`kernels.py` beside this file, imported by path (its own module name: Triton reads the
    kernels' source from the file)."""
    path = Path(__file__).resolve().with_name("kernels.py")
    name = "strata_cuda_kernels_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Weights


def _tensor(a, device) -> torch.Tensor:
    """A stored weight (a numpy array, ml_dtypes' bfloat16 included, or a torch tensor) on `device`."""
    if torch.is_tensor(a):
        return a.to(device)
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16).copy()).view(torch.bfloat16).to(device)
    if a.dtype.kind not in "fiub":
        raise ModelError(f"a weight of element type {a.dtype} cannot be read")
    if not a.flags.writeable or not a.flags.c_contiguous:  # a memory-mapped checkpoint: copy once
        a = np.array(a, order="C")
    return torch.from_numpy(a).to(device)


def _ungroup_rows(w: torch.Tensor, args) -> torch.Tensor:
    g, lo, hi = int(args[0]), int(args[1]), int(args[2])
    sizes = [int(a) for a in args[3:]]
    groups = w.reshape((g, sum(sizes)) + tuple(w.shape[1:]))
    starts = np.cumsum([0] + sizes)
    return torch.cat([groups[:, int(starts[j]):int(starts[j + 1])].reshape((-1,) + tuple(w.shape[1:]))
                      for j in range(lo, hi)], dim=0)


def _convert(w: torch.Tensor, kind: str | None, args) -> torch.Tensor:
    """The weight table's conversions (as llama.cpp's GGUF stores the weight)."""
    if kind is None:
        return w
    if kind == "plus_one":
        return w.float() + 1.0
    if kind == "neg_exp":
        return -torch.exp(w.float())
    if kind == "squeeze":
        return w.squeeze()
    if kind == "ungroup_rows":
        if w.dtype == torch.float8_e4m3fn:
            return _ungroup_rows(w.view(torch.uint8), args).view(torch.float8_e4m3fn)
        return _ungroup_rows(w, args)
    raise ModelError(f"unknown weight conversion '{kind}'")


def quantize_fp8_block(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(q e4m3 [.., N, K], scale_inv f32 [.., ceil(N/bn), ceil(K/bk)]): max|w| / 448 per block
    (1 for an all-zero block), q = w / scale rounded to nearest-even, saturated at +-448."""
    w = w.float()
    bn, bk = block
    *lead, n, k = w.shape
    sn, sk = -(-n // bn), -(-k // bk)
    pad = w.new_zeros(*lead, sn * bn, sk * bk)
    pad[..., :n, :k] = w.abs()
    amax = pad.reshape(*lead, sn, bn, sk, bk).amax(dim=(-3, -1))
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    full = scale.repeat_interleave(bn, dim=-2).repeat_interleave(bk, dim=-1)[..., :n, :k]
    return (w / full).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def _roundf(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def quantize_int4_block(w: torch.Tensor, block: int):
    """ONNX Runtime's block-wise asymmetric int4 along K: (q uint8 0..15, scale f32, zero uint8)."""
    w = w.float()
    k = w.shape[-1]
    nb = -(-k // block)
    pad = w.new_zeros(*w.shape[:-1], nb * block)
    pad[..., :k] = w
    b = pad.reshape(*w.shape[:-1], nb, block)
    mn = b.amin(dim=-1).clamp(max=0.0)
    mx = b.amax(dim=-1).clamp(min=0.0)
    scale = (mx - mn) / 15.0
    nz = scale != 0
    safe = torch.where(nz, scale, torch.ones_like(scale))
    zp = torch.where(nz, _roundf(0.0 - mn / safe).clamp(0, 15), torch.zeros_like(scale))
    recip = torch.where(nz, 1.0 / safe, torch.zeros_like(scale))
    q = _roundf(b * recip[..., None] + zp[..., None]).clamp(0, 15)
    return q.reshape(*w.shape[:-1], nb * block)[..., :k].to(torch.uint8), scale, zp.to(torch.uint8)


# ---------------------------------------------------------------------------------------------
# Errors of a kernel launch


def _first_line(e: BaseException) -> str:
    """One line of what went wrong: Triton's own message (an interpreter or compilation error
    keeps it in `error_message`; a compilation error without one, in its cause), else the text."""
    text = getattr(e, "error_message", None)
    if not text and e.__cause__ is not None:
        text = f"{type(e.__cause__).__name__}: {e.__cause__}"
    lines = [ln.strip() for ln in str(text or e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def launch_failure(entry: str, e: BaseException) -> str:
    """The one-line message of an exception raised while the entry `entry` ran: the group whose
    launch raised it (the generated `# rule: nodes` comment above the launch in this file), the
    launcher, and the error's first line."""
    where = ""
    tb = e.__traceback__
    frame = None
    while tb is not None:  # the innermost frame of the entry method in this file
        if tb.tb_frame.f_code.co_filename == __file__ and tb.tb_frame.f_code.co_name == f"_{entry}":
            frame = tb
        tb = tb.tb_next
    if frame is not None:
        line = frame.tb_lineno
        call = re.search(r"K\.(launch_\w+)", linecache.getline(__file__, line))
        group = next((linecache.getline(__file__, i).strip()[2:] for i in range(line - 1, 0, -1)
                      if linecache.getline(__file__, i).strip().startswith("# ")), "")
        rule, _, nodes = group.partition(": ")
        nodes = nodes if len(nodes) <= 80 else nodes[:77] + "..."
        where = f" in group {rule} ({nodes})" if rule else ""
        where += f", {call.group(1)}" if call else ""
    detail = _first_line(e)
    return f"@{entry}: a kernel launch failed{where}: {type(e).__name__}" + (f": {detail}" if detail else "")


# ---------------------------------------------------------------------------------------------
# The runtime


class Runtime:
    """The compiled model: `Model(weights)` with `weights` a mapping (or a getter) from
    llama.cpp tensor names to arrays or tensors. The generated subclass sets the tables."""

    MODEL_NAME = ""
    RECIPE = ""
    N_CTX = 0
    VOCAB = 0
    TOP_K = 0  # routed experts per token (0: no experts)
    #: node weights: (kind, parts, format, block); kind linear (a kernels.Weight), dense
    #: (the format's values as a float tensor) or raw (f32, as stored and converted)
    WEIGHTS: tuple = ()
    #: name -> (stored name, conversion, its args)
    CONVERT: dict = {}
    #: name -> (shape, element type); recurrent: zeroed when a sequence starts; paged: KV in pages
    STATE: dict = {}
    RECURRENT: tuple = ()
    PAGED: tuple = ()
    #: (n_dims, freq_base, freq_scale, freq_factors or None) of each rope
    ROPES: tuple = ()
    ROPE_MODES: tuple = ()

    def __init__(self, weights, *, device: str | None = None, interpret: bool | None = None,
                 cuda_graph: bool = False):
        #: the kernels module (`kernels.py` beside this file): each entry method reads it as `K`
        self.kernels = _load_kernels()
        self.interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") if interpret is None else interpret
        if device is None:
            device = "cpu" if self.interpret else "cuda"
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            raise ModelError("no CUDA device: run under TRITON_INTERPRET=1 on the CPU (strata run --interpret)")
        self.device = torch.device(device)
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        #: a GEMM whose node takes bf16 activations multiplies in bf16 (not under the interpreter)
        self.bf16_dot = not self.interpret
        self._get = weights.get if hasattr(weights, "get") else weights if callable(weights) else weights.__getitem__
        self._packed = getattr(weights, "packed", None)
        cache: dict = {}
        self.w = [self._prepare(spec, cache) for spec in self.WEIGHTS]
        del cache
        self._get = self._packed = None
        self.inv = [self.kernels.rope_inv_freq(*r, device=self.device) for r in self.ROPES] if self.ROPES else []
        self.state = {}
        for name, (shape, elem) in self.STATE.items():
            shape = tuple(shape)
            if name in self.PAGED:
                shape = (-(-shape[0] // PAGE) * PAGE, *shape[1:])
            self.state[name] = torch.zeros(shape, dtype=self._dt(elem), device=self.device)
        pages = max([self.state[n].shape[0] // PAGE for n in self.PAGED] or [0])
        self.bt = torch.arange(pages, dtype=torch.int32, device=self.device) if self.PAGED else None
        self._graph = None

    # -- weights ------------------------------------------------------------------------------

    def _dt(self, elem: str) -> torch.dtype:
        if self.interpret and elem != "i32":
            return torch.float32
        return DTYPES[elem]

    def _stored(self, name: str) -> tuple[torch.Tensor, str | None, tuple]:
        source, kind, args = self.CONVERT.get(name, (name, None, ()))
        try:
            a = self._get(source)
        except KeyError:
            a = None
        if a is None:
            raise ModelError(f"weight '{source}' is missing")
        return _tensor(a, self.device), kind, args

    def _raw(self, name: str) -> torch.Tensor:
        w, kind, args = self._stored(name)
        return _convert(w, kind, args).float().contiguous()

    def _prepare(self, spec, cache: dict):
        kind, parts, fmt, block = spec
        key = (kind, parts, fmt, block)
        if key not in cache:
            cache[key] = self._prepare_new(kind, parts, fmt, block)
        return cache[key]

    def _blocks(self, name: str, fmt: str):
        """(ggml type, uint8 [rows, row bytes] on the device, values per row) of weight `name` as
        its GGUF file stores it, rows in the IR's order, or None when the store cannot give them;
        `fmt` the type compiled for (`gguf`: any the kernels read)."""
        source, conv, _ = self.CONVERT.get(name, (name, None, ()))
        found = self._packed(name) if self._packed is not None and conv is None and source == name else None
        if found is None:  # a store of arrays, or rows the store makes from the file's otherwise (Qwen3.5's qkv)
            return None
        type_id, blocks, order = found
        ggml = GGML_TYPE_NAMES.get(int(type_id))
        if ggml is None or fmt not in (ggml, "gguf"):
            raise ModelError(f"weight '{name}' is stored as ggml type {int(type_id)}; the program was compiled "
                             f"for {fmt}")
        rows = blocks if torch.is_tensor(blocks) else torch.from_numpy(np.array(blocks, dtype=np.uint8, order="C"))
        if order is not None:
            rows = rows[torch.from_numpy(np.asarray(order, dtype=np.int64))]
        _, qk, nbytes, _ = self.kernels.GGML_FORMATS[ggml]
        return ggml, rows.to(self.device).contiguous(), rows.shape[-1] // nbytes * qk

    def _prepare_packed(self, kind, parts, fmt, experts: int):
        """A weight in the blocks its file stores (`experts` > 1: [experts, rows, row bytes], the
        file's rows of each expert in turn)."""
        if kind != "linear":
            raise ModelError(f"weight '{parts[0]}': a GGUF block format is read by the GEMV/GEMM kernels only")
        found = [self._blocks(name, fmt) for name in parts]
        if None in found:  # the file's values then, dequantized by the store (as the cpu target's native kernels do)
            w = torch.cat([self._raw(n) for n in parts], dim=-2).contiguous()
            return self.kernels.Weight(w, int(w.shape[-1]))
        if experts > 1:
            found = [(g, b.reshape(experts, -1, b.shape[-1]), k) for g, b, k in found]
        types = {g for g, _, _ in found}
        if len(types) == 1:
            return self.kernels.ggml_weight(torch.cat([b for _, b, _ in found], dim=-2), found[0][2], found[0][0])
        if experts > 1:
            raise ModelError(f"weight '{parts[0]}': experts whose parts are stored in different types")
        return self.kernels.Parts([self.kernels.ggml_weight(b, k, g) for g, b, k in found])

    def _prepare_new(self, kind, parts, fmt, block):
        if kind == "raw":
            return self._raw(parts[0])
        if fmt in GGML_TYPE_NAMES.values() or fmt == "gguf":
            return self._prepare_packed(kind, parts, fmt, block[0])
        if fmt == "fp8":
            qs, scales, maps, base = [], [], [], 0
            for name in parts:  # each stored tensor quantized apart, as a quantized checkpoint holds it
                w, conv, args = self._stored(name)
                q, s = quantize_fp8_block(w.float(), block)
                rows = torch.arange(w.shape[-2], device=self.device, dtype=torch.int32) // block[0]
                q, rows = _convert(q, conv, args), _convert(rows[:, None], conv, args)[:, 0]
                qs.append(q)
                scales.append(s)
                maps.append(rows + base)
                base += s.shape[-2]
            q, s, rmap = torch.cat(qs, dim=-2), torch.cat(scales, dim=-2), torch.cat(maps)
            if self.interpret or kind == "dense":  # the dequantized values, f32
                cols = torch.arange(q.shape[-1], device=self.device) // block[1]
                dense = q.float() * s[..., rmap.long(), :][..., cols]
                return dense if kind == "dense" else self.kernels.Weight(dense.contiguous(), int(q.shape[-1]))
            return self.kernels.Weight(q.contiguous(), int(q.shape[-1]), self.kernels.FP8, s.float().contiguous(),
                            rmap.to(torch.int32).contiguous(), tuple(block))
        w = torch.cat([self._raw(n) for n in parts], dim=-2)
        if fmt == "int4":
            q, s, z = quantize_int4_block(w, block[1])
            if self.interpret or kind == "dense":
                dense = (q.float() - z.float().repeat_interleave(block[1], -1)[..., :w.shape[-1]]) \
                    * s.repeat_interleave(block[1], -1)[..., :w.shape[-1]]
                return dense if kind == "dense" else self.kernels.Weight(dense.contiguous(), int(w.shape[-1]))
            k = q.shape[-1]
            if k % 2:
                q = torch.cat([q, q.new_zeros(*q.shape[:-1], 1)], dim=-1)
            packed = (q[..., 0::2] | (q[..., 1::2] << 4)).contiguous()
            return self.kernels.Weight(packed, k, self.kernels.INT4, s.contiguous(), z.contiguous(), (1, block[1]))
        if fmt in ("bf16", "f16"):
            w = w.to(DTYPES[fmt])
            if self.interpret:
                w = w.float()
        w = w.contiguous()
        return w if kind == "dense" else self.kernels.Weight(w, int(w.shape[-1]))

    # -- running ------------------------------------------------------------------------------

    def _new(self, rows: int, cols: int, elem: str) -> torch.Tensor:
        return torch.empty((rows, cols), dtype=self._dt(elem), device=self.device)

    def reset(self) -> None:
        for buf in self.state.values():
            buf.zero_()

    def _ids(self, ids) -> torch.Tensor:
        if torch.is_tensor(ids):
            return ids.to(device=self.device, dtype=torch.int32).reshape(-1, 1)
        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        if a.size == 0:
            raise ModelError("no token ids given")
        if a.min() < 0 or a.max() >= self.VOCAB:
            raise ModelError(f"a token id is outside the vocabulary [0, {self.VOCAB})")
        return torch.from_numpy(a.astype(np.int32)).reshape(-1, 1).to(self.device)

    def _check_pos(self, pos: int, n: int) -> None:
        if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) or pos < 0 or pos + n > self.N_CTX:
            raise ModelError(f"positions {pos}..{pos + n - 1} do not fit the context of {self.N_CTX} tokens")

    def _rope_positions(self, pos: int, n: int) -> dict:
        return {m: self.kernels.rope_positions(pos, n, m, device=self.device) for m in self.ROPE_MODES}

    def _entry(self, entry: str, ids, n, pos, rope) -> dict:
        """The generated method `_<entry>`; an exception from one of its launches (a Triton
        compilation or interpreter error, a CUDA error) becomes a one-line ModelError naming the group."""
        try:
            return getattr(self, f"_{entry}")(ids, n, pos, rope)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001 - reported as one line; the original is the cause
            raise ModelError(launch_failure(entry, e)) from e

    def prefill(self, ids, pos: int = 0):
        """Rows `ids` at positions pos.. (a new sequence at 0): (next id [1, 1] int32, logits
        [1, vocab] f32) of the last row, on the device."""
        ids = self._ids(ids)
        n = ids.shape[0]
        self._check_pos(pos, n)
        if pos == 0:
            for name in self.RECURRENT:
                self.state[name].zero_()
        out = self._entry("prefill", ids, n, pos, self._rope_positions(pos, n))
        return out["next"][-1:], out["logits"][-1:].float()

    def decode(self, token, pos: int):
        """One token (an int or the device tensor `prefill`/`decode` returned) at `pos`."""
        self._check_pos(pos, 1)
        if not self.cuda_graph:
            out = self._entry("decode", self._ids(token), 1, pos, self._rope_positions(pos, 1))
            return out["next"], out["logits"].float()
        if self._graph is None:
            self._capture(token, pos)
        self._g_ids.copy_(self._ids(token))
        self._g_pos.fill_(pos)
        for m, buf in self._g_rope.items():
            buf.copy_(self.kernels.rope_positions(pos, 1, m, device=self.device))
        self._graph.replay()
        return self._g_out["next"], self._g_out["logits"].float()

    def _capture(self, token, pos: int) -> None:
        """Capture one decode step (after a warm-up that compiles the kernels; the recurrent
        state it updates is restored, and the KV rows it writes are written again by the replay)."""
        self._g_ids = self._ids(token).clone()
        self._g_pos = torch.full((1,), pos, dtype=torch.int32, device=self.device)
        self._g_rope = self._rope_positions(pos, 1)
        saved = {n: self.state[n].clone() for n in self.RECURRENT}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._entry("decode", self._g_ids, 1, self._g_pos, self._g_rope)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._g_out = self._entry("decode", self._g_ids, 1, self._g_pos, self._g_rope)
        for n, buf in saved.items():
            self.state[n].copy_(buf)
        self._graph = graph

    def sample_logits(self, logits, key, step: int, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                      repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, prompt_counts=None,
                      output_counts=None, mask=None):
        """The compiled sampler (@sample_logits) on `logits` [1, vocab] (a device tensor, as
        `prefill`/`decode` return them): the drawn id [1, 1] int32 on the device. `key` is two
        int64, `step` the draw's step; the counts (each token's occurrences in the prompt and
        the output, [1, vocab]) only matter with penalties (None: none occurred); `mask` is the
        allowed tokens' bitmask [1, ceil(vocab/32)] int32 (None: every token)."""
        fn = getattr(self, "_sample_logits", None)
        if fn is None:
            raise ModelError("this compiled model has no sampler (@sample_logits); recompile it to sample")
        if not 0 <= int(step) < 2**31:
            raise ModelError(f"the sampling step must be in [0, 2**31), not {step}")
        counts = [None if c is None else torch.as_tensor(np.asarray(c), dtype=torch.int32).to(self.device)
                  for c in (prompt_counts, output_counts)]
        words = None if mask is None else torch.as_tensor(np.asarray(mask), dtype=torch.int32).to(self.device)
        return fn(logits, key, int(step), temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                  frequency_penalty, *counts, words)

    def _sampler_buffers(self, rows: int, vocab: int):
        """The sampler's output [rows, 1] and its f32 scratch row [rows, vocab], allocated once."""
        if getattr(self, "_sampler_out", None) is None:
            self._sampler_out = torch.empty((rows, 1), dtype=torch.int32, device=self.device)
            self._sampler_work = torch.empty((rows, vocab), dtype=torch.float32, device=self.device)
        return self._sampler_out, self._sampler_work

    def generate(self, prompt, max_new_tokens: int, *, keep_logits: bool = True):
        """Greedy generation: (the new ids, their logits [max_new_tokens, vocab] f32 numpy or None).
        Row i of the logits chose new token i; the ids stay on the device until the end."""
        ids = self._ids(prompt)
        n = ids.shape[0]
        if max_new_tokens < 0 or n + max(max_new_tokens - 1, 0) > self.N_CTX:
            raise ModelError(f"the prompt ({n} tokens) plus {max_new_tokens} new tokens do not fit the "
                             f"context of {self.N_CTX} tokens")
        out_ids, rows = [], []
        if max_new_tokens == 0:
            return [], np.zeros((0, self.VOCAB), np.float32) if keep_logits else None
        tok, logits = self.prefill(ids, 0)
        for i in range(max_new_tokens):
            out_ids.append(tok.reshape(1).clone())
            if keep_logits:
                rows.append(logits.reshape(-1).cpu().numpy().copy())
            if i + 1 < max_new_tokens:
                tok, logits = self.decode(tok, n + i)
        ids_out = [int(t) for t in torch.cat(out_ids).cpu().tolist()]
        return ids_out, np.stack(rows).astype(np.float32) if keep_logits else None

