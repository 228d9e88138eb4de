"""What the data-driven blueprint passes (recipes, fusion rules) share: reading a name list from
their JSON, and matching a node by its op, its role and a glob on its id."""

from __future__ import annotations

import fnmatch
from typing import Any

from xdsl.dialects.builtin import StringAttr

from strata.dialects.blueprint.base import NodeOp


def names(value: Any, key: str) -> frozenset[str]:
    """A rule's `key`: one name or a non-empty list of names (ValueError otherwise)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(s, str) and s for s in items):
        raise ValueError(f"'{key}' must be a name or a non-empty list of names, got {value!r}")
    return frozenset(items)


def matches_node(op: NodeOp, ops: frozenset[str], roles: frozenset[str] | None, node: str | None) -> bool:
    """Whether `op` is one of `ops` (names without `blueprint.`), with one of `roles` (None: any;
    a node without a role never matches a role list), its id matching the glob `node` (None: any)."""
    if op.name.removeprefix("blueprint.") not in ops:
        return False
    if roles is not None:
        role = op.attributes.get("role")
        if not isinstance(role, StringAttr) or role.data not in roles:
            return False
    return node is None or (op.node is not None and fnmatch.fnmatchcase(op.node.data, node))
