"""`strata verify`: a model's values on a llama-eval-callback log's prompt against the log, op by
op, with the first divergence explained by the HF config field llama.cpp does not represent
where one shows there (`strata.verify.llamacpp_fields`).

    ok, verdict = verify_against(load_model("tiny"), "prefill.callback.log", ctx=256, kv_pad=256, rtol=1e-3)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strata.verify.llamacpp import CallbackLog, Divergence, compare, parse_callback_log, strata_values
from strata.verify.llamacpp_fields import explain


def verify(model, log: CallbackLog, rtol: float, ctx: int, kv_pad: int) -> tuple[int, Divergence | None]:
    """`compare` of the model's values on the log's prompt with the log. Where the first
    divergence is an op at which a field of the model's HF config that llama.cpp does not
    represent shows (`strata.verify.llamacpp_fields`), its reason names that field."""
    agreed, divergence = compare(log, strata_values(model, log.tokens, ctx=ctx, kv_pad=kv_pad), rtol)
    return agreed, None if divergence is None else explain(model, divergence)


def verify_against(model: Any, log_path: str | Path, ctx: int, kv_pad: int, rtol: float) -> tuple[bool, str]:
    """`strata verify`: run `model`'s prefill on the log's prompt and compare every op's sum
    with llama.cpp's; (whether all agree, the one-line verdict)."""
    log = parse_callback_log(Path(log_path))
    agreed, divergence = verify(model, log, rtol, ctx=ctx, kv_pad=kv_pad)
    if divergence is None:
        return True, f"all {agreed} ops agree with {log_path} (rtol {rtol} of each tensor's magnitude)"
    d = divergence
    return False, (f"ops 1-{agreed} agree; op {d.index} diverges: {d.op} '{d.name}': llama.cpp sum {d.theirs:.6g}, "
                   f"strata {d.ours:.6g} (magnitude {d.scale:.6g}): {d.why}")
