"""`strata generate` and `strata run`: a request checked before anything is compiled, then the
program's reply, streamed as text (generate) or printed as ids (`ids=...` last).

    generate_text("model.gguf", "Once upon a time", 32, SamplingParams(temperature=0.8, seed=1))
    generate_text("models/tiny", None, 16, prompt_ids=[1, 2, 3])          # prints ids=... last
    run_prompt("models/tiny", "Hello", 16)                                 # strata run --prompt

What is checked first, each a one-line error: the prompt's UTF-8, the tokenizer files, the chat
template (it renders), the stop strings, the sampling parameters against the target (the EPU
decodes greedily), and the prompt's length against the context the program is compiled for.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.errors import say, warn
from strata.runtime.engine import (
    Engine,
    EngineError,
    check_tokenizer_fits,
    encode_prompt,
    generate_reported,
    model_tokenizer,
    open_program,
    prepare_device,
    resolved_knobs,
)
from strata.runtime.generate import Generation, generate
from strata.runtime.progress import GenerationClock
from strata.runtime.report import report_result
from strata.runtime.request import check_finite, check_request
from strata.runtime.sampling import SamplingParams


@dataclass(frozen=True)
class TextPrompt:
    """A text prompt and how it is encoded (see `strata.runtime.engine.encode_prompt`)."""

    text: str | bytes
    chat: bool = False
    system: str | None = None
    template: str | None = None
    template_kwargs: Mapping[str, Any] | None = None


@dataclass
class Request:
    """A request checked against the model and the target, before any compile."""

    model: Any
    knobs: dict[str, Any]
    ids: list[int]
    tokenizer: Any  # None: ids in, ids out


def check_sampling_target(params: SamplingParams | None, target_name: str, via: str | None) -> None:
    """The EPU decodes greedily: refuse parameters that need a sampler before anything is compiled."""
    if params is not None and not params.greedy and target_name == "epu" and via is None:
        from strata.targets.epu.program import SAMPLING_REFUSED
        from strata.targets.epu.stages import EpuError

        raise EpuError(SAMPLING_REFUSED)


def prepare_request(model_path: str | Path, prompt: TextPrompt | Sequence[int], max_new_tokens: int, *,
                    target_name: str, knobs: Mapping[str, Any] | None, interpret: bool, via: str | None = None,
                    sampling: SamplingParams | None = None, text_out: bool = False) -> Request:
    """Load the model and check the request (the module docstring's list). `text_out`: the
    tokenizer is loaded for the reply too, when the prompt is ids (None if the model has none)."""
    from strata.pipeline import load_model
    from strata.runtime.text import TokenizerError

    prepare_device(target_name, interpret)
    if isinstance(prompt, TextPrompt):  # the text is checked before anything is read
        from strata.runtime.text import check_utf8

        check_utf8(prompt.text, "--prompt")
    model = load_model(model_path)
    k = resolved_knobs(model, target_name, knobs)
    check_sampling_target(sampling, target_name, via)
    vocab = int(model.config.vocab_size)
    tokenizer = None
    if isinstance(prompt, TextPrompt):
        tokenizer = model_tokenizer(model)
        check_tokenizer_fits(tokenizer, vocab)
        ids = encode_prompt(tokenizer, prompt.text, chat=prompt.chat, system=prompt.system, template=prompt.template,
                            template_kwargs=prompt.template_kwargs)
    else:
        ids = [int(t) for t in prompt]
        if text_out:
            try:
                tokenizer = model_tokenizer(model)
                check_tokenizer_fits(tokenizer, vocab)
            except TokenizerError:
                tokenizer = None
    ids = [int(t) for t in check_request(ids, max_new_tokens, vocab, k["ctx"])]
    return Request(model, k, ids, tokenizer)


def _open(req: Request, target_name: str, *, via: str | None, interpret: bool, cache_dir: str | Path | None,
          allow_nonfinite: bool, max_new_tokens: int):
    store = req.model.open_weights()
    check_finite(store, list(req.model.params()), allow_nonfinite)
    return open_program(req.model, target_name, req.knobs, store=store, cache_dir=cache_dir, interpret=interpret,
                        via=via, prompt_len=len(req.ids), need_decode=max_new_tokens > 1)


def _check_opener(opener: Any, via: str | None, interpret: bool) -> None:
    if opener is not None and (via is not None or interpret):
        raise EngineError("--tp runs the compiled cpu program on several ranks: it takes no --via or --interpret")


def _open_for(req: Request, target_name: str, *, via: str | None, interpret: bool, cache_dir: str | Path | None,
              allow_nonfinite: bool, max_new_tokens: int, opener: Any, model_path: str | Path):
    """The program of this process (`_open`), or `opener`'s (every rank opens its own weights)."""
    if opener is None:
        return _open(req, target_name, via=via, interpret=interpret, cache_dir=cache_dir,
                     allow_nonfinite=allow_nonfinite, max_new_tokens=max_new_tokens)
    check_finite(req.model.open_weights(), list(req.model.params()), allow_nonfinite)
    return opener(model_path, target_name, req.knobs, cache_dir)


def generate_text(model_path: str | Path, prompt: TextPrompt | Sequence[int], max_new_tokens: int,
                  sampling: SamplingParams | None = None, *, stop: Sequence[str] = (), target_name: str = "cpu",
                  knobs: Mapping[str, Any] | None = None, interpret: bool = False, via: str | None = None,
                  cache_dir: str | Path | None = None, allow_nonfinite: bool = False,
                  verbose_prompt: bool = False, opener: Any = None) -> Generation:
    """`strata generate`: a text prompt's reply streamed to standard output (timing on standard
    error), stopping at the tokenizer's end-of-generation ids and at `stop`; a prompt of ids (or
    a model without a tokenizer) prints `ids=...` last instead, as `strata run`. `verbose_prompt`:
    the prompt's ids on standard error first (as llama-tokenize prints them). `opener`: as
    `run_prompt`'s (rank 0 owns the tokenizer, the detokenizer and the stop strings)."""
    from strata.runtime.text import StopStrings

    StopStrings(stop)  # a bad stop string is refused before anything is read
    _check_opener(opener, via, interpret)
    req = prepare_request(model_path, prompt, max_new_tokens, target_name=target_name, knobs=knobs,
                          interpret=interpret, via=via, sampling=sampling)
    if verbose_prompt:
        from strata.runtime.tokens import format_ids

        say(f"prompt: {len(req.ids)} tokens {format_ids(req.ids)}")
    if req.tokenizer is None and stop:
        warn("--stop needs text: with token ids in and out, generation stops at the length only")
    program = _open_for(req, target_name, via=via, interpret=interpret, cache_dir=cache_dir,
                        allow_nonfinite=allow_nonfinite, max_new_tokens=max_new_tokens, opener=opener,
                        model_path=model_path)
    try:
        clock = GenerationClock(len(req.ids), max_new_tokens, progress=req.tokenizer is None)
        if req.tokenizer is None:
            out = generate(program, req.ids, max_new_tokens, sampling=sampling, on_token=clock.on_token)
            clock.done(program.runtime)
            report_result(out.ids, None, None)
            return out
        stream = Engine(program, req.tokenizer).stream(req.ids, sampling, max_new_tokens, stop=stop,
                                                       on_token=clock.on_token)
        for chunk in stream:
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
        if not stream.text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        clock.done(program.runtime)
        out = stream.generation
        say(f"stopped: {_why(out, stream.stop)}")
        return out
    finally:
        program.close()


def _why(out: Generation, stop: str | None) -> str:
    if stop is not None:
        return f"stop string {stop!r}"
    if out.finish_reason == "stop":
        return f"end-of-generation id {out.stopped_by}"
    return f"{len(out.ids)} new tokens (--max-new-tokens)"


def run_prompt(model_path: str | Path, prompt: TextPrompt | Sequence[int], max_new_tokens: int, *,
               target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, via: str | None = None,
               interpret: bool = False, cache_dir: str | Path | None = None, dump_logits: str | None = None,
               allow_nonfinite: bool = False, sampling: SamplingParams | None = None, opener: Any = None) -> Generation:
    """`strata run`: check the request, open the program, generate (greedily, or with `sampling`)
    with progress, and print the ids last (then the logits to `dump_logits`). `opener(model_path,
    target_name, knobs, cache_dir)`, if given, opens the program instead
    (`strata.runtime.tp.opener(N)`: on N ranks, this process rank 0 and the others spawned)."""
    from strata.artifacts.files import check_output_path

    if dump_logits:
        check_output_path(dump_logits)  # before the work, not after it
    _check_opener(opener, via, interpret)
    req = prepare_request(model_path, prompt, max_new_tokens, target_name=target_name, knobs=knobs,
                          interpret=interpret, via=via, sampling=sampling)
    program = _open_for(req, target_name, via=via, interpret=interpret, cache_dir=cache_dir,
                        allow_nonfinite=allow_nonfinite, max_new_tokens=max_new_tokens, opener=opener,
                        model_path=model_path)
    return generate_reported(program, req.ids, max_new_tokens, dump_logits, sampling)
