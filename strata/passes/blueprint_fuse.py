"""blueprint-fuse{rules=NAME}: wrap every blueprint node into exactly one `blueprint.group`, the
kernel launch a fusion rule gives it.

The rules are data, `strata/passes/fusion/NAME.json` (default `rules`, kbp-graph/v1's grouping for Qwen3.6-35B-A3B):

    {"description": "...",
     "tables": {"gemm": {"fp8": "w8a16", "int4": "w4a16", "bf16": "bf16", ...}, ...},
     "rules": [
       {"rule": "gdn_ba_gates_gemv_per_row",
        "members": [{"op": "linear", "role": "ba"}, {"op": "gdn_gates", "uses": 0}],
        "kernel": "strata::gdn_ba_gates_gemv", "family": "ssm_preprocess", "compute": "cuda_core",
        "numerics": "reference"},
       ...]}

A rule's `members` are node patterns; the first is the anchor. A pattern matches a node by
  - `op`: the op name without `blueprint.` (or a list of them);
  - `role` (optional): the linear's role (or a list);
  - `node` (optional): a glob on the node id (`*.post_norm`; a node without an id never matches);
  - `point` (optional): {key: [values]}, the node's point must give key one of the values;
  - `attr` (optional): {name: [values]}, the node's string attribute `name` (a hyperparameter
    such as the rope's `mode`) must be one of the values;
  - `from` (optional): an op name (or list): one of the node's operands comes from such an op;
and, for every member after the anchor, at least one relation to an earlier member k:
  - `uses`: k: the node reads a result of member k;   `feeds`: k: member k reads a result of the node;
  - `sibling`: k: the node reads a value member k reads;
  - `co_feeds`: k: a result of the node and one of member k are read by the same op.
Rules are tried in file order; each goes over the ungrouped nodes in op order, taking the first
match (members in op order) whose grouping keeps the function dominance-correct: the group stands
where its first member stood, or, if a member reads a value defined between the first and the
last member, where its last member stood; if neither works (or a stateful node outside the group
would be crossed by a stateful member), that match is refused. A node no rule takes is a group of
its own, rule `single_<op>`.

`rule`, `kernel`, `family` and `compute` are templates: `{TABLE:FIELD}` or `{FIELD}`, with FIELD
`weight`, `activation`, `output` or `accumulate` (the element of that format in the anchor's
`precision`; `{elem:weight@2}` reads member 2), `where` (the group's placement) or any string
attribute of the anchor (`kv_layout`); TABLE maps the value through `tables`. So the rule names
that depend on precision (`w8a16_m32`, `moe_gate_up_shared_fp8`, `paged_attention_bf16`) follow
the recipe, while membership does not depend on it. `numerics` defaults to "reference".

Each group gets `kernel`, `family`, `compute`, `numerics` and its members' placement (they must
agree); it yields the members' results used outside it, in member and result order. Every member
then carries the union of its members' `point`s (conflicting values are an error). The pass needs
`placement` on every node (blueprint-place-state) and, for names that read a format,
`precision` (blueprint-assign-precision). Groups already present are unwrapped first (their
bodies inlined where they stood), so the pass regroups the whole function and is idempotent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue

from strata.dialects.blueprint.attrs import PlacementAttr
from strata.dialects.blueprint.base import NodeOp
from strata.dialects.blueprint.group import GroupOp, YieldOp
from strata.dialects.blueprint_graph import check_functions
from strata.errors import StrataError
from strata.passes.node_patterns import matches_node, names
from strata.passes.options import StrataPass

__all__ = ["BlueprintFusePass", "FuseError", "FusionRules", "FUSION_DIR", "fuse_function", "load_rules",
           "parse_rules", "rule_set_names", "unwrap_groups"]

FUSION_DIR = Path(__file__).parent / "fusion"
_RULE_KEYS = {"rule", "members", "kernel", "family", "compute", "numerics"}
_MEMBER_KEYS = {"op", "role", "node", "point", "attr", "from"}
RELATIONS = ("uses", "feeds", "sibling", "co_feeds")
_PRECISION_FIELDS = ("weight", "activation", "output", "accumulate")
_TEMPLATE = re.compile(r"\{(?:(\w+):)?(\w+)(?:@(\d+))?\}")


class FuseError(StrataError):
    """An unknown or malformed rule file, or a module the rules cannot group."""


def rule_set_names() -> list[str]:
    return sorted(p.stem for p in FUSION_DIR.glob("*.json"))


@dataclass(frozen=True)
class Member:
    ops: frozenset[str]
    roles: frozenset[str] | None = None
    node: str | None = None
    point: tuple[tuple[str, frozenset[str]], ...] = ()
    attrs: tuple[tuple[str, frozenset[str]], ...] = ()
    sources: frozenset[str] | None = None
    relations: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def parse(index: int, raw: Any) -> Member:
        if not isinstance(raw, dict):
            raise ValueError(f"member {index} is not an object")
        unknown = set(raw) - _MEMBER_KEYS - set(RELATIONS)
        if unknown:
            raise ValueError(f"member {index}: unknown key(s) {', '.join(sorted(unknown))}")
        if "op" not in raw:
            raise ValueError(f"member {index}: no 'op'")
        point, attrs = raw.get("point", {}), raw.get("attr", {})
        if not isinstance(point, dict) or not isinstance(attrs, dict):
            raise ValueError(f"member {index}: 'point' and 'attr' are objects of value lists")
        relations = []
        for rel in RELATIONS:
            if rel in raw:
                k = raw[rel]
                if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < index:
                    raise ValueError(f"member {index}: '{rel}' must name an earlier member, got {k!r}")
                relations.append((rel, k))
        if index > 0 and not relations:
            raise ValueError(f"member {index}: needs a relation ({', '.join(RELATIONS)}) to an earlier member")
        if index == 0 and relations:
            raise ValueError("member 0 (the anchor) takes no relation")
        node = raw.get("node")
        if node is not None and (not isinstance(node, str) or not node):
            raise ValueError(f"member {index}: 'node' must be a glob on node ids")
        return Member(names(raw["op"], "op"), names(raw["role"], "role") if "role" in raw else None, node,
                      tuple((k, names(v, f"point.{k}")) for k, v in sorted(point.items())),
                      tuple((k, names(v, f"attr.{k}")) for k, v in sorted(attrs.items())),
                      names(raw["from"], "from") if "from" in raw else None, tuple(relations))

    def matches(self, op: NodeOp) -> bool:
        if not matches_node(op, self.ops, self.roles, self.node):
            return False
        if self.point:
            have = op.point.data if op.point is not None else {}
            for key, values in self.point:
                v = have.get(key)
                if not isinstance(v, StringAttr) or v.data not in values:
                    return False
        for key, values in self.attrs:
            v = op.attributes.get(key)
            if not isinstance(v, StringAttr) or v.data not in values:
                return False
        if self.sources is not None:
            if not any(isinstance(v.owner, Operation) and v.owner.name.removeprefix("blueprint.") in self.sources
                       for v in op.operands):
                return False
        return True


@dataclass(frozen=True)
class Rule:
    index: int
    name: str
    members: tuple[Member, ...]
    kernel: str
    family: str
    compute: str
    numerics: str

    @staticmethod
    def parse(index: int, raw: Any) -> Rule:
        if not isinstance(raw, dict):
            raise ValueError("a rule is an object")
        unknown = set(raw) - _RULE_KEYS
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_RULE_KEYS))})")
        for key in ("rule", "members", "kernel", "family", "compute"):
            if key not in raw:
                raise ValueError(f"no '{key}'")
        for key in ("rule", "kernel", "family", "compute", "numerics"):
            if key in raw and (not isinstance(raw[key], str) or not raw[key]):
                raise ValueError(f"'{key}' must be a non-empty string")
        if not isinstance(raw["members"], list) or not raw["members"]:
            raise ValueError("'members' must be a non-empty list")
        members = tuple(Member.parse(i, m) for i, m in enumerate(raw["members"]))
        return Rule(index, raw["rule"], members, raw["kernel"], raw["family"], raw["compute"],
                    raw.get("numerics", "reference"))


@dataclass(frozen=True)
class FusionRules:
    name: str
    path: Path
    description: str
    tables: dict[str, dict[str, str]] = field(hash=False)
    rules: tuple[Rule, ...]

    def expand(self, template: str, rule: Rule, members: list[NodeOp], where: str) -> str:
        def one(m: re.Match[str]) -> str:
            table, fld, at = m.group(1), m.group(2), int(m.group(3) or 0)
            if at >= len(members):
                raise FuseError(f"blueprint-fuse: rule {rule.index} '{rule.name}': '{m.group(0)}' names member {at}")
            value = _field(members[at], fld, where, rule)
            if table is None:
                return value
            if table not in self.tables:
                raise FuseError(f"blueprint-fuse: rule {rule.index} '{rule.name}' ({self.path}): no table '{table}'")
            if value not in self.tables[table]:
                raise FuseError(f"blueprint-fuse: rule {rule.index} '{rule.name}' ({self.path}): table '{table}' "
                                f"has no entry for '{value}' ({_label(members[at])})")
            return self.tables[table][value]

        return _TEMPLATE.sub(one, template)


def _label(op: NodeOp) -> str:
    return op.name + (f" '{op.node.data}'" if op.node is not None else "")


def _field(op: NodeOp, fld: str, where: str, rule: Rule) -> str:
    if fld == "where":
        return where
    if fld in _PRECISION_FIELDS:
        fmt = op.precision.fields().get(fld) if op.precision is not None else None
        if fmt is None:
            raise FuseError(f"blueprint-fuse: rule '{rule.name}' names groups by the {fld} format, and "
                            f"{_label(op)} has none (run blueprint-assign-precision first)")
        return fmt.elem.data
    value = op.attributes.get(fld)
    if not isinstance(value, StringAttr):
        raise FuseError(f"blueprint-fuse: rule '{rule.name}' reads '{fld}' of {_label(op)}, which has no such "
                        f"string attribute (run blueprint-place-state first)")
    return value.data


@cache
def load_rules(name: str) -> FusionRules:
    known = rule_set_names()
    if name not in known:
        raise FuseError(f"blueprint-fuse: unknown rule set '{name}' (known: {', '.join(known)})")
    path = FUSION_DIR / f"{name}.json"
    return parse_rules(name, path, path.read_text())


def parse_rules(name: str, path: Path, text: str) -> FusionRules:
    def bad(msg: str) -> FuseError:
        return FuseError(f"blueprint-fuse: malformed rule file {path}: {msg}")

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(f"not JSON ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list) or set(raw) - {"description", "tables", "rules"}:
        raise bad('expected {"description": ..., "tables": {...}, "rules": [...]}')
    tables = raw.get("tables", {})
    if not isinstance(tables, dict) or not all(
            isinstance(t, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in t.items())
            for t in tables.values()):
        raise bad("'tables' maps table names to {value: name} objects")
    rules = []
    for i, r in enumerate(raw["rules"]):
        try:
            rules.append(Rule.parse(i, r))
        except ValueError as e:
            raise bad(f"rule {i} {json.dumps(r)[:120]}: {e}") from None
    return FusionRules(name, path, str(raw.get("description", "")), tables, tuple(rules))


# ---------------------------------------------------------------------------------------------
# Grouping


def unwrap_groups(block: Block) -> None:
    """Inline every group's body where the group stands (its results become the yielded values)."""
    for group in [op for op in block.ops if isinstance(op, GroupOp)]:
        body = group.body.block
        yielded = body.last_op
        assert isinstance(yielded, YieldOp)
        for op in [o for o in body.ops if o is not yielded]:
            op.detach()
            block.insert_op_before(op, group)
        for res, val in zip(group.outs, yielded.values, strict=True):
            res.replace_all_uses_with(val)
        group.detach()
        group.erase()


