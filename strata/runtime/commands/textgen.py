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
from strata.runtime.engine import Engine, encode_prompt, generate_reported
from strata.runtime.generate import Generation, generate
from strata.runtime.opener import OpenedModel, OpenError, open_model, target_of
from strata.runtime.progress import GenerationClock
from strata.runtime.report import report_result
from strata.runtime.request import check_request
from strata.runtime.sampling import SamplingParams


@dataclass(frozen=True)
class TextPrompt:
    """A text prompt and how it is encoded (see `strata.runtime.engine.encode_prompt`)."""

    text: str | bytes
    chat: bool = False
    system: str | None = None
    template: str | None = None
    template_kwargs: Mapping[str, Any] | None = None
    #: A Jinja file used in place of the model's chat template (--chat-template).
    template_file: str | Path | None = None


@dataclass
class CheckedPrompt:
    """A prompt checked against the model opened for the target, before any compile."""

    opened: OpenedModel
    ids: list[int]
    tokenizer: Any  # None: ids in, ids out

    @property
    def model(self) -> Any:
        return self.opened.model


def prepare_request(model_path: str | Path, prompt: TextPrompt | Sequence[int], max_new_tokens: int, *,
                    target_name: str, knobs: Mapping[str, Any] | None, interpret: bool, via: str | None = None,
                    sampling: SamplingParams | None = None, text_out: bool = False, cache_dir: str | Path | None = None,
                    allow_nonfinite: bool = False) -> CheckedPrompt:
    """Open the model (`strata.runtime.opener.open_model`) and check the request (the module
    docstring's list). `text_out`: the tokenizer is loaded for the reply too, when the prompt
    is ids (None if the model has none)."""
    if isinstance(prompt, TextPrompt):  # the text is checked before anything is read
        from strata.runtime.text import ChatTemplate, check_utf8

        check_utf8(prompt.text, "--prompt")
        template = ChatTemplate.from_option(prompt.template_file)
    if (knobs or {}).get("tp", 1) > 1 and (via is not None or target_of(target_name).opens is not None):
        raise OpenError("--tp runs a compiled program on several ranks: it takes no --via")
    opened = open_model(model_path, target_name, knobs, via=via, interpret=interpret, cache_dir=cache_dir,
                        allow_nonfinite=allow_nonfinite)
    opened.check_sampling(sampling)
    tokenizer = None
    if isinstance(prompt, TextPrompt):
        tokenizer = opened.tokenizer()
        if template is not None:
            tokenizer.use_chat_template(template)
        ids = encode_prompt(tokenizer, prompt.text, chat=prompt.chat, system=prompt.system, template=prompt.template,
                            template_kwargs=prompt.template_kwargs)
    else:
        ids = [int(t) for t in prompt]
        if text_out:
            tokenizer = opened.tokenizer(required=False)
    ids = [int(t) for t in check_request(ids, max_new_tokens, opened.vocab, opened.knobs["ctx"])]
    return CheckedPrompt(opened, ids, tokenizer)


def _program(req: CheckedPrompt, max_new_tokens: int):
    """The program of the checked request: on this process, or on the `tp` ranks the knobs ask for."""
    if req.opened.ranks > 1:
        from strata.runtime.tp import launch_opened

        return launch_opened(req.opened)
    return req.opened.program(prompt_len=len(req.ids), need_decode=max_new_tokens > 1)


