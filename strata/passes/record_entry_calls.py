"""record-entry-calls{entry=step_paged,... batch=4 ...}: record on the module what the host of
each listed entry needs, without lowering its graph.

A target that runs the batched entries through a graph of its own (the cuda target: its
@prefill's kernel groups over the call's tokens, attention reading each row's K/V through a
table of cache cells) still checks the entry's arguments and computes each token's position,
row, cache cell and output row as every target does (`strata.semantics.host_inputs`). This pass
puts the records the lowered functions would carry (`op.call`, `op.args`, `op.arg_types`) on the
module, under `strata.entry_calls` (entry -> those three), before `convert-module-to-op` lowers
the entries the target does compile to functions. Its options are convert-module-to-op's (the
generics the entries bind: Batch, PageSize, Rows, Pages, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp

from strata.dialects.instances import InstanceError, find_model, instantiate
from strata.passes.convert_module_to_op import ConvertModuleToOpPass, LoweringError, bound_generics
from strata.passes.convert_module_to_op.entries import LAYOUTS, entry_record

#: The module attribute holding the records.
ENTRY_CALLS = "strata.entry_calls"


@dataclass(frozen=True)
class RecordEntryCallsPass(ConvertModuleToOpPass):
    """Record each listed entry's `op.call`, `op.args` and `op.arg_types` on the module."""

    name = "record-entry-calls"

    def check(self) -> None:
        super().check()
        for entry in self.entries():
            if entry not in LAYOUTS or entry in ("prefill", "decode"):
                raise LoweringError(f"record-entry-calls: '{entry}' is not an entry that runs by a plan "
                                    f"(one of {', '.join(e for e in LAYOUTS if e not in ('prefill', 'decode'))})")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check()
        try:
            model = find_model(op)
            root = instantiate(model, bound_generics(self))
        except InstanceError as e:
            raise LoweringError(f"record-entry-calls: {e}") from None
        declared = {fn.member_name: fn for fn in model.entries()}
        n_ctx = self.ctx or root.dim("MaxSeq")
        records = {}
        for entry in self.entries():
            if entry not in declared:
                raise LoweringError(f"record-entry-calls: the model declares no entry '{entry}'")
            records[entry] = DictionaryAttr(entry_record(root, entry, self, n_ctx, declared[entry]))
        op.attributes[ENTRY_CALLS] = DictionaryAttr(records)