@dataclass
class _Grouping:
    block: Block
    pos: dict[Operation, int]
    taken: set[Operation] = field(default_factory=set)

    def candidates(self, rel: str, member: NodeOp) -> Iterator[Operation]:
        if rel == "uses":
            for r in member.results:
                for u in r.uses:
                    yield u.operation
        elif rel == "feeds":
            for v in member.operands:
                if isinstance(v.owner, Operation):
                    yield v.owner
        elif rel == "sibling":
            for v in member.operands:
                for u in v.uses:
                    yield u.operation
        else:  # co_feeds
            for r in member.results:
                for u in r.uses:
                    for v in u.operation.operands:
                        if isinstance(v.owner, Operation):
                            yield v.owner

    def free(self, op: Operation) -> bool:
        return isinstance(op, NodeOp) and op not in self.taken and op in self.pos

    def match(self, rule: Rule, chosen: list[NodeOp]) -> Iterator[list[NodeOp]]:
        i = len(chosen)
        if i == len(rule.members):
            yield chosen
            return
        pat = rule.members[i]
        rel, k = pat.relations[0]
        for cand in sorted(set(self.candidates(rel, chosen[k])), key=lambda o: self.pos.get(o, -1)):
            if not self.free(cand) or cand in chosen:
                continue
            assert isinstance(cand, NodeOp)
            if pat.matches(cand) and all(cand in set(self.candidates(r, chosen[j])) for r, j in pat.relations[1:]):
                yield from self.match(rule, [*chosen, cand])

    def placement_point(self, members: list[NodeOp]) -> Operation | None:
        """The member before which the group can stand, or None (see the module doc)."""
        ms = sorted(members, key=self.pos.__getitem__)
        first, last = self.pos[ms[0]], self.pos[ms[-1]]
        inside = set(ms)
        between = []
        op = ms[0].next_op
        while op is not None and self.pos.get(op, last) < last:  # walk only the ops between them
            if op not in inside and self.pos.get(op, -1) > first:
                between.append(op)
            op = op.next_op
        if not between:
            return ms[0]
        if any(_stateful(op) for op in between) and any(_stateful(m) for m in ms):
            return None
        between_set = set(between)
        reads_between = any(isinstance(v.owner, Operation) and v.owner in between_set for m in ms for v in m.operands)
        if not reads_between:
            return ms[0]
        used_between = any(u.operation in between_set for m in ms for r in m.results for u in r.uses)
        return None if used_between else ms[-1]


