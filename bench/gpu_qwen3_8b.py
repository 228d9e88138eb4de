"""A Qwen3-8B-shaped model with random weights, and strata's CUDA target against torch.compile of
transformers' Qwen3ForCausalLM on the same weights and the same GPU (`bench/gpu_check.sh` runs it).

    python bench/gpu_qwen3_8b.py build DIR [--tiny]        # config.json + random safetensors + tokenizer
    python bench/gpu_qwen3_8b.py bench DIR [--prompt 512] [--new 128] [--json FILE] [--interpret]

`build` writes examples/qwen3-8b's config (`--tiny`: a 2-layer model of the same family, f32, for
a check on the CPU) and weights drawn by transformers' own initialisation of Qwen3ForCausalLM
(bf16; on the GPU when there is one), saved with `save_pretrained` as safetensors, and the
default 512-token tokenizer beside them (the server needs one; the benches send token ids).

`bench` compiles DIR for `--target cuda` through strata's own opener (the weights read from the
safetensors, prepared as the recipe says; bf16 by default, f32 under `--interpret`), loads the
same files into transformers (`from_pretrained`, SDPA attention), and times on the same device a
prefill of --prompt tokens and --new greedy decode steps: strata's generated `Model` (CUDA-graph
decode), HF eager and HF torch.compile (mode reduce-overhead, static cache; `--no-compile` skips
it; under --interpret it is skipped: reduce-overhead is CUDA graphs). The best of --reps runs
counts. Decode's share of the HBM bandwidth: the bytes one step reads (every weight as
prepared, the KV rows attended) over the step's time, against the device's bandwidth from
`HBM_TB_S` by its name. It prints one line per engine and, with --json, writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

#: Peak HBM bandwidth (TB/s) by a substring of torch.cuda.get_device_name(), the most specific first.
HBM_TB_S: tuple[tuple[str, float], ...] = (
    ("GH200", 4.9), ("H200", 4.8), ("H100 NVL", 3.9), ("H100 PCIe", 2.0), ("H100", 3.35), ("H800", 3.35),
    ("A100-SXM4-80GB", 2.039), ("A100 80GB PCIe", 1.935), ("A100", 1.555), ("L40S", 0.864), ("L4", 0.3),
)
#: The tiny model of `build --tiny`: Qwen3's family (qk-norm, GQA) at a size the interpreter runs in seconds.
TINY = {"vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 512,
        "torch_dtype": "float32"}


def hbm_tb_s(device_name: str) -> float | None:
    """The device's peak HBM bandwidth in TB/s, or None for a device the table does not know."""
    return next((bw for key, bw in HBM_TB_S if key in device_name), None)


# ---------------------------------------------------------------------------------------------
# build


def build(directory: Path, tiny: bool, device: str) -> Path:
    """Write the config, random weights (transformers' initialisation) and tokenizer into `directory`."""
    import torch
    import transformers

    from strata.models.default_vocab import DATA_DIR, FILES

    cfg = json.loads((ROOT / "examples" / "qwen3-8b" / "config.json").read_text())
    if tiny:
        cfg.update(TINY)
    dtype = torch.float32 if cfg["torch_dtype"] == "float32" else torch.bfloat16
    conf = transformers.AutoConfig.for_model(cfg.pop("model_type"), **{k: v for k, v in cfg.items()
                                                                      if k != "architectures"})
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.Qwen3ForCausalLM._from_config(conf, dtype=dtype)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True, max_shard_size="5GB")
    for name in FILES:
        shutil.copyfile(DATA_DIR / name, directory / name)
    return directory


# ---------------------------------------------------------------------------------------------
# bench


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_time(fn, reps: int, device: str) -> float:
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def run_strata(m, prompt, n_new: int, reps: int, device: str) -> dict:
    """Prefill then n_new - 1 decode steps of the generated Model `m` (ids stay on the device)."""
    import torch

    state: dict = {}

    def prefill():
        state["tok"], state["logits"] = m.prefill(prompt, 0)

    def decode():
        tok, out = state["tok"], []
        for i in range(n_new - 1):
            tok, _ = m.decode(tok, prompt.shape[0] + i)
            out.append(tok.reshape(1).clone())  # the graph's output buffer is reused
        state["ids"] = torch.cat(out)

    prefill()
    decode()  # warm-up: Triton's JIT and the graph capture
    t_pre = best_time(prefill, reps, device)
    logits = state["logits"].reshape(-1).float().cpu()
    t_dec = best_time(decode, reps, device)
    ids = [int(state["tok"].reshape(-1)[0])] + state["ids"].cpu().tolist()
    return {"prefill_s": t_pre, "decode_s": t_dec, "ids": ids, "first_logits": logits}


def run_hf(model, prompt, n_new: int, reps: int, device: str, compiled: bool) -> dict:
    """HF `generate` (greedy): the prefill is a 1-token generation, decode the rest."""
    import torch

    ids = prompt.reshape(1, -1).long()
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    if compiled:
        model.generation_config.cache_implementation = "static"
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False)

    def gen(n):
        with torch.inference_mode():
            return model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)

    out = gen(n_new)  # warm-up (compiles the prefill, the decode step)
    gen(1)
    t1 = best_time(lambda: gen(1), reps, device)
    tn = best_time(lambda: gen(n_new), reps, device)
    with torch.inference_mode():
        first = model(ids).logits[0, -1].float().cpu()
    return {"prefill_s": t1, "decode_s": max(tn - t1, 1e-9), "ids": out[0, ids.shape[1]:].tolist(),
            "first_logits": first}