def generate_text(model_path: str | Path, prompt: TextPrompt | Sequence[int], max_new_tokens: int,
                  sampling: SamplingParams | None = None, *, stop: Sequence[str] = (), target_name: str = "cpu",
                  knobs: Mapping[str, Any] | None = None, interpret: bool = False, via: str | None = None,
                  cache_dir: str | Path | None = None, allow_nonfinite: bool = False,
                  verbose_prompt: bool = False, constraint: Any = None) -> Generation:
    """`strata generate`: a text prompt's reply streamed to standard output (timing on standard
    error), stopping at the tokenizer's end-of-generation ids and at `stop`; a prompt of ids (or
    a model without a tokenizer) prints `ids=...` last instead, as `strata run`. `verbose_prompt`:
    the prompt's ids on standard error first (as llama-tokenize prints them). A `tp` knob above
    1 runs the program on that many ranks (rank 0, this process, owns the tokenizer, the
    detokenizer and the stop strings). `constraint` (a `strata.runtime.constrain.ConstraintSpec`:
    a JSON schema, GBNF grammar or regex) holds the reply to it; it is checked before the compile."""
    from strata.runtime.text import StopStrings

    StopStrings(stop)  # a bad stop string is refused before anything is read
    if constraint is not None:
        from strata.runtime.constrain import grammar_of

        grammar_of(constraint)  # a bad schema or grammar is refused before the model is read
    req = prepare_request(model_path, prompt, max_new_tokens, target_name=target_name, knobs=knobs,
                          interpret=interpret, via=via, sampling=sampling, cache_dir=cache_dir,
                          allow_nonfinite=allow_nonfinite)
    compiled = None
    if constraint is not None:
        from strata.runtime.constrain import Constraint
        from strata.runtime.request import RequestError

        if req.tokenizer is None:
            raise RequestError("a constraint on the output needs the model's tokenizer (text out), not token ids")
        compiled = Constraint(constraint, req.tokenizer, req.opened.vocab)
    if verbose_prompt:
        from strata.runtime.commands.tokenize import format_ids

        say(f"prompt: {len(req.ids)} tokens {format_ids(req.ids)}")
    if req.tokenizer is None and stop:
        warn("--stop needs text: with token ids in and out, generation stops at the length only")
    program = _program(req, max_new_tokens)
    try:
        clock = GenerationClock(len(req.ids), max_new_tokens, progress=req.tokenizer is None)
        if req.tokenizer is None:
            out = generate(program, req.ids, max_new_tokens, sampling=sampling, on_token=clock.on_token)
            clock.done(program.runtime)
            report_result(out.ids, None, None)
            return out
        stream = Engine(program, req.tokenizer).stream(req.ids, sampling, max_new_tokens, stop=stop,
                                                       on_token=clock.on_token, constraint=compiled)
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
    if out.stopped_by == "grammar":
        return "the constraint's grammar is complete"
    if out.finish_reason == "stop":
        return f"end-of-generation id {out.stopped_by}"
    return f"{len(out.ids)} new tokens (--max-new-tokens)"


def run_prompt(model_path: str | Path, prompt: TextPrompt | Sequence[int], max_new_tokens: int, *,
               target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, via: str | None = None,
               interpret: bool = False, cache_dir: str | Path | None = None, dump_logits: str | None = None,
               allow_nonfinite: bool = False, sampling: SamplingParams | None = None) -> Generation:
    """`strata run`: check the request, open the program, generate (greedily, or with `sampling`)
    with progress, and print the ids last (then the logits to `dump_logits`). A `tp` knob above
    1 runs the program on that many ranks (`strata.runtime.tp`: this process rank 0, the others
    spawned)."""
    from strata.artifacts.files import check_output_path

    req = prepare_request(model_path, prompt, max_new_tokens, target_name=target_name, knobs=knobs,
                          interpret=interpret, via=via, sampling=sampling, cache_dir=cache_dir,
                          allow_nonfinite=allow_nonfinite)
    if dump_logits:  # before the work, not after it, and never onto the model or its compiled program
        inputs: dict[Any, str] = dict(req.model.input_files())
        cache = req.opened.cache()
        if cache is not None and req.opened.ranks > 1 and req.opened.cache_dir is None:
            inputs[req.model.cache_root] = f"the compiled models' cache {req.model.cache_root}"  # every rank's
        elif cache is not None:
            inputs[cache] = f"the compiled model's directory {cache}"
        check_output_path(dump_logits, inputs, "--dump-logits")
    program = _program(req, max_new_tokens)
    return generate_reported(program, req.ids, max_new_tokens, dump_logits, sampling)