def _stateful(op: Operation) -> bool:
    effects = op.attributes.get("effects")
    return effects is not None and bool(effects.data)  # type: ignore[attr-defined]


def fuse_function(rules: FusionRules, fn: func.FuncOp) -> None:
    block = fn.body.block
    unwrap_groups(block)
    grouping = _Grouping(block, {op: i for i, op in enumerate(block.ops)})
    nodes = [op for op in block.ops if isinstance(op, NodeOp)]
    for node in nodes:
        if node.placement is None:
            raise FuseError(f"blueprint-fuse: {_label(node)} has no placement (run blueprint-place-state first)")
    plans: list[tuple[Rule | None, list[NodeOp], Operation]] = []
    for rule in rules.rules:
        for anchor in nodes:
            if not grouping.free(anchor) or not rule.members[0].matches(anchor):
                continue
            for found in grouping.match(rule, [anchor]):
                if len({m.placement.value for m in found}) != 1:  # type: ignore[union-attr]
                    continue
                at = grouping.placement_point(found)
                if at is not None:
                    grouping.taken.update(found)
                    plans.append((rule, found, at))
                    break
    for node in nodes:
        if node not in grouping.taken:
            plans.append((None, [node], node))
    for rule, found, at in plans:
        _build_group(rules, rule, found, sorted(found, key=grouping.pos.__getitem__), at)
    _check_order(fn)


