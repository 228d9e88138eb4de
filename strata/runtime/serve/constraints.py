"""The output constraints of a request body: OpenAI's `response_format` and llama-server's
`grammar` and `json_schema`, read into a `strata.runtime.constrain.ConstraintSpec` and checked.

    spec = request_constraint({"response_format": {"type": "json_schema",
                                                   "json_schema": {"name": "p", "schema": {...}, "strict": True}}})
    request_constraint({"grammar": 'root ::= "yes" | "no"'})      # llama-server's GBNF field
    request_constraint({"json_schema": {"type": "object"}})       # llama-server's schema field
    request_constraint({"response_format": {"type": "text"}})     # None: unconstrained

A request gives at most one of them; a malformed field, or a schema or grammar the library
refuses, is a `FieldError` naming the field, with the library's reason on one line (the request
parser answers it 400).
`strict` is accepted either way: the output always follows the schema exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from strata.runtime.constrain import ConstraintError, ConstraintSpec, grammar_of


class FieldError(ConstraintError):
    """A constraint field of a request that cannot be used; `param` names the field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.message, self.param = message, param


def request_constraint(body: Mapping[str, Any]) -> ConstraintSpec | None:
    """The constraint `body` asks for (None: none), checked."""
    given = [name for name in ("response_format", "grammar", "json_schema") if body.get(name) is not None]
    if len(given) > 1:
        raise FieldError(f"give one of 'response_format', 'grammar' and 'json_schema', not {' and '.join(given)}",
                       given[1])
    if not given:
        return None
    field = given[0]
    value = body[field]
    if field == "grammar":
        if not isinstance(value, str) or not value.strip():
            raise FieldError("'grammar' must be a GBNF grammar (a non-empty string)", "grammar")
        spec = ConstraintSpec("grammar", value)
    elif field == "json_schema":
        spec = _schema(value, "json_schema")
    else:
        spec = _response_format(value)
    if spec is not None:
        try:
            grammar_of(spec)
        except ConstraintError as e:
            raise FieldError(f"'{field}': {e}", field) from None
    return spec


def _response_format(value: Any) -> ConstraintSpec | None:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise FieldError("'response_format' must be an object with a 'type' (text, json_object or json_schema)",
                       "response_format")
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return ConstraintSpec("json_object")
    if kind == "json_schema":
        inner = value.get("json_schema")
        if not isinstance(inner, dict):
            raise FieldError("'response_format.json_schema' must be an object with a 'schema'",
                           "response_format.json_schema")
        if "strict" in inner and inner["strict"] is not None and not isinstance(inner["strict"], bool):
            raise FieldError("'response_format.json_schema.strict' must be a boolean", "response_format.json_schema")
        if "schema" not in inner:  # OpenAI's default: any JSON object
            return ConstraintSpec("json_object")
        return _schema(inner["schema"], "response_format.json_schema.schema")
    raise FieldError(f"'response_format.type' must be text, json_object or json_schema, not {kind[:40]!r}",
                   "response_format")


def _schema(value: Any, where: str) -> ConstraintSpec:
    if not isinstance(value, (dict, bool)):
        raise FieldError(f"'{where}' must be a JSON schema object", where)
    return ConstraintSpec("json_schema", json.dumps(value))
