"""The text API over a program: prompts or chat messages in, streamed text out.

    opened = open_model("models/tiny")                         # strata.runtime.opener
    engine = Engine(opened.program(), opened.tokenizer())
    for chunk in engine.generate("Once upon a time", SamplingParams(temperature=0.8, seed=1)):
        print(chunk.text, end="")                              # chunk.ids: the ids it completes
    engine.generate([{"role": "user", "content": "Hi"}], max_new_tokens=64, stop=["\n\n"])

The reply's text is the one text layer's (`strata.runtime.text.TextEmitter`, which the server
uses too) over the one generation loop (`strata.runtime.generate`); `strata run` and `strata
generate` are `strata.runtime.commands.textgen`, opening a model is `strata.runtime.opener`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata.runtime.generate import Generation, GenerationLoop, generate
from strata.runtime.program import Program
from strata.runtime.progress import GenerationClock
from strata.runtime.opener import check_tokenizer_fits
from strata.runtime.report import report_result
from strata.runtime.request import RequestError, check_request, new_token_room
from strata.runtime.sampling import SamplingParams


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
                 stop: Iterable[str], on_token: Callable[[int, int], None] | None, constraint: Any = None):
        from strata.runtime.text import TextEmitter, end_of_generation_ids

        self.prompt_ids = prompt_ids
        self.end_ids = end_of_generation_ids(engine.tokenizer, engine.program.vocab)
        self.loop = GenerationLoop(engine.program, prompt_ids, max_new_tokens, sampling=params, stop_ids=self.end_ids,
                                   constraint=constraint)
        self._text = TextEmitter(engine.tokenizer, prompt_ids, stop, self.end_ids)
        self._on_token = on_token
        self.text = ""
        self.stop: str | None = None

    @property
    def generation(self) -> Generation:
        return self.loop.result

    def __iter__(self) -> Iterator[Chunk]:
        for i, token in enumerate(self.loop):
            if self._on_token is not None:
                self._on_token(i, token)
            piece = self._text.push(token)
            if self._text.stopped:
                self.stop = self._text.matched
                self.loop.stop(self.stop)  # nothing more is decoded
            if piece is not None:
                yield self._chunk(piece.text, piece.ids)
            if self._text.stopped:
                return
        piece = self._text.finish()
        self.stop = self._text.matched
        if piece is not None:
            yield self._chunk(piece.text, piece.ids)

    def _chunk(self, text: str, ids: list[int]) -> Chunk:
        self.text += text
        return Chunk(text, list(ids))


class Engine:
    """The text API over any program (`strata.runtime.opener`): prompts or chat messages in,
    streamed text out, through the model's tokenizer, its chat template and the program's
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
        room = new_token_room(len(ids), self.program.n_ctx)
        if room < 1:
            raise RequestError(f"the prompt ({len(ids)} tokens) does not fit the context of {self.program.n_ctx}")
        return self.stream(ids, params, min(max_new_tokens, room), stop=stop, on_token=on_token)

    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None, max_new_tokens: int = 256, *,
               stop: Iterable[str] = (), on_token: Callable[[int, int], None] | None = None,
               constraint: Any = None) -> TextStream:
        """The reply to a prompt already encoded (checked against the vocabulary and the context);
        `constraint` (`strata.runtime.constrain.Constraint`): the output is held to its grammar."""
        ids = [int(t) for t in check_request(prompt_ids, max_new_tokens, self.program.vocab, self.program.n_ctx)]
        return TextStream(self, ids, params or SamplingParams(), max_new_tokens, stop, on_token, constraint)