def _rates(r: dict, n_prompt: int, n_new: int, steps: int) -> dict:
    return {"prefill_tok_s": n_prompt / r["prefill_s"], "decode_tok_s": steps / r["decode_s"],
            "prefill_ms": r["prefill_s"] * 1e3, "decode_ms_per_token": r["decode_s"] / steps * 1e3}


def bench(directory: Path, args: argparse.Namespace) -> dict:
    import gc

    import torch
    import transformers
    from gpu_decode import decode_bytes

    from strata.runtime.opener import open_model

    device = "cpu" if args.interpret else "cuda"
    recipe = args.recipe or ("f32" if args.interpret else "bf16")
    ctx = 1 << math.ceil(math.log2(args.prompt + args.new + 1))
    t0 = time.perf_counter()
    # the weights were drawn by `build`: not scanned for NaN (8B values would take its time)
    opened = open_model(directory, "cuda", {"ctx": ctx, "recipe": recipe}, interpret=args.interpret,
                        cache_dir=args.cache_dir or directory / ".strata-cache" / f"bench-{recipe}", check_weights=False)
    program = opened.program()
    m = program.model
    _sync(device)
    compile_s = time.perf_counter() - t0
    vocab = int(m.VOCAB)
    prompt = torch.randint(0, vocab, (args.prompt,), generator=torch.Generator().manual_seed(1)).to(torch.int32)
    res = {"strata": run_strata(m, prompt.to(device), args.new, args.reps, device)}
    step_bytes = decode_bytes(m, args.prompt + args.new // 2)
    del m, program, opened
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    dtype = torch.float32 if recipe == "f32" else torch.bfloat16
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="sdpa")
    hf = hf.to(device).eval()
    res["eager"] = run_hf(hf, prompt.to(device), args.new, args.reps, device, compiled=False)
    errors = {}
    if not args.no_compile and device == "cuda":
        try:
            res["compile"] = run_hf(hf, prompt.to(device), args.new, args.reps, device, compiled=True)
        except Exception as e:  # noqa: BLE001 - reported in the table, the other numbers stand
            errors["compile"] = (str(e).splitlines() or [type(e).__name__])[0][:200]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"
    bw = hbm_tb_s(name) if device == "cuda" else None
    steps = {"strata": args.new - 1, "eager": args.new - 1, "compile": args.new - 1}
    step_s = res["strata"]["decode_s"] / (args.new - 1)
    ref = res["eager"]
    report = {
        "model": directory.name, "device": name, "recipe": recipe,
        "prompt": args.prompt, "new": args.new, "compile_and_load_s": compile_s,
        "engines": {k: _rates(r, args.prompt, args.new, steps[k]) for k, r in res.items()},
        "errors": errors,
        "decode_gb_per_token": step_bytes / 1e9,
        "hbm_tb_s": bw,
        "hbm_pct": 100.0 * step_bytes / step_s / (bw * 1e12) if bw else None,
        "ids_agree": sum(a == b for a, b in zip(res["strata"]["ids"], ref["ids"])),
        "first_logits_max_diff": float((res["strata"]["first_logits"] - ref["first_logits"]).abs().max()),
    }
    return report


def _print(report: dict) -> None:
    for k, r in report["engines"].items():
        print(f"{report['model']} {report['recipe']} {k}: prefill {report['prompt']} tokens "
              f"{r['prefill_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.1f} tok/s")
    for k, e in report["errors"].items():
        print(f"{report['model']} {k}: failed: {e}")
    pct = report["hbm_pct"]
    print(f"decode reads {report['decode_gb_per_token']:.3f} GB per token: "
          + (f"{pct:.1f}% of {report['hbm_tb_s']} TB/s ({report['device']})" if pct is not None
             else f"no HBM figure for {report['device']}")
          + f"; greedy ids agree with HF eager on {report['ids_agree']}/{report['new']}, first logits within "
          f"{report['first_logits_max_diff']:.2e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_qwen3_8b.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="config + random safetensors + tokenizer")
    b.add_argument("dir", type=Path)
    b.add_argument("--tiny", action="store_true", help="a 2-layer f32 model of the family (a check on the CPU)")
    r = sub.add_parser("bench", help="strata vs transformers (eager, torch.compile) on the same weights")
    r.add_argument("dir", type=Path)
    r.add_argument("--prompt", type=int, default=512)
    r.add_argument("--new", type=int, default=128)
    r.add_argument("--reps", type=int, default=2)
    r.add_argument("--recipe", default=None, help="strata's recipe (default bf16; f32 with --interpret)")
    r.add_argument("--interpret", action="store_true", help="on the CPU: Triton's interpreter, HF on the CPU")
    r.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    r.add_argument("--cache-dir", type=Path, default=None)
    r.add_argument("--json", type=Path, default=None, help="write the report here")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.command == "build":
        import torch

        device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
        t0 = time.perf_counter()
        build(args.dir, args.tiny, device)
        print(f"built {args.dir} ({'tiny' if args.tiny else 'Qwen3-8B'}, on {device}) in {time.perf_counter() - t0:.1f} s")
        return 0
    if args.prompt < 1 or args.new < 2 or args.reps < 1:
        p.error("--prompt and --reps must be >= 1 and --new >= 2")
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    else:
        import torch

        if not torch.cuda.is_available():
            print("gpu_qwen3_8b: needs a CUDA GPU (torch.cuda.is_available() is false); --interpret runs it on the CPU",
                  file=sys.stderr)
            return 2
    report = bench(args.dir, args)
    _print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
