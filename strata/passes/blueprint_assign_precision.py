"""blueprint-assign-precision{recipe=NAME}: set every blueprint node's `precision` and `steps`.

A recipe is a data file, `strata/passes/recipes/NAME.json`:

    {"description": "...",
     "rules": [
       {"op": "linear", "role": ["ba"], "precision": {"weight": "bf16", "activation": "bf16",
        "output": "f32", "accumulate": "f32"}, "steps": ["act bf16", "weight bf16->bf16", ...]},
       ...]}

A rule matches a node by
  - `op`: the op's name without `blueprint.` (`linear`, `expert_down`), or a list of them;
  - `role` (optional): the linear's role, or a list of roles (a node without a role never matches);
  - `weight` (optional): true/false, whether the node reads a weight (`weight "..."`/`weights [...]`);
  - `node` (optional): a glob on the node's id, its `node` attribute (`*.post_norm`; a node without
    an id never matches).
The first rule that matches a node gives it `precision` (each of weight, activation, output and
accumulate optional; a format is written as in kbp-graph/v1: `bf16`, `fp8/block128x128`,
`int4/block128/asymmetric`) and `steps` (`"verb detail"`, kbp-graph/v1's spelling). Every node needs
a rule. A node's float results (its edges) take its output format as their element type, so an
edge's format is its producer's output; the graph and other attributes stay as they are.

A weight format `gguf` keeps a weight in the block type its GGUF file stores it in: the node's
format becomes that type (`q4_K`, one of `GGUF_FORMATS`) when every weight it reads (its param
and concat) is stored in it (the function's `blueprint.stored_formats`), stays `gguf` (each part
in its own type) when they are stored in different block types, and becomes `f32` (the values
as stored, dequantized at load) when one of them is not block-typed, or is converted, split or
shared (a tied head) on its way to the node, or when a routed experts node's parts differ.

Recipes: fp8-bf16head (the Qwen3.6-35B-A3B kbp-graph/v1 plan's), bf16, f32, w4a16, gguf and
gguf-bf16 (with bf16 activations). A tensor-parallel blueprint's collectives take their wire
format from their rule (`all_reduce`, `all_gather`) and their cost (`bytes_per_row`) is priced
again in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import VerifyException

from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType
from xdsl.rewriter import Rewriter

from strata.dialects.blueprint.attrs import (AS_STORED, GGUF_FORMATS, EdgeType, FormatAttr, PrecisionAttr,
                                             StepAttr, format_text)
from strata.dialects.blueprint.group import GroupOp
from strata.ir.dtypes import has_kind
from strata.dialects.blueprint.base import NodeOp
from strata.dialects.blueprint_graph import check_functions
from strata.dialects.blueprint.collective import COLLECTIVE_NODES, wire_bytes
from strata.dialects.blueprint.facts import function_dims
from strata.errors import StrataError
from strata.passes.node_patterns import matches_node, names
from strata.passes.options import StrataPass

__all__ = ["BlueprintAssignPrecisionPass", "Recipe", "RecipeError", "Rule", "RECIPE_DIR", "apply_recipe",
           "format_from_text", "format_text", "load_recipe", "parse_recipe", "recipe_names"]

RECIPE_DIR = Path(__file__).parent / "recipes"
_RULE_KEYS = {"op", "role", "weight", "node", "precision", "steps"}
_PRECISION_KEYS = ("weight", "activation", "output", "accumulate")


class RecipeError(StrataError):
    """An unknown recipe or a malformed recipe file."""


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPE_DIR.glob("*.json"))


def format_from_text(text: str) -> FormatAttr:
    """`bf16`, `fp8/block128x128`, `int4/block128/asymmetric` -> #blueprint.format."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"a format is a string such as 'bf16' or 'fp8/block128x128', got {text!r}")
    elem, *rest = text.split("/")
    block: list[int] = []
    asym = False
    for part in rest:
        if part == "asymmetric":
            asym = True
        elif part.startswith("block") and all(s.isdigit() and s for s in part[5:].split("x")):
            block = [int(s) for s in part[5:].split("x")]
        else:
            raise ValueError(f"bad format '{text}': '{part}' is neither blockN[xM] nor asymmetric")
    try:
        fmt = FormatAttr(elem, block, asym)
        fmt.verify()
    except VerifyException as e:
        raise ValueError(f"bad format '{text}': {e}") from None
    return fmt


