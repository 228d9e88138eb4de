"""The JSON schemas of the request bodies `requests.py` reads, for the server's OpenAPI document
(/openapi.json): what a client (or a property-based tester such as Schemathesis) may send. The
bounds are the ones `requests.py` checks; a body outside them is answered 400 naming the field."""

from __future__ import annotations

from typing import Any

from strata.runtime.serve.requests import MAX_LOGPROBS, MAX_N, MAX_STOPS

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
    "max_tokens": {"type": ["integer", "null"], "minimum": 0},
}

_TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}

COMPLETION_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        **_SAMPLING,
        "prompt": {"oneOf": [{"type": "string"}, _TOKEN_IDS,
                             {"type": "array", "items": {"oneOf": [{"type": "string"}, _TOKEN_IDS]},
                              "minItems": 1, "maxItems": 1}]},
        "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_LOGPROBS},
        "echo": {"type": ["boolean", "null"]},
        "best_of": {"type": ["integer", "null"], "minimum": 1, "maximum": 1},
        "suffix": {"type": ["string", "null"], "maxLength": 0},
    },
}

_CONTENT = {"oneOf": [{"type": "string"}, {"type": "null"},
                      {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                                  "properties": {"type": {"enum": ["text"]},
                                                                 "text": {"type": "string"}}}}]}

CHAT_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        **_SAMPLING,
        "messages": {"type": "array", "minItems": 1,
                     "items": {"type": "object", "required": ["role"],
                               "properties": {"role": {"enum": ["system", "user", "assistant"]},
                                              "content": _CONTENT}}},
        "max_completion_tokens": {"type": ["integer", "null"], "minimum": 0},
        "logprobs": {"type": ["boolean", "null"]},
        "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_LOGPROBS},
    },
}


def json_body(schema: dict[str, Any], model_name: str) -> dict[str, Any]:
    """A route's `openapi_extra`: its JSON request body, whose `model` is the one served."""
    schema = {**schema, "properties": {**schema["properties"], "model": {"enum": [model_name]}}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
