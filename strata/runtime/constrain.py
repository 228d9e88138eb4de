"""Constrained decoding: the tokens a JSON schema, a grammar or a regex allows, as the sampler's
token mask, computed by llguidance (the `grammar` extra).

    spec = ConstraintSpec("json_schema", json.dumps(schema))     # or "json_object", "grammar" (GBNF),
    constraint = Constraint(spec, tokenizer, vocab)              #    "regex", "lark"; checked here
    matcher = constraint.matcher()                               # one per sequence
    mask = matcher.next_mask()                                   # int32 [1, ceil(vocab/32)]
    step = program.decode(token, pos, params.with_mask(mask))    # the program's sampler applies it
    matcher.advance(step.token)                                  # False once the grammar is complete
    future = matcher.next_mask_async()                           # computed beside the model's step

The mask is the bitmask llguidance writes (bit j of word w allows token 32 * w + j), the operand
`mask` of `op.sample`, so every target applies it in its compiled sampler and the same seed
draws the same ids. A matcher whose grammar is complete allows only the end of sequence, and
`advance` says so: the generation loop stops there.

llguidance was chosen over xgrammar by `bench/grammar_mask.py` on SmolLM2's 49152-token
vocabulary: its masks cost about the same per token (0.15 ms against 0.12 ms, under 1% of a
16.5 ms decode step), and its grammars compile 5 to 150 times faster (a GBNF grammar: 1.5 ms
against 244 ms), which a request pays before its first token; it also reads GBNF, Lark and
regexes itself. Its mask computation releases the GIL, so `next_mask_async` overlaps the step.

JSON is held to one layout, ", " between items and ": " after keys with no other whitespace
(llguidance's `whitespace_flexible: false`): a small model left free to indent can spend its
tokens on newlines, and an object that never closes parses as nothing.

`tool_call_constraint` is the grammar of a forced tool call (`tool_choice` "required" or a
named function): the template's opening text, a JSON object naming one of the tools and holding
its arguments, the closing text.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from strata.errors import StrataError

#: llguidance's JSON options: one layout, no free whitespace (the module docstring says why).
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

#: The kinds of constraint a request may carry.
KINDS = ("json_schema", "json_object", "grammar", "regex", "lark")


class ConstraintError(StrataError):
    """A schema, grammar or regex that cannot constrain the output (one line naming what is wrong)."""


@dataclass(frozen=True)
class ConstraintSpec:
    """What a request constrains its output to. `kind`: "json_schema" (`text` a JSON schema),
    "json_object" (any JSON object; `text` ignored), "grammar" (GBNF, llama.cpp's), "regex",
    or "lark" (llguidance's Lark)."""

    kind: str
    text: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(f"unknown constraint kind {self.kind!r} (known: {', '.join(KINDS)})")
        if not isinstance(self.text, str):
            raise ConstraintError(f"a {self.kind} constraint is text, not {type(self.text).__name__}")


def tool_call_constraint(tools: list[dict], choice: str | dict, *, open: str, close: str,
                         args_key: str) -> ConstraintSpec:
    """The output of a forced tool call: `open`, then a JSON object {"name": one of the tools'
    names (or the one `choice` names), `args_key`: that function's parameters}, then `close`.
    `tools` are OpenAI's [{"type": "function", "function": {"name", "parameters"}}]; `choice` is
    "required" or {"type": "function", "function": {"name": ...}}."""
    functions = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ConstraintError(f"tools[{i}]: a tool is {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
        params = fn.get("parameters", {"type": "object"})
        if not isinstance(params, dict):
            raise ConstraintError(f"tools[{i}] ({fn['name']}): parameters must be a JSON schema object")
        functions.append((fn["name"], params))
    if choice == "required":
        chosen = functions
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        chosen = [f for f in functions if f[0] == name]
        if not chosen:
            raise ConstraintError(f"tool_choice names the function {name!r}, which is not among the tools")
    else:
        raise ConstraintError('tool_choice must be "required" or {"type": "function", "function": {"name": ...}} '
                              "to force a call")
    if not chosen:
        raise ConstraintError("tool_choice 'required' needs at least one tool")
    calls = [{"type": "object", "properties": {"name": {"const": name}, args_key: params},
              "required": ["name", args_key], "additionalProperties": False} for name, params in chosen]
    schema = dict(calls[0]) if len(calls) == 1 else {"anyOf": calls}
    schema["x-guidance"] = JSON_LAYOUT
    lark = "start: " + " ".join(part for part in (_lark_string(open), "call", _lark_string(close)) if part)
    lark += f"\ncall: %json {json.dumps(schema, separators=(',', ':'))}\n"
    return ConstraintSpec("lark", lark)


def _lark_string(text: str) -> str:
    """`text` as a Lark string literal (JSON's escapes are Lark's); empty text: nothing."""
    return json.dumps(text) if text else ""


def _library():
    try:
        import llguidance
    except ImportError:
        raise ConstraintError("constrained output needs llguidance (pip install 'strata[grammar]')") from None
    return llguidance


def grammar_of(spec: ConstraintSpec) -> str:
    """llguidance's grammar of `spec`, checked (a bad schema, grammar or regex: ConstraintError)."""
    llg = _library()
    where = {"json_schema": "the JSON schema", "json_object": "the JSON object", "grammar": "the grammar",
             "regex": "the regex", "lark": "the Lark grammar"}[spec.kind]
    try:
        if spec.kind == "json_object":
            grammar = llg.LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=JSON_LAYOUT)
        elif spec.kind == "json_schema":
            try:
                schema = json.loads(spec.text)
            except json.JSONDecodeError as e:
                raise ConstraintError(f"{where} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
            if not isinstance(schema, (dict, bool)):
                raise ConstraintError(f"{where} must be an object, not {type(schema).__name__}")
            grammar = llg.LLMatcher.grammar_from_json_schema(spec.text, defaults=JSON_LAYOUT)
        else:
            grammar = llg.grammar_from({"grammar": "gbnf", "regex": "regex", "lark": "lark"}[spec.kind], spec.text)
    except ConstraintError:
        raise
    except Exception as e:  # llguidance's ValueError / RuntimeError: its message is the reason
        raise ConstraintError(f"{where} is not valid: {_one_line(e)}") from None
    message = llg.LLMatcher.validate_grammar(grammar)
    if message:
        raise ConstraintError(f"{where} is not valid: {_one_line(message)}")
    return grammar


def _one_line(e: Any) -> str:
    text = " ".join(str(e).split())
    return text[:300] or type(e).__name__


_TOKENIZERS: dict[tuple[int, int], Any] = {}
_TOKENIZERS_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer: Any, vocab: int):
    """llguidance's tokenizer of a strata `Tokenizer` (its HF `tokenizers` backend), built once
    per tokenizer and vocabulary size (about 0.2 s)."""
    key = (id(tokenizer), vocab)
    with _TOKENIZERS_LOCK:
        if key not in _TOKENIZERS:
            llg = _library()
            eos = tokenizer.eos_id if tokenizer.eos_id is not None else next(iter(tokenizer.end_of_generation_ids))
            _TOKENIZERS[key] = (tokenizer, llg.LLTokenizer(tokenizer.backend.to_str(), n_vocab=vocab, eos_token=eos))
        return _TOKENIZERS[key][1]


#: The thread masks are computed on while a step runs (llguidance releases the GIL).
_MASKS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="strata-mask")


class Constraint:
    """A spec compiled for one tokenizer: hands out a `Matcher` per sequence."""

    def __init__(self, spec: ConstraintSpec, tokenizer: Any, vocab: int):
        self.spec = spec
        self.vocab = vocab
        self.grammar = grammar_of(spec)
        self._tokenizer = _ll_tokenizer(tokenizer, vocab)
        self.matcher()  # a grammar llguidance accepts but cannot start (an empty language) fails here

    def matcher(self) -> Matcher:
        return Matcher(self)


class Matcher:
    """One sequence's place in the grammar: the next token's mask, advanced by each drawn token."""

    def __init__(self, constraint: Constraint):
        llg = _library()
        self.vocab = constraint.vocab
        self.words = (constraint.vocab + 31) // 32
        self._m = llg.LLMatcher(constraint._tokenizer, constraint.grammar)
        if self._m.is_error():
            raise ConstraintError(f"the {constraint.spec.kind} constraint cannot start: {_one_line(self._m.get_error())}")
        #: Seconds spent computing masks, and how many (for the cost per token).
        self.mask_seconds = 0.0
        self.masks = 0

    @property
    def done(self) -> bool:
        """Whether the grammar is complete and the end of sequence was taken (nothing may follow)."""
        return self._m.is_stopped()

    def next_mask(self) -> np.ndarray:
        """The allowed next tokens: int32 [1, ceil(vocab/32)], bit j of word w for token 32 * w + j."""
        t0 = time.perf_counter()
        mask = np.zeros((1, self.words), np.int32)
        self._m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if self._m.is_error():
            raise ConstraintError(f"the constraint failed: {_one_line(self._m.get_error())}")
        if not mask.any():
            raise ConstraintError("the constraint allows no next token")
        self.mask_seconds += time.perf_counter() - t0
        self.masks += 1
        return mask

    def next_mask_async(self) -> Future:
        """`next_mask` on the mask thread: the caller runs the model's step meanwhile (the
        sampler waits for it: `strata.semantics.sampling_inputs.token_mask_of`)."""
        return _MASKS.submit(self.next_mask)

    def advance(self, token: int) -> bool:
        """Take the drawn `token`; False when the output must end here (the grammar is complete
        and `token` ended it, or took the end of sequence)."""
        if not self._m.consume_token(int(token)):
            raise ConstraintError(f"the constraint refuses token {token}: {_one_line(self._m.get_error())}")
        return not self._m.is_stopped()
