"""`strata chat`: an interactive multi-turn chat through the model's chat template.

    chat_session("model.gguf", SamplingParams(temperature=0.7, seed=1), system="Be brief.")

Each turn renders the whole history (system message, the turns so far, the new user message)
with the generation prompt, and streams the reply (`strata.runtime.engine.Engine`); the reply,
whole or as far as it got, joins the history. `/reset` forgets the history, `/exit` (or
end of input) ends the session; Ctrl-C stops the reply being written and returns to the prompt,
and at the prompt it clears the line. When the history outgrows the context, its oldest turns
are dropped (the system message stays).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from strata.errors import say, warn
from strata.runtime.engine import Engine
from strata.runtime.opener import open_model
from strata.runtime.request import RequestError, new_token_room
from strata.runtime.sampling import SamplingParams

PROMPT = "> "
HELP = "/reset starts over, /exit (or Ctrl-D) ends the chat, Ctrl-C stops a reply"


class ChatSession:
    """The history of one chat over an engine, and one turn at a time (`reply`)."""

    def __init__(self, engine: Engine, params: SamplingParams, *, system: str | None = None,
                 max_new_tokens: int = 256, template_kwargs: Mapping[str, Any] | None = None):
        self.engine, self.params, self.system = engine, params, system
        self.max_new_tokens, self.template_kwargs = max_new_tokens, dict(template_kwargs or {})
        self.turns: list[dict[str, str]] = []

    def reset(self) -> None:
        self.turns = []

    def messages(self, user: str) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.turns + [{"role": "user", "content": user}]

    def _fitting_prompt(self, user: str) -> list[int]:
        """The ids of the history and `user`, the oldest turns dropped until they fit the context."""
        n_ctx = self.engine.program.n_ctx
        while True:
            ids = self.engine.encode(self.messages(user), template_kwargs=self.template_kwargs)
            if new_token_room(len(ids), n_ctx) > 1 or not self.turns:
                break
            del self.turns[:2]  # the oldest user message and its reply
            warn("the chat outgrew the context: its oldest turn is dropped")
        if new_token_room(len(ids), n_ctx) <= 1:
            raise RequestError(f"the message ({len(ids)} tokens with the template) does not fit the context of "
                               f"{n_ctx}; write a shorter one")
        return ids

    def reply(self, user: str, write: Callable[[str], None]) -> str:
        """Stream the reply to `user` through `write`; the reply (also when Ctrl-C stopped it)."""
        ids = self._fitting_prompt(user)
        room = new_token_room(len(ids), self.engine.program.n_ctx)
        stream = self.engine.stream(ids, self.params, min(self.max_new_tokens, room))
        text = ""
        try:
            for chunk in stream:
                text += chunk.text
                write(chunk.text)
        finally:  # a reply stopped by Ctrl-C is kept as far as it got
            self.turns += [{"role": "user", "content": user}, {"role": "assistant", "content": text}]
        return text


def chat_session(model_path: str | Path, params: SamplingParams | None = None, *, system: str | None = None,
                 max_new_tokens: int = 256, template_kwargs: Mapping[str, Any] | None = None,
                 target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, interpret: bool = False,
                 cache_dir: str | Path | None = None, allow_nonfinite: bool = False,
                 read: Callable[[str], str] = input, out: TextIO | None = None,
                 chat_template: str | Path | None = None) -> None:
    """`strata chat`: check the model's tokenizer and chat template, open the program, then
    read a message and stream its reply until `/exit` or the end of input (`read` raises EOFError)."""
    from strata.runtime.text import ChatTemplate, check_utf8

    out = out or sys.stdout
    template = ChatTemplate.from_option(chat_template)  # a bad file is refused before the model is read
    if params is not None and not params.greedy:
        params = params.resolved()  # one seed for the session: each turn draws at its own positions
    opened = open_model(model_path, target_name, knobs, interpret=interpret, cache_dir=cache_dir,
                        allow_nonfinite=allow_nonfinite)
    opened.check_sampling(params)
    tokenizer = opened.tokenizer()
    if template is not None:
        tokenizer.use_chat_template(template)
    tokenizer.select_chat_template()  # a model without a template is refused before the compile
    if system is not None:
        check_utf8(system, "--system")
    program = opened.program()
    session = ChatSession(Engine(program, tokenizer), params or SamplingParams(), system=system,
                          max_new_tokens=max_new_tokens, template_kwargs=template_kwargs)
    say(f"chat with {opened.model.name}: {HELP}")

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    try:
        while True:
            try:
                line = read(PROMPT)
            except KeyboardInterrupt:  # at the prompt: a fresh line, as a shell does
                write("\n")
                continue
            except EOFError:
                write("\n")
                return
            command = line.strip()
            if command in ("/exit", "/quit"):
                return
            if command == "/reset":
                session.reset()
                say("history cleared")
                continue
            if not command:
                continue
            try:
                session.reply(check_utf8(command, "the message"), write)
                write("\n")
            except KeyboardInterrupt:  # stops the reply, not the session
                write("\n")
                say("reply stopped")
            except RequestError as e:
                warn(str(e))
    finally:
        program.close()
