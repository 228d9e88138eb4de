"""Opening a model as a program for any target, and the text API over a program.

    model = load_model("models/tiny")
    program = open_program(model, "cpu")                       # compiled (or reused), loaded, bound
    program = open_program(model, "cuda", interpret=True)      # Triton's interpreter on the CPU
    program = open_program(model, "cpu", via="onnxruntime", prompt_len=3)

    engine = Engine(program, model_tokenizer(model))
    for chunk in engine.generate("Once upon a time", SamplingParams(temperature=0.8, seed=1)):
        print(chunk.text, end="")                              # chunk.ids: the ids it completes
    engine.generate([{"role": "user", "content": "Hi"}], max_new_tokens=64, stop=["\n\n"])

`strata run` and `strata generate` are `strata.runtime.textgen`. A compiled program is kept in a
cache directory, one rule for every target:
`MODEL/.strata-cache/VARIANT` (a GGUF file: a folder of its own under it), VARIANT being the
target's name (`cuda-interpret` under Triton's interpreter), or `--cache-dir`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.artifacts.stage import StageError
from strata.errors import StrataError, say
from strata.runtime.generate import Generation, GenerationLoop, generate
from strata.runtime.program import Program
from strata.runtime.progress import GenerationClock
from strata.runtime.report import report_result
from strata.runtime.request import RequestError, check_request
from strata.runtime.sampling import SamplingParams

NO_GPU = ("--target cuda needs a CUDA GPU (torch.cuda.is_available() is false); without one, run the same "
          "generated kernels in Triton's interpreter on the CPU: strata run MODEL --target cuda --interpret")


class EngineError(StrataError):
    """A program that cannot be opened for the target asked for."""


def start_triton_interpreter() -> None:
    """Put Triton in its interpreter (TRITON_INTERPRET=1) before it is imported."""
    triton = sys.modules.get("triton")
    if triton is not None and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise EngineError("--interpret: Triton was imported before TRITON_INTERPRET=1 could be set; "
                          "run with TRITON_INTERPRET=1 in the environment")
    os.environ["TRITON_INTERPRET"] = "1"


def check_gpu() -> None:
    try:
        import torch
    except ImportError:
        raise EngineError("--target cuda needs torch and triton (pip install 'strata[cuda]')") from None
    if not torch.cuda.is_available():
        raise EngineError(NO_GPU)


def prepare_device(target_name: str, interpret: bool) -> None:
    """What a target needs of the process before anything is imported: Triton's interpreter, or a GPU."""
    if target_name == "cuda":
        start_triton_interpreter() if interpret else check_gpu()
    elif interpret:
        raise EngineError(f"--interpret applies to --target cuda, not --target {target_name}")


def cache_dir_of(model: Any, target_name: str, interpret: bool = False, tp: int = 1, ep: int = 1) -> Path:
    """The default cache of `model`'s compiled program for a target (see the module docstring);
    a tensor-parallel one's is `TARGET-tpN` (`TARGET-tpN-epN` with whole experts per rank)."""
    variant = f"{target_name}-interpret" if interpret else target_name
    if tp > 1:
        variant += f"-tp{tp}" + (f"-ep{ep}" if ep > 1 else "")
    return model.cache_root / variant


def resolved_knobs(model: Any, target_name: str, knobs: Mapping[str, Any] | None) -> dict[str, Any]:
    from strata.pipeline import resolve_knobs
    from strata.targets import target

    return resolve_knobs(target(target_name), model, dict(knobs or {}))


