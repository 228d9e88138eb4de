"""The blueprint level: every docstring's IR example parses and round-trips, and a small
hand-built decode group prints and parses back equal."""

from __future__ import annotations

import re

import pytest
from xdsl.dialects.builtin import ArrayAttr, BFloat16Type, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region
from xdsl.parser import Parser

from strata.dialects import parse_ir, strata_context
from strata.dialects.blueprint import (
    NODE_OPS,
    EdgeType,
    FormatAttr,
    GroupOp,
    LinearOp,
    PlacementAttr,
    PrecisionAttr,
    StepAttr,
    YieldOp,
)
from strata.dialects.blueprint.attrs import ATTRIBUTES
from strata.dialects.blueprint.facts import ATTRIBUTES as FACT_ATTRIBUTES
from strata.ir.text import print_ir

DOCUMENTED = [*NODE_OPS, GroupOp, YieldOp]


def _example(cls) -> str:
    """The indented IR lines of a docstring (the example)."""
    doc = cls.__doc__ or ""
    lines = [ln[8:] for ln in doc.splitlines() if ln.startswith("        ") and ln.strip()]
    return "\n".join(lines)


_RESULTS = re.compile(r"^\s*((?:%\w+, )*%\w+) = ")


def _operands(line: str) -> tuple[list[str], list[str]]:
    """The values a line defines and the values it uses (before its ` : ` types)."""
    head = line.partition(" : ")[0]
    m = _RESULTS.match(head)
    defined = m.group(1).split(", ") if m else []
    head = head[m.end():] if m else head
    head = re.sub(r"\{.*\}", "", head)  # the attribute dictionary
    return defined, re.findall(r"%\w+", head)


def _wrap(example: str) -> str:
    """Put an example in a function whose arguments are the values it uses but does not define."""
    defined: set[str] = set()
    args: dict[str, str] = {}
    ops: list[str] = []
    for line in example.splitlines():  # an op's types may continue on the next lines
        if ops and line.lstrip().startswith((":", "!", "->")):
            ops[-1] += " " + line.strip()
        else:
            ops.append(line)
    for line in ops:
        outs, uses = _operands(line)
        types = re.findall(r"!blueprint\.edge<[^>]*>", line.partition(" : ")[2].split("->")[0])
        for i, u in enumerate(uses):
            if u not in defined and u not in args:
                args[u] = types[i]
        defined |= set(outs)
    sig = ", ".join(f"{a}: {t}" for a, t in args.items())
    return f"func.func @f({sig}) {{\n{example}\n  func.return\n}}"


@pytest.mark.parametrize("cls", DOCUMENTED, ids=lambda c: c.name)
def test_docstring_example_round_trips(cls):
    example = _example(cls)
    assert cls.name in example, f"{cls.name}: the docstring has no IR example"
    if cls is YieldOp:
        example = _example(GroupOp)
    text = _wrap(example)
    module = parse_ir(text)
    printed = print_ir(module)
    assert print_ir(parse_ir(printed)) == printed
    assert any(op.name == cls.name for op in module.walk())


@pytest.mark.parametrize("cls", [*ATTRIBUTES, *FACT_ATTRIBUTES], ids=lambda c: c.name)
def test_attribute_examples_parse(cls):
    examples = [ln.strip() for ln in (cls.__doc__ or "").splitlines() if ln.strip().startswith(("#blueprint", "!blueprint"))]
    assert examples
    for text in examples:
        attr = Parser(strata_context(), text).parse_attribute()
        assert isinstance(attr, cls)
        assert str(attr) == text


def _decode_linear() -> ModuleOp:
    """One linear layer's kernel group, built by hand: fp8 block-128x128 weights, bf16
    activations, f32 accumulation, on the device."""
    x_t = EdgeType("n", "hidden", BFloat16Type())
    y_t = EdgeType("n", "q_heads*head_dim", BFloat16Type())
    fmt = FormatAttr("fp8", [128, 128])
    prec = PrecisionAttr(fmt, FormatAttr("bf16"), FormatAttr("bf16"), FormatAttr("f32"))
    steps = [StepAttr("act", "bf16"), StepAttr("weight", "fp8/block128x128->bf16"),
             StepAttr("mma", "bf16*bf16"), StepAttr("accumulate", "f32"), StepAttr("scale", "f32")]
    func = FuncOp("decode", ((x_t,), (y_t,)))
    x = func.body.block.args[0]
    lin = LinearOp.create(
        operands=[x], result_types=[y_t],
        attributes={"param": StringAttr("model.layers.3.self_attn.q_proj.weight"), "role": StringAttr("q"),
                    "node": StringAttr("l3.attn.q"), "precision": prec, "steps": ArrayAttr(steps),
                    "placement": PlacementAttr("device")},
    )
    body = Block([lin, YieldOp.create(operands=[lin.result])])
    group = GroupOp.create(result_types=[y_t], attributes={"rule": StringAttr("w8a16_m32"),
                           "placement": PlacementAttr("device")}, regions=[Region(body)])
    func.body.block.add_ops([group, ReturnOp(group.outs[0])])
    module = ModuleOp([func])
    module.verify()
    return module


def test_decode_group_round_trips():
    module = _decode_linear()
    text = print_ir(module)
    assert 'blueprint.group "w8a16_m32" on device {' in text
    assert "#blueprint.format<fp8, block = [128, 128]>" in text
    back = parse_ir(text)
    assert back.is_structurally_equivalent(module)
    assert print_ir(back) == text


STATE_OPS = {"blueprint.conv1d_update", "blueprint.state_snapshot", "blueprint.gdn_recurrence",
             "blueprint.kv_write", "blueprint.paged_attention", "blueprint.attention"}


#: The collectives: they communicate (memory effects, kept in program order), touching no state.
COLLECTIVE_OPS = {"blueprint.all_reduce", "blueprint.all_gather"}


@pytest.mark.parametrize("cls", NODE_OPS, ids=lambda c: c.name)
def test_effects(cls):
    """Nodes that touch state declare memory effects and list the state effects they may
    carry; the collectives declare memory effects and no state effect; every other node is Pure."""
    from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

    if cls.name in COLLECTIVE_OPS:
        assert not cls.has_trait(Pure) and cls.has_trait(MemoryReadEffect) and cls.has_trait(MemoryWriteEffect)
        assert cls.STATE_EFFECTS == ()
    elif cls.name in STATE_OPS:
        assert not cls.has_trait(Pure)
        assert cls.has_trait(MemoryReadEffect) or cls.has_trait(MemoryWriteEffect)
        assert cls.STATE_EFFECTS
    else:
        assert cls.has_trait(Pure)
        assert cls.STATE_EFFECTS == ()


def test_group_without_yield():
    """A group built in Python whose body does not end with blueprint.yield."""
    from xdsl.utils.exceptions import VerifyException

    x_t = EdgeType("n", "hidden", BFloat16Type())
    func = FuncOp("f", ((x_t,), ()))
    lin = LinearOp.create(operands=[func.body.block.args[0]], result_types=[x_t],
                          attributes={"param": StringAttr("w"), "role": StringAttr("o")})
    group = GroupOp.create(attributes={"rule": StringAttr("w8a16_m32"), "placement": PlacementAttr("device")},
                           regions=[Region(Block([lin]))])
    with pytest.raises(VerifyException, match="the body must end with blueprint.yield"):
        group.verify_()