@dataclass(frozen=True)
class Rule:
    index: int
    ops: frozenset[str]
    roles: frozenset[str] | None
    weight: bool | None
    node: str | None
    precision: PrecisionAttr
    steps: ArrayAttr[StepAttr]

    @staticmethod
    def parse(index: int, raw: Any) -> Rule:
        if not isinstance(raw, dict):
            raise ValueError("a rule is an object")
        unknown = set(raw) - _RULE_KEYS
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_RULE_KEYS))})")
        for key in ("op", "precision", "steps"):
            if key not in raw:
                raise ValueError(f"no '{key}'")
        ops = names(raw["op"], "op")
        roles = names(raw["role"], "role") if "role" in raw else None
        weight = raw.get("weight")
        if weight is not None and not isinstance(weight, bool):
            raise ValueError(f"'weight' must be true or false, got {weight!r}")
        node = raw.get("node")
        if node is not None and (not isinstance(node, str) or not node):
            raise ValueError(f"'node' must be a glob on node ids, got {node!r}")
        prec = raw["precision"]
        if not isinstance(prec, dict) or set(prec) - set(_PRECISION_KEYS):
            raise ValueError(f"'precision' is an object with keys among {', '.join(_PRECISION_KEYS)}, got {prec!r}")
        precision = PrecisionAttr(**{k: format_from_text(v) for k, v in prec.items()})
        steps = raw["steps"]
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise ValueError(f"'steps' is a list of \"verb detail\" strings, got {steps!r}")
        step_attrs = []
        for s in steps:
            verb, _, detail = s.partition(" ")
            if not detail:
                raise ValueError(f"step '{s}' is not \"verb detail\"")
            try:
                step = StepAttr(verb, detail)
                step.verify()
            except VerifyException as e:
                raise ValueError(str(e)) from None
            step_attrs.append(step)
        return Rule(index, ops, roles, weight, node, precision, ArrayAttr(step_attrs))

    def describe(self) -> str:
        text = f"rule {self.index} (op {'/'.join(sorted(self.ops))}"
        if self.roles is not None:
            text += f", role {'/'.join(sorted(self.roles))}"
        return text + ")"

    def matches(self, op: NodeOp) -> bool:
        return (matches_node(op, self.ops, self.roles, self.node)
                and (self.weight is None or op.reads_weight == self.weight))


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    description: str
    rules: tuple[Rule, ...]

    def rule_for(self, op: NodeOp) -> Rule:
        """The first rule matching `op`; a RecipeError if none does, or if the rule gives a
        weight format to a node that reads no weight."""
        for rule in self.rules:
            if rule.matches(op):
                break
        else:
            role = op.attributes.get("role")
            what = op.name + (f" role '{role.data}'" if isinstance(role, StringAttr) else "")
            raise RecipeError(f"blueprint-assign-precision: recipe '{self.name}' ({self.path}) has no rule for {what}")
        if "weight" in rule.precision.fields() and not op.reads_weight:
            raise RecipeError(f"blueprint-assign-precision: recipe '{self.name}' ({self.path}) "
                              f"{rule.describe()} gives a weight format to {op.name}, which reads no weight")
        return rule


def check_recipe_name(name: str) -> None:
    """Refuse a name that is not one of `recipes/`'s (repr: a name may hold a newline)."""
    known = recipe_names()
    if name not in known:
        raise RecipeError(f"blueprint-assign-precision: unknown recipe {name!r} (known: {', '.join(known)})")


@cache
def load_recipe(name: str) -> Recipe:
    """The recipe `name` from `recipes/NAME.json`; a one-line RecipeError if unknown or malformed."""
    check_recipe_name(name)
    path = RECIPE_DIR / f"{name}.json"
    return parse_recipe(name, path, path.read_text())


def parse_recipe(name: str, path: Path, text: str) -> Recipe:
    def bad(msg: str) -> RecipeError:
        return RecipeError(f"blueprint-assign-precision: malformed recipe file {path}: {msg}")

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(f"not JSON ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list) or set(raw) - {"description", "rules"}:
        raise bad('expected {"description": ..., "rules": [...]}')
    rules = []
    for i, r in enumerate(raw["rules"]):
        try:
            rules.append(Rule.parse(i, r))
        except ValueError as e:
            raise bad(f"rule {i} {json.dumps(r)}: {e}") from None
    return Recipe(name, path, str(raw.get("description", "")), tuple(rules))


@dataclass
class AssignPrecision(RewritePattern):
    """Give a node the precision and steps of its recipe's first matching rule."""

    recipe: Recipe

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: NodeOp, rewriter: PatternRewriter) -> None:
        rule = self.recipe.rule_for(op)
        if op.precision == rule.precision and op.steps == rule.steps:
            return
        op.attributes["precision"] = rule.precision
        op.attributes["steps"] = rule.steps
        out = rule.precision.fields().get("output")
        if out is not None:  # an edge carries its producer's output format
            for r in list(op.results):
                t = r.type
                if isinstance(t, EdgeType) and has_kind(t.element, "float") and t.element != out.dtype.attr:
                    hint = r.name_hint
                    rewriter.replace_value_with_new_type(r, EdgeType(t.rows.data, t.dim.data, out.dtype.attr)).name_hint = hint
        rewriter.notify_op_modified(op)


