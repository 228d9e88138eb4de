"""record-entry-calls: the module carries each listed entry's host records (`op.call`,
`op.args`, `op.arg_types`), the same as convert-module-to-op's lowered function of the entry
carries, without its graph; prefill and decode (no plan) are refused in one line."""

from __future__ import annotations

import pytest

from strata.errors import StrataError
from strata.passes.pipelines import entry_pipeline
from strata.passes.record_entry_calls import ENTRY_CALLS
from strata.pipeline import run_pipeline
from support import TINY, lower, module_of

GENERICS = dict(ctx=32, kv_pad=1, batch=2, rows=3, page_size=8, pages=4)


@pytest.mark.parametrize("entry", ["step_paged", "decode_rows", "log_probs_packed", "prefill_slots"])
def test_the_records_are_the_lowered_functions(entry):
    spec = "record-entry-calls" + entry_pipeline(entry, **GENERICS).removeprefix("convert-module-to-op")
    recorded = run_pipeline(module_of(TINY["qwen3"]), spec).attributes[ENTRY_CALLS].data[entry].data
    fn = next(op for op in lower(TINY["qwen3"], entry, **GENERICS).ops if getattr(op, "sym_name", None)
              and op.sym_name.data == entry)
    assert set(recorded) == {"op.call", "op.args", "op.arg_types"}
    for key, value in recorded.items():
        assert value == fn.attributes[key], key


def test_prefill_is_not_an_entry_of_a_plan():
    spec = "record-entry-calls" + entry_pipeline("prefill", ctx=32).removeprefix("convert-module-to-op")
    with pytest.raises(StrataError, match="record-entry-calls: 'prefill' is not an entry that runs by a plan"):
        run_pipeline(module_of(TINY["qwen3"]), spec)
