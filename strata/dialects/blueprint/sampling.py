"""The sampler node: the op level's `op.sample` as a blueprint node (beside the head's argmax)."""

from __future__ import annotations

from xdsl.irdl import AttrSizedOperandSegments, irdl_op_definition, operand_def, opt_operand_def, result_def, traits_def
from xdsl.traits import Pure

from strata.dialects.blueprint.attrs import EdgeType
from strata.dialects.blueprint.base import NodeOp, edge, require, same_expr
from strata.ir.dtypes import has_kind


@irdl_op_definition
class SampleOp(NodeOp):
    """Sample one token id per row of the logits: `op.sample`'s semantics
    (`strata.semantics.sampling.sample`): the penalties over the token counts, temperature
    (0: the argmax), top-k, top-p, min-p, then one Philox 4x32-10 draw per (key, step, row).

    `key` is one row of two i64, `step` one i32; each per-row parameter has the logits' rows or
    one row; the counts (optional, together) have the logits' rows and dim; the token mask
    (optional) has the logits' rows and one i32 per 32 tokens (`op.sample`'s bitmask, its dim
    `vocab_words` = ceil(vocab / 32)), applied before everything else. Where the node runs
    is its placement (blueprint-place-state's `sample` knob, as for `blueprint.argmax`).

        %ids = blueprint.sample %logits, %key, %step, %t, %k, %p, %m, %rep, %pres, %freq counts %pc, %oc
            : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>,
              !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"n", "1", f32>,
              !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>,
              !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "vocab", i32>, !blueprint.edge<"n", "vocab", i32>
            -> !blueprint.edge<"n", "1", i32>
        %masked = blueprint.sample %logits, %key, %step, %t, %k, %p, %m, %rep, %pres, %freq mask %allowed
            : !blueprint.edge<"n", "vocab", f32>, !blueprint.edge<"1", "2", i64>, !blueprint.edge<"1", "1", i32>,
              !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", i32>, !blueprint.edge<"n", "1", f32>,
              !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>, !blueprint.edge<"n", "1", f32>,
              !blueprint.edge<"n", "1", f32> mask !blueprint.edge<"n", "vocab_words", i32>
            -> !blueprint.edge<"n", "1", i32>
    """

    name = "blueprint.sample"
    logits = operand_def(EdgeType)
    key = operand_def(EdgeType)
    step = operand_def(EdgeType)
    temperature = operand_def(EdgeType)
    top_k = operand_def(EdgeType)
    top_p = operand_def(EdgeType)
    min_p = operand_def(EdgeType)
    repetition_penalty = operand_def(EdgeType)
    presence_penalty = operand_def(EdgeType)
    frequency_penalty = operand_def(EdgeType)
    prompt_counts = opt_operand_def(EdgeType)
    output_counts = opt_operand_def(EdgeType)
    mask = opt_operand_def(EdgeType)
    result = result_def(EdgeType)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    assembly_format = (
        "$logits `,` $key `,` $step `,` $temperature `,` $top_k `,` $top_p `,` $min_p `,` $repetition_penalty `,` "
        "$presence_penalty `,` $frequency_penalty (`counts` $prompt_counts^ `,` $output_counts)? (`mask` $mask^)? attr-dict "
        "`:` type($logits) `,` type($key) `,` type($step) `,` type($temperature) `,` type($top_k) `,` type($top_p) "
        "`,` type($min_p) `,` type($repetition_penalty) `,` type($presence_penalty) `,` type($frequency_penalty) "
        "(`,` type($prompt_counts)^ `,` type($output_counts))? (`mask` type($mask)^)? `->` type($result)"
    )

    @property
    def params(self) -> tuple:
        """The per-row parameters, in `strata.dialects.op.SAMPLE_PARAMS` order."""
        return (self.temperature, self.top_k, self.top_p, self.min_p, self.repetition_penalty,
                self.presence_penalty, self.frequency_penalty)

    def verify_node(self) -> None:
        lg = edge(self.logits)
        rows = lg.rows.data
        require(has_kind(lg.element, "float"), "blueprint.sample: the logits must be a float edge")
        k, s = edge(self.key), edge(self.step)
        require(same_expr(k.rows.data, "1") and same_expr(k.dim.data, "2") and str(k.element) == "i64",
                "blueprint.sample: the key must be one row of two i64")
        require(same_expr(s.rows.data, "1") and same_expr(s.dim.data, "1") and has_kind(s.element, "int"),
                "blueprint.sample: the step must be one integer")
        for name, v in zip(("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                            "frequency_penalty"), self.params):
            e = edge(v)
            require(same_expr(e.dim.data, "1") and (same_expr(e.rows.data, rows) or same_expr(e.rows.data, "1")),
                    f"blueprint.sample: {name} must be one value per row (rows '{rows}' or '1')")
            require(str(e.element) == ("i32" if name == "top_k" else "f32"),
                    f"blueprint.sample: {name} must be {'i32' if name == 'top_k' else 'f32'}")
        counts = (self.prompt_counts, self.output_counts)
        require((counts[0] is None) == (counts[1] is None), "blueprint.sample: the two counts go together")
        for c in counts:
            if c is not None:
                e = edge(c)
                require(same_expr(e.rows.data, rows) and same_expr(e.dim.data, lg.dim.data) and str(e.element) == "i32",
                        "blueprint.sample: the counts must be i32 with the logits' rows and dim")
        if self.mask is not None:
            e = edge(self.mask)
            require(same_expr(e.rows.data, rows) and str(e.element) == "i32",
                    "blueprint.sample: the token mask must be i32 with the logits' rows (one bit per token)")
        r = edge(self.result)
        require(same_expr(r.rows.data, rows) and same_expr(r.dim.data, "1") and str(r.element) == "i32",
                "blueprint.sample: the result must be one i32 per row")
