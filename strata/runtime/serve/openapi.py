"""The JSON schemas of the request bodies `requests.py` reads, for the server's OpenAPI document
(/openapi.json): what a client (or a property-based tester such as Schemathesis) may send. The
bounds are the ones `requests.py` checks, the model's among them (its name, vocabulary and
context); a body outside them is answered 400 naming the field (404 for another model). A body
inside them may still be refused: a prompt and max_tokens together longer than the context."""

from __future__ import annotations

from typing import Any

from strata.runtime.serve.embeddings import ENCODINGS, MAX_INPUTS
from strata.runtime.serve.requests import MAX_LOGPROBS, MAX_N, MAX_STOPS
from strata.runtime.serve.tokenize_api import MAX_DETOKENIZE_IDS

_OPTIONAL_INT = {"type": ["integer", "null"]}


def _ranged(low: float, high: float) -> dict[str, Any]:
    return {"type": ["number", "null"], "minimum": low, "maximum": high}


_SAMPLING: dict[str, Any] = {
    "temperature": _ranged(0, 2),
    "top_p": _ranged(0, 1),
    "top_k": _OPTIONAL_INT,
    "min_p": _ranged(0, 1),
    "presence_penalty": _ranged(-2, 2),
    "frequency_penalty": _ranged(-2, 2),
    "repetition_penalty": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100},
    "seed": _OPTIONAL_INT,
    "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": MAX_STOPS},
                       {"type": "null"}]},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_N},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": "boolean"}}},
}

#: The output constraints (`constraints.py`): OpenAI's response_format, llama-server's grammar
#: (GBNF) and json_schema; at most one per request.
_CONSTRAINTS: dict[str, Any] = {
    "response_format": {"oneOf": [
        {"type": "null"},
        {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
        {"type": "object", "required": ["type", "json_schema"], "properties": {
            "type": {"enum": ["json_schema"]},
            "json_schema": {"type": "object", "properties": {"name": {"type": "string"}, "schema": {"type": "object"},
                                                             "strict": {"type": ["boolean", "null"]}}}}}]},
    "grammar": {"type": ["string", "null"]},
    "json_schema": {"type": ["object", "null"]},
}

_CONTENT = {"oneOf": [{"type": "string"}, {"type": "null"},
                      {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                                  "properties": {"type": {"enum": ["text"]},
                                                                 "text": {"type": "string"}}}}]}


#: A chat's tools, tool choice, template variables and reasoning (`chat_tools.py`).
_FUNCTION = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"}, "description": {"type": "string"},
    "parameters": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}
_TOOLS: dict[str, Any] = {
    "tools": {"type": ["array", "null"], "items": {"type": "object", "required": ["type", "function"], "properties": {
        "type": {"enum": ["function"]}, "function": _FUNCTION}}},
    "tool_choice": {"oneOf": [{"type": "null"}, {"enum": ["auto", "none", "required"]},
                              {"type": "object", "required": ["type", "function"], "properties": {
                                  "type": {"enum": ["function"]},
                                  "function": {"type": "object", "required": ["name"],
                                               "properties": {"name": {"type": "string"}}}}}]},
    "chat_template_kwargs": {"type": ["object", "null"]},
    "reasoning_format": {"enum": ["none", "auto", "deepseek", None]},
}


def completion_body(model_name: str, vocab: int, n_ctx: int) -> dict[str, Any]:
    """POST /v1/completions: a prompt (a text, or token ids of the vocabulary that fit the context)."""
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": vocab - 1}, "minItems": 1,
           "maxItems": n_ctx - 1}
    text = {"type": "string", "minLength": 1}
    return {"type": "object", "required": ["prompt"], "properties": {
        **_common(model_name, n_ctx, "max_tokens"),
        "prompt": {"oneOf": [text, ids, {"type": "array", "items": {"oneOf": [text, ids]}, "minItems": 1,
                                         "maxItems": 1}]},
        "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_LOGPROBS},
        "echo": {"enum": [False, None]},
        "best_of": {"enum": [1, None]},
        "suffix": {"enum": ["", None]},
    }}


def chat_body(model_name: str, n_ctx: int) -> dict[str, Any]:
    """POST /v1/chat/completions: messages through the model's chat template."""
    return {"type": "object", "required": ["messages"], "properties": {
        **_common(model_name, n_ctx, "max_completion_tokens"),
        "messages": {"type": "array", "minItems": 1,
                     "items": {"type": "object", "required": ["role"],
                               "properties": {"role": {"enum": ["system", "user", "assistant", "tool"]},
                                              "content": _CONTENT}}},
        **_TOOLS,
        "logprobs": {"type": ["boolean", "null"]},
        "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_LOGPROBS},
    }}


def _common(model_name: str, n_ctx: int, max_tokens_field: str) -> dict[str, Any]:
    tokens = {"type": ["integer", "null"], "minimum": 0, "maximum": n_ctx}
    return {**_SAMPLING, **_CONSTRAINTS, "model": {"enum": [model_name]}, "max_tokens": tokens,
            max_tokens_field: tokens}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """A route's `openapi_extra`: its JSON request body."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# -- the tokenizer and embedding routes (`tokenize_api.py`, `embeddings.py`) --------------------

_FLAG = {"type": ["boolean", "null"]}


def tokenize_body(model_name: str) -> dict[str, Any]:
    """POST /tokenize: llama-server's body (`content`) or vLLM's (`prompt`, or `messages`)."""
    model = {"enum": [model_name, None]}
    llama = {"type": "object", "required": ["content"], "properties": {
        "content": {"type": "string"}, "add_special": _FLAG, "parse_special": _FLAG, "with_pieces": _FLAG}}
    prompt = {"type": "object", "required": ["prompt"], "properties": {
        "model": model, "prompt": {"type": "string"}, "add_special_tokens": _FLAG, "return_token_strs": _FLAG}}
    messages = {"type": "array", "minItems": 1,
                "items": {"type": "object", "required": ["role"],
                          "properties": {"role": {"enum": ["system", "user", "assistant"]}, "content": _CONTENT}}}
    chat = {"type": "object", "required": ["messages"], "properties": {
        "model": model, "messages": messages, "add_generation_prompt": _FLAG, "continue_final_message": _FLAG,
        "add_special_tokens": _FLAG, "return_token_strs": _FLAG,
        "chat_template_kwargs": {"type": ["object", "null"]}}}
    return {"oneOf": [llama, prompt, chat]}


def detokenize_body(model_name: str, vocab: int) -> dict[str, Any]:
    """POST /detokenize: token ids of the tokenizer's vocabulary."""
    return {"type": "object", "required": ["tokens"], "properties": {
        "model": {"enum": [model_name, None]},
        "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": vocab - 1},
                   "maxItems": MAX_DETOKENIZE_IDS}}}


def embeddings_body(model_name: str, vocab: int, n_ctx: int, hidden_size: int) -> dict[str, Any]:
    """POST /v1/embeddings: OpenAI's body (texts or token ids, each within the context)."""
    text = {"type": "string", "minLength": 1}
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": vocab - 1}, "minItems": 1,
           "maxItems": n_ctx}
    return {"type": "object", "required": ["input"], "properties": {
        "model": {"enum": [model_name, None]},
        "input": {"oneOf": [text, ids, {"type": "array", "items": {"oneOf": [text, ids]}, "minItems": 1,
                                        "maxItems": MAX_INPUTS}]},
        "encoding_format": {"enum": [*ENCODINGS, None]},
        "dimensions": {"enum": [hidden_size, None]},
        "user": {"type": ["string", "null"]},
        "add_special_tokens": _FLAG,
        "normalize": _FLAG,
    }}