def _check_order(fn: func.FuncOp) -> None:
    """Every operand of a top-level op is defined before it (groups stand where the rules chose)."""
    defined: set[SSAValue] = set(fn.body.block.args)
    for op in fn.body.block.ops:
        for v in op.operands:
            if v not in defined:
                raise FuseError(f"blueprint-fuse: @{fn.sym_name.data}: grouping put a use of a value before its "
                                f"definition ({op.name} '{op.attributes.get('rule')}')")
        defined.update(op.results)


def _build_group(rules: FusionRules, rule: Rule | None, found: list[NodeOp], members: list[NodeOp],
                 at: Operation) -> None:
    """Group `members` (op order; `found`: the rule's member order, for its templates) before `at`."""
    where = members[0].placement.value  # type: ignore[union-attr]
    if rule is None:
        op = members[0].name.removeprefix("blueprint.")
        attrs = {"kernel": f"strata::{op}", "family": op, "compute": "generic", "numerics": "reference"}
        name = f"single_{op}"
    else:
        name = rules.expand(rule.name, rule, found, where)
        attrs = {k: rules.expand(getattr(rule, k), rule, found, where) for k in ("kernel", "family", "compute")}
        attrs["numerics"] = rule.numerics
    inside = set(members)
    outs: list[SSAValue] = [r for m in members for r in m.results
                            if any(u.operation not in inside for u in r.uses)]
    block = at.parent_block()
    assert block is not None
    group = GroupOp.create(result_types=[v.type for v in outs], regions=[Region(Block())],
                           attributes={"rule": StringAttr(name), "placement": PlacementAttr(where),
                                       **{k: StringAttr(v) for k, v in attrs.items()}})
    block.insert_op_before(group, at)
    body = group.body.block
    for m in members:
        m.detach()
        body.add_op(m)
    body.add_op(YieldOp.create(operands=outs))
    for v, r in zip(outs, group.outs, strict=True):
        v.replace_uses_with_if(r, lambda use: use.operation.parent_op() is not group)
        r.name_hint = v.name_hint
    _spread_points(members)


def _spread_points(members: list[NodeOp]) -> None:
    union: dict[str, StringAttr] = {}
    for m in members:
        for k, v in (m.point.data.items() if m.point is not None else ()):
            assert isinstance(v, StringAttr)
            if k in union and union[k] != v:
                raise FuseError(f"blueprint-fuse: the points of one group disagree on '{k}' "
                                f"('{union[k].data}' and '{v.data}' at {_label(m)})")
            union[k] = v
    if union:
        for m in members:
            m.attributes["point"] = DictionaryAttr(union)


@dataclass(frozen=True)
class BlueprintFusePass(StrataPass):
    """Wrap every blueprint node into the group of its fusion rule (`rules=rules`)."""

    name = "blueprint-fuse"

    rules: str = "rules"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rules = load_rules(self.rules)
        check_functions(op, self.name)
        for fn in [o for o in op.walk() if isinstance(o, func.FuncOp)]:
            fuse_function(rules, fn)
        op.verify()
