"""Every op and block kind has one implementation in each consumer that handles it
(DESIGN.md: "A test fails when a consumer lacks one").

Op-level consumers: the op interpreter, the CPU emitter and the trace exporter, each an
`Implementations` table keyed by op class. Module-level consumers: the module interpreter
and convert-module-to-op's expansions, keyed by a block's kind (its `path`).
"""

from __future__ import annotations

import pytest
from xdsl.dialects import func
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, result_def

from strata.dialects import module as M
from strata.dialects.op import Op
from strata.exporters.onnx import ONNX_EXPORT
from strata.exporters.trace import TRACE
from strata.ir.impls import Implementations, MissingImplementation
from strata.passes.convert_module_to_op import ENTRIES, EXPANSIONS, LOOPS
from strata.pipeline import load_model
from strata.semantics.module_interp import BLOCK_SEMANTICS
from strata.semantics.op_interp import INTERPRETER
from strata.targets.cpu.emit import CPU_EMITTER
from support import EXAMPLES, TINY, module_of

OP_CONSUMERS = {"interpreter": INTERPRETER, "cpu emitter": CPU_EMITTER, "trace": TRACE, "onnx": ONNX_EXPORT}
BLOCK_CONSUMERS = {"module interpreter": BLOCK_SEMANTICS, "convert-module-to-op": EXPANSIONS}

OPS = list(Op.operations)
EXAMPLE_DIRS = sorted(p for p in EXAMPLES.iterdir() if (p / "config.json").is_file())


# ---------------------------------------------------------------------------------------------
# Ops


@pytest.mark.parametrize("consumer", sorted(OP_CONSUMERS))
def test_every_op_has_an_implementation(consumer):
    table = OP_CONSUMERS[consumer]
    assert len(OPS) >= 20  # the dialect is really there
    assert table.missing(Op) == []
    for op in OPS:
        assert table.get(op) is not None, op.name


@pytest.mark.parametrize("consumer", sorted(OP_CONSUMERS))
def test_no_implementation_of_an_op_outside_the_dialect(consumer):
    """A stale entry (an op removed from the dialect, or registered under a wrong class) is a gap too;
    `func.return`, which ends every entry, is the one op of another dialect a consumer may handle."""
    stray = [k for k in OP_CONSUMERS[consumer].keys() if k not in OPS and k is not func.ReturnOp]
    assert stray == []


# ---------------------------------------------------------------------------------------------
# Block kinds


def _kinds(module) -> set[str]:
    return {op.kind for op in module.walk() if isinstance(op, M.BlockOp)}


@pytest.fixture(scope="module")
def example_kinds() -> dict[str, set[str]]:
    """The block kinds each example's built model uses."""
    assert EXAMPLE_DIRS, "no examples found"
    return {d.name: _kinds(load_model(d).module) for d in EXAMPLE_DIRS}


def test_examples_use_the_standard_kinds(example_kinds):
    every = set().union(*example_kinds.values())
    assert {"std.nn.embedding", "std.nn.linear", "std.attn.grouped_query", "std.layer.decoder",
            "std.model.causal_lm"} <= every


@pytest.mark.parametrize("consumer", sorted(BLOCK_CONSUMERS))
@pytest.mark.parametrize("example", [d.name for d in EXAMPLE_DIRS])
def test_every_block_kind_of_an_example_has_an_implementation(example_kinds, example, consumer):
    table = BLOCK_CONSUMERS[consumer]
    kinds = sorted(example_kinds[example])
    assert kinds
    assert table.missing(kinds) == []


@pytest.mark.parametrize("consumer", sorted(BLOCK_CONSUMERS))
@pytest.mark.parametrize("family", sorted(TINY))
def test_every_block_kind_of_a_tiny_model_has_an_implementation(family, consumer):
    assert BLOCK_CONSUMERS[consumer].missing(sorted(_kinds(module_of(TINY[family])))) == []


@pytest.mark.parametrize("example", [d.name for d in EXAMPLE_DIRS])
def test_root_kind_implements_the_entries(example):
    """The root block's kind runs and lowers each entry convert-module-to-op offers."""
    model = load_model(EXAMPLES / example).model_op
    root = model.block(model.root.data)
    declared = {fn.member_name for fn in model.entries()}
    assert set(ENTRIES) == declared  # the module level's seventeen
    for entry in ENTRIES:
        if entry == "sample":  # lowered on the op level's sampling op, not there yet
            continue
        # A device loop lowers to a loop over a decode step; every other entry is the root kind's.
        lowered = "decode_rows" if entry in LOOPS else entry
        assert callable(getattr(EXPANSIONS[root.kind], lowered, None)), (root.kind, entry)
        assert entry in BLOCK_SEMANTICS[root.kind].ENTRIES, (root.kind, entry)


# ---------------------------------------------------------------------------------------------
# The check itself finds a gap


@irdl_op_definition
class _FakeOp(IRDLOperation):
    name = "fake.thing"
    result = result_def()


FAKE = Dialect("fake", [_FakeOp], [])


@pytest.mark.parametrize("consumer", sorted(OP_CONSUMERS))
def test_missing_reports_an_unregistered_op(consumer):
    table = OP_CONSUMERS[consumer]
    assert table.missing(FAKE) == ["'fake.thing'"]
    assert table.get(_FakeOp) is None and _FakeOp not in table
    with pytest.raises(MissingImplementation, match="no implementation for 'fake.thing'"):
        table[_FakeOp]


def test_missing_reports_an_unregistered_block_kind():
    for table in BLOCK_CONSUMERS.values():
        assert table.missing(["std.nn.linear", "std.fake.kind"]) == ["'std.fake.kind'"]


def test_a_fresh_table():
    table: Implementations = Implementations("test consumer")
    assert table.missing(FAKE) == ["'fake.thing'"]
    table.add(_FakeOp, lambda: None)
    assert table.missing(FAKE) == [] and _FakeOp in table and table.keys() == [_FakeOp]
    with pytest.raises(ValueError, match="registered twice"):
        table.add(_FakeOp, lambda: None)


def test_a_table_included_in_another():
    part: Implementations = Implementations("a part of the consumer")
    part.add(_FakeOp, print)
    whole: Implementations = Implementations("test consumer")
    whole.include(part)
    assert whole.get(_FakeOp) is print and whole.missing(FAKE) == []
    with pytest.raises(ValueError, match="registered twice"):
        whole.include(part)
