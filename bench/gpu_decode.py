"""GPU decode benchmark (one H200): strata's CUDA target against HF transformers, eager and
torch.compile'd, on the same random weights in the same run.

    python bench/gpu_decode.py [--models qwen3-8b,qwen3.6-35b-a3b] [--prompt 512] [--new 128]
                               [--layers N] [--no-compile]

Models (configs from examples/): Qwen3-8B with the bf16 recipe, Qwen3.6-35B-A3B with the
fp8-bf16head recipe. HF transformers builds each model on the GPU from its config with its own
random initialisation (bf16); strata's compiled model (`strata compile --target cuda`, kernels
JIT-compiled by Triton) takes those same tensors by their llama.cpp names and prepares them
as its recipe says (fp8 block quantization on the GPU). Each engine runs a prefill of --prompt
tokens and --new greedy decode steps: strata with its CUDA-graph decode (`Model(...,
cuda_graph=True)`), HF eager with its dynamic cache, HF torch.compile (mode reduce-overhead,
static cache) through `generate`. The best of --reps runs counts.

The HBM roofline of strata's decode: the bytes one step reads (every weight as prepared, scales
included; for routed experts top_k / experts of them; the KV rows and the recurrent state read
and written) over the step time, against 4.8 TB/s.

Per-model lines first; the last line is exactly
    decode_vs_eager=<x> decode_vs_compile=<x> roofline=<percent>
with, for each, the lower of the models' values (decode tok/s of strata over the engine's).
Without a CUDA GPU it prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HBM = 4.8e12
MODELS = {"qwen3-8b": "bf16", "qwen3.6-35b-a3b": "fp8-bf16head"}


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/gpu_decode.py", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--prompt", type=int, default=512, help="prefill tokens (default 512)")
    p.add_argument("--new", type=int, default=128, help="greedy decode steps (default 128)")
    p.add_argument("--reps", type=int, default=2, help="runs per engine; the best counts (default 2)")
    p.add_argument("--layers", type=int, default=None, help="cut each model to its first N layers (a quick check)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile (decode_vs_compile=nan)")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = arg_parser()
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad or not models:
        p.error(f"--models: unknown model(s) {', '.join(bad) or '(none)'}; known: {', '.join(MODELS)}")
    if args.prompt < 1 or args.new < 2 or args.reps < 1 or (args.layers is not None and args.layers < 1):
        p.error("--prompt, --reps and --layers must be >= 1 and --new >= 2")
    args.models = models
    return args


def check_gpu() -> str | None:
    """None when a CUDA GPU is usable, else why not (one line)."""
    try:
        import torch
    except ImportError:
        return "gpu_decode: needs torch with CUDA (and triton, transformers): pip install 'strata[cuda]'"
    if not torch.cuda.is_available():
        return "gpu_decode: needs a CUDA GPU (an H200); torch.cuda.is_available() is false"
    return None


# ---------------------------------------------------------------------------------------------
# The models


def config_dir(name: str, layers: int | None, tmp: Path) -> Path:
    """examples/<name>, or a copy of its config cut to `layers` layers."""
    src = ROOT / "examples" / name
    if layers is None:
        return src
    cfg = json.loads((src / "config.json").read_text())
    for c in (cfg, cfg.get("text_config") or {}):
        if "num_hidden_layers" in c:
            c["num_hidden_layers"] = min(layers, c["num_hidden_layers"])
            if isinstance(c.get("layer_types"), list):
                c["layer_types"] = c["layer_types"][:c["num_hidden_layers"]]
    out = tmp / f"{name}-{layers}l"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def hf_config(directory: Path):
    """(the transformers config of the language model, its CausalLM class)."""
    import transformers

    cfg = json.loads((directory / "config.json").read_text())
    if "text_config" in cfg:  # Qwen3.5/3.6: the hub's ConditionalGeneration; its text model
        return transformers.Qwen3_5MoeTextConfig(**cfg["text_config"]), transformers.Qwen3_5MoeForCausalLM
    cfg = dict(cfg)
    return transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg), transformers.AutoModelForCausalLM


def hf_model(directory: Path, device: str = "cuda"):
    """The HF model built on `device` from the config, randomly initialised by transformers, bf16."""
    import torch

    conf, cls = hf_config(directory)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        make = getattr(cls, "_from_config", None) or cls.from_config  # Auto classes: from_config
        model = make(conf, dtype=torch.bfloat16)
    return model.eval()


def strata_weights(model, state: dict) -> dict:
    """Strata's weights (llama.cpp names) from the HF state dict, sharing its tensors: each
    param by its HF name, a merged expert tensor split, experts stored one by one stacked."""
    import torch

    from strata.pipeline import composite_of

    out, missing = {}, []
    for name, t in model.params().items():
        if t.hf in state:
            w = state[t.hf]
        elif "*" in t.hf or t.hf_merged:
            comp = composite_of(t)
            if comp.merged is not None and comp.merged in state:
                whole = state[comp.merged]
                n = whole.shape[comp.axis] // comp.parts
                w = whole.narrow(comp.axis, comp.part * n, n)
            elif comp.stack and all(s in state for s in comp.stack):
                w = torch.stack([state[s] for s in comp.stack])
            else:
                missing.append(t.hf)
                continue
        else:
            missing.append(t.hf)
            continue
        if tuple(w.shape) != tuple(t.shape):
            raise SystemExit(f"gpu_decode: {t.hf} has shape {list(w.shape)} in transformers, strata expects "
                             f"{list(t.shape)}")
        out[name] = w
    if missing:
        raise SystemExit(f"gpu_decode: {len(missing)} param(s) not in transformers' model: {', '.join(missing[:3])}")
    return out


def decode_bytes(m, pos: int) -> float:
    """Bytes one decode step of strata's model `m` reads at position `pos` (see the docstring)."""
    import torch

    total = 0.0
    for (kind, parts, _, _), w in zip(m.WEIGHTS, m.w):
        tensors = [w] if torch.is_tensor(w) else [t for t in (w.data, w.scale, w.zero) if t is not None]
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        if parts[0] == "token_embd.weight" and kind == "raw":
            nbytes = tensors[0].shape[-1] * tensors[0].element_size()  # one row
        elif not torch.is_tensor(w) and w.data.dim() == 3:  # experts: the routed ones only
            nbytes *= m.TOP_K / w.data.shape[0]
        total += nbytes
    for name, buf in m.state.items():
        if name.endswith(".snapshot"):
            total += buf.numel() * buf.element_size()  # written
        elif name in m.RECURRENT:
            total += 2 * buf.numel() * buf.element_size()  # read and written
        else:
            total += pos * buf.shape[1] * buf.element_size()  # the KV rows attention reads
    return total


