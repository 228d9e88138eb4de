"""`strata compile --target cpu` and `strata run`: the CPU target's CLI commands.

Both take argparse namespaces (wired in `strata.cli`):

* compile: ``model`` (a directory or its config.json), ``target`` ("cpu"), ``output``
  (-o), ``ctx`` (None: min(max_position_embeddings, 4096)), ``no_flash_attn``;
* run: ``model``, ``prompt_ids`` ("1,2,3"), ``max_new_tokens``, ``dump_logits`` (a .npy
  path or None), ``ctx``, ``cache_dir`` (None: <model dir>/.strata-cache/cpu),
  ``no_flash_attn``.

Progress goes to stderr; `run`'s last stdout line is ``ids=4,5,6``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from strata.errors import StrataError
from strata.frontends.hf_config import load_hf_config
from strata.targets.cpu.driver import (
    CpuDriverError,
    check_request,
    compile_cpu,
    generate,
    load_compiled,
    manifest_matches,
    model_root,
    open_checked_weights,
    resolve_ctx,
)


def _say(text: str) -> None:
    print(f"strata: {text}", file=sys.stderr, flush=True)


def _check_target(args: argparse.Namespace) -> None:
    target = getattr(args, "target", "cpu")
    if target != "cpu":
        raise StrataError(f"target '{target}' is not available here (available: cpu)")


def cmd_compile(args: argparse.Namespace) -> int:
    _check_target(args)
    t0 = time.perf_counter()
    out = compile_cpu(args.model, args.output, ctx=args.ctx, flash_attn=not args.no_flash_attn)
    _say(f"compiled {args.model} for cpu in {time.perf_counter() - t0:.2f} s")
    print(out)
    return 0


def parse_prompt_ids(text: str) -> list[int]:
    items = [t.strip() for t in str(text).split(",")]
    if items == [""]:
        raise CpuDriverError("--prompt-ids is empty; give comma-separated token ids, e.g. 1,2,3")
    ids = []
    for t in items:
        try:
            ids.append(int(t, 10))
        except ValueError:
            raise CpuDriverError(f"--prompt-ids: {t!r} is not an integer token id "
                                 "(expected comma-separated ids, e.g. 1,2,3)") from None
    return ids


def cmd_run(args: argparse.Namespace) -> int:
    _check_target(args)
    prompt = parse_prompt_ids(args.prompt_ids)
    # Check the request against the config first: a bad prompt should not cost a compile.
    cfg = load_hf_config(args.model)
    ctx = resolve_ctx(cfg, args.ctx)
    check_request(prompt, args.max_new_tokens, cfg.vocab_size, ctx)
    root = model_root(args.model)
    cache = Path(args.cache_dir) if args.cache_dir else root / ".strata-cache" / "cpu"
    flash_attn = not getattr(args, "no_flash_attn", False)
    knobs = {"ctx": args.ctx, "flash_attn": flash_attn}

    t0 = time.perf_counter()
    if manifest_matches(cache, args.model, knobs):
        _say(f"reusing the compiled model in {cache}")
    else:
        compile_cpu(args.model, cache, ctx=args.ctx, flash_attn=flash_attn)
        _say(f"compiled {root} for cpu into {cache} in {time.perf_counter() - t0:.2f} s")
    weights = open_checked_weights(args.model)
    module = load_compiled(cache)

    n = args.max_new_tokens
    tty = sys.stderr.isatty()
    clock = {"start": time.perf_counter(), "first": None}

    def on_token(i: int, token: int) -> None:
        now = time.perf_counter()
        if i == 0:
            clock["first"] = now
            _say(f"prefill: {len(prompt)} tokens in {now - clock['start']:.3f} s "
                 f"({len(prompt) / max(now - clock['start'], 1e-9):.1f} tokens/s)")
        if tty:
            print(f"\rstrata: generated {i + 1}/{n} tokens", end="", file=sys.stderr, flush=True)

    clock["start"] = time.perf_counter()
    ids, logits = generate(module, weights, prompt, n, on_token=on_token)
    end = time.perf_counter()
    if tty and n:
        print(file=sys.stderr)
    if n > 1 and clock["first"] is not None:
        dt = end - clock["first"]
        _say(f"decode: {n - 1} tokens in {dt:.3f} s ({(n - 1) / max(dt, 1e-9):.1f} tokens/s)")
    _say(f"generated {n} tokens in {end - clock['start']:.3f} s")

    if args.dump_logits:
        path = Path(args.dump_logits)
        try:
            with open(path, "wb") as fh:
                np.save(fh, logits.astype(np.float32), allow_pickle=False)
        except OSError as e:
            raise CpuDriverError(f"{path}: cannot write the logits: {e.strerror or e}") from None
        _say(f"logits {list(logits.shape)} float32 saved to {path}")
    print("ids=" + ",".join(str(t) for t in ids), flush=True)
    return 0