def open_program(model: Any, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                 store: Any = None, cache_dir: str | Path | None = None, interpret: bool = False,
                 via: str | None = None, prompt_len: int | None = None, need_decode: bool = True,
                 group: Any = None, quiet: bool = False) -> Program:
    """`model` as a program: compiled for `target_name` into its cache (reused while it matches)
    and loaded with its weights; `via="onnxruntime"`: its prefill (for `prompt_len` tokens) and
    decode exported to ONNX and run by onnxruntime instead (`need_decode=False`: no decode).
    `group`: the process group of one rank of a tensor-parallel program (`strata.runtime.tp`);
    `quiet`: no messages (a follower rank's)."""
    from strata.pipeline import cached_compile
    from strata.targets import target

    knobs = resolved_knobs(model, target_name, knobs)
    store = store if store is not None else model.open_weights()
    if via == "onnxruntime":
        from strata.targets.onnxruntime.program import open_onnxruntime

        if prompt_len is None:
            raise EngineError("onnxruntime runs an exported prefill of a fixed length: give prompt_len")
        t0 = time.perf_counter()
        program = open_onnxruntime(model, store, knobs, prompt_len, decode=need_decode)
        say(f"exported {model.root} to ONNX and loaded it in onnxruntime in {time.perf_counter() - t0:.2f} s")
        return program
    if via is not None:
        raise EngineError(f"unknown runtime {via!r} for --via (known: onnxruntime)")
    default_cache = cache_dir is None
    cache = (cache_dir_of(model, target_name, interpret, knobs.get("tp", 1), knobs.get("ep", 1)) if default_cache
             else Path(cache_dir))
    t0 = time.perf_counter()
    try:
        out, rebuilt = cached_compile(model, target_name, cache, knobs, store)
    except StageError as e:
        hint = "; pass --cache-dir DIR to keep the compiled model elsewhere" if default_cache else ""
        raise StageError(f"{e}{hint}") from None
    recipe = f" ({knobs['recipe']})" if knobs.get("recipe") else ""
    if quiet:
        pass
    elif rebuilt is None:
        say(f"reusing the compiled model in {out}")
    else:
        why = f" (rebuilt: {rebuilt})" if rebuilt != "there was none" else ""
        say(f"compiled {model.root} for {target_name}{recipe} into {out} in {time.perf_counter() - t0:.2f} s{why}")
    options: dict[str, Any] = {"interpret": interpret} if target_name == "cuda" else {}
    if group is not None:
        options["group"] = group
    t0 = time.perf_counter()
    program = target(target_name).load(out, store, **options)
    if target_name == "cuda":
        say(f"weights prepared{recipe} in {time.perf_counter() - t0:.2f} s")
    return program


def generate_reported(program: Program, ids: Sequence[int], max_new_tokens: int,
                      dump_logits: str | None = None, sampling: SamplingParams | None = None) -> Generation:
    """Generate (greedily, or with `sampling`) with progress through the one loop, close the
    program, and print the ids last (then the logits to `dump_logits`): the end of `strata run`,
    on one rank or on many."""
    try:
        clock = GenerationClock(len(ids), max_new_tokens)
        out = generate(program, ids, max_new_tokens, keep_logits=True, on_token=clock.on_token, sampling=sampling)
        clock.done(program.runtime)
    finally:
        program.close()
    report_result(out.ids, out.logits, dump_logits)
    return out


# ---------------------------------------------------------------------------------------------
# Text in, text out


NO_TOKENIZER_HINT = "--prompt-ids still works"


def model_tokenizer(model: Any):
    """The tokenizer of a loaded model: its GGUF's vocabulary, or the HF tokenizer files of its
    directory; a one-line `TokenizerError` when it has none (saying that ids still work)."""
    from strata.runtime.text import TokenizerError, load_tokenizer

    if model.gguf is not None:
        return load_tokenizer(model.gguf.path)
    root = Path(model.root)
    if not (root / "tokenizer.json").is_file():
        raise TokenizerError(f"{root}: the model has no tokenizer (no tokenizer.json, and it is not a GGUF file); "
                             f"{NO_TOKENIZER_HINT}: give token ids with --prompt-ids")
    return load_tokenizer(root)


def check_tokenizer_fits(tokenizer: Any, vocab: int) -> None:
    """Refuse a tokenizer with ids the model's vocabulary has no row for."""
    if tokenizer.vocab_size > vocab:
        raise RequestError(f"{tokenizer.source}: the tokenizer has {tokenizer.vocab_size} tokens, more than the "
                           f"model's vocabulary of {vocab}")


Messages = Sequence[Mapping[str, Any]]


def encode_prompt(tokenizer: Any, prompt: str | Messages, *, chat: bool | None = None, system: str | None = None,
                  template: str | None = None, template_kwargs: Mapping[str, Any] | None = None) -> list[int]:
    """The ids of a prompt: a text (`chat`: as a user message through the chat template, after a
    `system` message if given) or a message list (always through the template, with the
    generation prompt). A plain text is encoded as the model encodes text (BOS where it adds one)."""
    from strata.runtime.text import check_utf8

    if isinstance(prompt, (str, bytes)):
        text = check_utf8(prompt, "the prompt")
        if not chat:
            if system is not None:
                raise RequestError("a system message needs the chat template (--chat)")
            return tokenizer.encode(text)
        messages: list[Mapping[str, Any]] = [{"role": "user", "content": text}]
    else:
        messages = list(prompt)
    if system is not None:
        messages = [{"role": "system", "content": check_utf8(system, "the system message")}, *messages]
    return tokenizer.encode_chat(messages, add_generation_prompt=True, template=template, **dict(template_kwargs or {}))