# ---------------------------------------------------------------------------------------------
# The engines


def best(fn, reps: int) -> float:
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


def run_strata(m, prompt, n_new: int, reps: int) -> dict:
    import torch

    state = {}

    def prefill():
        state["tok"], _ = m.prefill(prompt, 0)

    def decode():
        tok = state["tok"]
        out = []
        for i in range(n_new - 1):
            tok, _ = m.decode(tok, prompt.shape[0] + i)
            out.append(tok.reshape(1).clone())  # on the device (the graph's output buffer is reused)
        state["ids"] = torch.cat(out)

    prefill()
    decode()  # warm-up: Triton JIT and the graph capture
    t_pre, t_dec = [], []
    for _ in range(reps):
        t_pre.append(best(prefill, 1))
        t_dec.append(best(decode, 1))
    first = int(state["tok"].reshape(-1)[0])
    return {"prefill_s": min(t_pre), "decode_s": min(t_dec), "ids": [first] + state["ids"].cpu().tolist()}


def run_hf(model, prompt, n_new: int, reps: int, compiled: bool) -> dict:
    import torch

    ids = prompt.reshape(1, -1).long()
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    if compiled:
        model.generation_config.cache_implementation = "static"
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False)

    def gen(n):
        with torch.inference_mode():
            return model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)

    out = gen(n_new)  # warm-up (compiles: the prefill, the decode step, each cache length)
    gen(n_new)
    gen(1)
    t1 = best(lambda: gen(1), reps)
    tn = best(lambda: gen(n_new), reps)
    return {"prefill_s": t1, "decode_s": max(tn - t1, 1e-9), "ids": out[0, ids.shape[1]:].tolist()}