def stored_weight_format(fn: func.FuncOp, op: NodeOp) -> FormatAttr:
    """The format `gguf` of node `op` of `fn` resolved (see the module docstring)."""
    table = fn.attributes.get("blueprint.stored_formats")
    stored = {k: v.data for k, v in table.data.items()} if table is not None else {}  # type: ignore[union-attr]
    names = [op.attributes["param"].data] if "param" in op.attributes else []  # type: ignore[union-attr]
    if "concat" in op.attributes:
        names += [c.data for c in op.attributes["concat"].data]  # type: ignore[union-attr]
    kinds = {stored.get(n) for n in names}
    stacked = op.name in ("blueprint.expert_gate_up", "blueprint.expert_down")  # one launch for every expert
    if not names or None in kinds or not kinds <= set(GGUF_FORMATS) or (stacked and len(kinds) > 1):
        return FormatAttr("f32")
    return FormatAttr(kinds.pop() if len(kinds) == 1 else AS_STORED)


class ResolveStoredFormat(RewritePattern):
    """A node whose weight format is `gguf` takes its weights' stored block type
    (`stored_weight_format`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: NodeOp, rewriter: PatternRewriter) -> None:
        p = op.attributes.get("precision")
        w = p.fields().get("weight") if isinstance(p, PrecisionAttr) else None
        fn = op.parent_op()
        while fn is not None and not isinstance(fn, func.FuncOp):
            fn = fn.parent_op()
        if w is None or w.elem.data != AS_STORED or fn is None:
            return
        fields = p.fields()  # type: ignore[union-attr]
        fields["weight"] = stored_weight_format(fn, op)
        if fields["weight"] != w:
            op.attributes["precision"] = PrecisionAttr(**fields)
            rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class BlueprintAssignPrecisionPass(StrataPass):
    """Set each blueprint node's `precision` and `steps` from a recipe (`recipe=fp8-bf16head`)."""

    name = "blueprint-assign-precision"

    recipe: str = "fp8-bf16head"

    def check(self) -> None:
        check_recipe_name(self.recipe)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check()
        recipe = load_recipe(self.recipe)
        check_functions(op, self.name)
        apply_recipe(recipe, op)


def apply_recipe(recipe: Recipe, module: ModuleOp) -> None:
    """Give every node of `module` its precision and steps from `recipe`."""
    for node in module.walk():  # every node has a rule before anything changes (and errors stay one line)
        if isinstance(node, NodeOp):
            recipe.rule_for(node)
    PatternRewriteWalker(AssignPrecision(recipe), apply_recursively=False).rewrite_module(module)
    PatternRewriteWalker(ResolveStoredFormat(), apply_recursively=False).rewrite_module(module)
    _retype_carriers(module)
    for fn in module.walk():
        if isinstance(fn, func.FuncOp) and any(isinstance(op, NodeOp) for op in fn.walk()):
            fn.attributes["blueprint.recipe"] = StringAttr(recipe.name)
            _price_collectives(fn)


def _price_collectives(fn: func.FuncOp) -> None:
    """A collective's cost in the wire format its output now has (`wire_bytes`)."""
    dims = function_dims(fn)
    for op in fn.walk():
        if isinstance(op, COLLECTIVE_NODES):
            op.attributes["bytes_per_row"] = IntegerAttr(wire_bytes(op, dims), i64)


def _retype_carriers(module: ModuleOp) -> None:
    """Groups and functions hand on their edges with the types the edges now have."""
    for op in module.walk():
        if isinstance(op, GroupOp):
            for r, v in zip(list(op.outs), op.body.block.last_op.operands):  # type: ignore[union-attr]
                if r.type != v.type:
                    hint = r.name_hint
                    Rewriter.replace_value_with_new_type(r, v.type).name_hint = hint
    for fn in module.walk():
        if isinstance(fn, func.FuncOp) and isinstance(fn.body.block.last_op, func.ReturnOp):
            outs = [v.type for v in fn.body.block.last_op.operands]
            if list(fn.function_type.outputs.data) != outs:
                fn.function_type = FunctionType.from_lists(list(fn.function_type.inputs.data), outs)