@dataclass(frozen=True)
class Chunk:
    """A piece of the streamed reply: the text that became whole and the new ids since the last piece."""

    text: str
    ids: list[int] = field(default_factory=list)


class TextStream:
    """One reply, as an iterator of `Chunk`s (see `Engine.generate`). Afterwards: `text` (all of
    it), `generation` (the loop's result: ids, finish reason) and `stop` (the stop string found)."""

    def __init__(self, engine: Engine, prompt_ids: list[int], params: SamplingParams, max_new_tokens: int,
                 stop: Iterable[str], on_token: Callable[[int, int], None] | None):
        from strata.runtime.text import StopStrings

        tok = engine.tokenizer
        self.prompt_ids = prompt_ids
        self.end_ids = frozenset(i for i in tok.end_of_generation_ids if 0 <= i < engine.program.vocab)
        self.loop = GenerationLoop(engine.program, prompt_ids, max_new_tokens, sampling=params, stop_ids=self.end_ids)
        self._detok = tok.detokenizer(skip_special=True, context=prompt_ids)
        self._stops = StopStrings(stop)
        self._on_token = on_token
        self.text = ""
        self.stop: str | None = None

    @property
    def generation(self) -> Generation:
        return self.loop.result

    def __iter__(self) -> Iterator[Chunk]:
        pending: list[int] = []
        for i, token in enumerate(self.loop):
            if self._on_token is not None:
                self._on_token(i, token)
            pending.append(token)
            if token in self.end_ids:  # the loop ends after it (a stop id); an end-of-turn token is not text
                continue
            shown = self._stops.push(self._detok.push(token))
            if self._stops.stopped:
                self.stop = self._stops.matched
                self.loop.stop(self.stop)  # nothing more is decoded
                yield self._chunk(shown, pending)
                return
            if shown:
                yield self._chunk(shown, pending)
                pending = []
        tail = self._stops.push(self._detok.flush())
        tail += self._stops.flush() if not self._stops.stopped else ""
        if self._stops.stopped:
            self.stop = self._stops.matched
        if tail or pending:
            yield self._chunk(tail, pending)

    def _chunk(self, text: str, ids: list[int]) -> Chunk:
        self.text += text
        return Chunk(text, list(ids))


class Engine:
    """The text API over any program (`open_program`): prompts or chat messages in, streamed text
    out, through the model's tokenizer (`model_tokenizer`), its chat template and the program's
    sampler; generation stops at every end-of-generation id of the tokenizer and at stop strings."""

    def __init__(self, program: Program, tokenizer: Any):
        check_tokenizer_fits(tokenizer, program.vocab)
        self.program, self.tokenizer = program, tokenizer

    def encode(self, prompt: str | Messages, **options: Any) -> list[int]:
        """The prompt's ids (`encode_prompt`'s options: chat, system, template, template_kwargs)."""
        return encode_prompt(self.tokenizer, prompt, **options)

    def generate(self, prompt: str | Messages, params: SamplingParams | None = None, *, max_new_tokens: int = 256,
                 stop: Iterable[str] = (), on_token: Callable[[int, int], None] | None = None,
                 **options: Any) -> TextStream:
        """A reply to `prompt` (a text, or an OpenAI-style message list: through the chat template),
        as an iterator of `Chunk`s; `max_new_tokens` is cut to what the context still holds."""
        ids = self.encode(prompt, **options)
        room = self.program.n_ctx - len(ids) + 1
        if room < 1:
            raise RequestError(f"the prompt ({len(ids)} tokens) does not fit the context of {self.program.n_ctx}")
        return self.stream(ids, params, min(max_new_tokens, room), stop=stop, on_token=on_token)

    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, max_new_tokens: int = 256, *,
               stop: Iterable[str] = (), on_token: Callable[[int, int], None] | None = None) -> TextStream:
        """The reply to a prompt already encoded (checked against the vocabulary and the context)."""
        ids = [int(t) for t in check_request(prompt_ids, max_new_tokens, self.program.vocab, self.program.n_ctx)]
        return TextStream(self, ids, params or SamplingParams(), max_new_tokens, stop, on_token)