def bench_model(name: str, args, tmp: Path) -> dict:
    import gc

    import torch

    from strata.pipeline.compile import ConfigOnly
    from strata.pipeline import compile_model, load_model
    from strata.targets.cuda.program import load_model_py

    recipe = MODELS[name]
    directory = config_dir(name, args.layers, tmp)
    ctx = 1 << math.ceil(math.log2(args.prompt + args.new + 1))
    t0 = time.perf_counter()
    model = load_model(directory)
    out = compile_model(model, "cuda", tmp / f"{name}-cuda", {"ctx": ctx, "recipe": recipe}, store=ConfigOnly())
    print(f"{name}: compiled for cuda ({recipe}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    t0 = time.perf_counter()
    hf = hf_model(directory)
    weights = strata_weights(model, dict(hf.state_dict()))
    print(f"{name}: random bf16 weights on the GPU in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    t0 = time.perf_counter()
    m = load_model_py(out).Model(weights, device="cuda", cuda_graph=True)
    del weights
    torch.cuda.synchronize()
    print(f"{name}: strata weights prepared ({recipe}) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    vocab = int(m.VOCAB)
    prompt = torch.randint(0, vocab, (args.prompt,), generator=torch.Generator().manual_seed(1)).to(torch.int32)
    res = {"strata": run_strata(m, prompt.cuda(), args.new, args.reps)}
    step_bytes = decode_bytes(m, args.prompt + args.new // 2)
    del m
    gc.collect()
    torch.cuda.empty_cache()
    res["eager"] = run_hf(hf, prompt.cuda(), args.new, args.reps, compiled=False)
    if not args.no_compile:
        try:
            res["compile"] = run_hf(hf, prompt.cuda(), args.new, args.reps, compiled=True)
        except Exception as e:  # noqa: BLE001 - reported, the other numbers stand
            print(f"{name}: torch.compile failed: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}",
                  file=sys.stderr)
    del hf
    gc.collect()
    torch.cuda.empty_cache()
    tok = {k: (args.new - 1) / r["decode_s"] if k == "strata" else args.new / r["decode_s"] for k, r in res.items()}
    step = res["strata"]["decode_s"] / (args.new - 1)
    roof = 100.0 * step_bytes / step / HBM
    agree = sum(a == b for a, b in zip(res["strata"]["ids"], res["eager"]["ids"]))
    print(f"{name} ({recipe}): prefill {args.prompt} tokens: strata {res['strata']['prefill_s'] * 1e3:.1f} ms, "
          f"eager {res['eager']['prefill_s'] * 1e3:.1f} ms"
          + (f", compile {res['compile']['prefill_s'] * 1e3:.1f} ms" if "compile" in res else ""))
    print(f"{name} ({recipe}): decode tok/s: strata {tok['strata']:.1f}, eager {tok['eager']:.1f}"
          + (f", compile {tok['compile']:.1f}" if "compile" in tok else ", compile n/a")
          + f"; {step_bytes / 1e9:.2f} GB per step, {step * 1e3:.2f} ms: {roof:.1f}% of {HBM / 1e12:.1f} TB/s; "
          f"greedy ids agree with eager on {agree}/{args.new} (bf16 rounding differs)")
    return {"vs_eager": tok["strata"] / tok["eager"],
            "vs_compile": tok["strata"] / tok["compile"] if "compile" in tok else float("nan"), "roofline": roof}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    problem = check_gpu()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-decode-") as tmp:
        for name in args.models:
            results.append(bench_model(name, args, Path(tmp)))

    def low(key: str) -> float:
        vals = [r[key] for r in results]
        return float("nan") if any(math.isnan(v) for v in vals) else min(vals)

    print(f"decode_vs_eager={low('vs_eager'):.2f} decode_vs_compile={low('vs_compile'):.2f} "
          f"roofline={low('roofline'):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
