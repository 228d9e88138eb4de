"""How far a recipe's precision moves the blueprint level from f32.

    rows = node_errors(model, "fp8-bf16head", prompt)       # per node, on the prompt's prefill
    agree = greedy_agreement(model, "fp8-bf16head", prompt, 32)

The reference is the op level in f32 (what llama.cpp's trace checks); the blueprint under the
`f32` recipe computes it (tests check that, within 1e-4). `node_errors` runs the prefill's
blueprint under the f32 recipe and under `recipe` on the same weights and prompt and compares
every edge: max |err| and that over the reference's max |x|. `greedy_agreement` generates
`steps` tokens greedily with the op level and with the blueprint under `recipe` (prefill, then
decode steps feeding the state back), and counts the steps whose top-1 agrees, both free-running
and teacher-forced (the blueprint fed the op level's tokens, so one early miss does not spoil
the rest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func

from strata.pipeline import Model, blueprint_of, entry_pipeline, lower


@dataclass(frozen=True)
class NodeError:
    node: str
    op: str
    edge: str
    max_abs: float
    rel: float  # max_abs / max |reference|


@dataclass(frozen=True)
class Agreement:
    steps: int
    free_running: int  # steps whose token equals the op level's, generating freely
    teacher_forced: int  # steps whose top-1 equals the op level's, fed the op level's tokens
    reference: list[int]
    ours: list[int]


def _fn(module) -> func.FuncOp:
    return next(op for op in module.walk() if isinstance(op, func.FuncOp))


def _blueprints(model: Model, recipe: str, prompt_len: int):
    options = {"collapse": False}
    return (_fn(blueprint_of(model, "prefill", prompt_len, recipe, **options)),
            _fn(blueprint_of(model, "decode", 1, recipe, **options)))


def _op_level(model: Model, prompt_len: int, ctx: int):
    pre = _fn(lower(model, entry_pipeline("prefill", tokens=prompt_len, start=0, ctx=ctx)))
    dec = _fn(lower(model, entry_pipeline("decode", ctx=ctx)))
    return pre, dec


def node_errors(model: Model, recipe: str, prompt: Sequence[int], weights=None) -> list[NodeError]:
    """Each edge of the prefill blueprint under `recipe` against the f32 recipe's."""
    from strata.semantics.blueprint_interp import run_blueprint
    from strata.semantics.op_interp import alloc_state

    tokens = np.asarray(prompt, np.int32).reshape(-1, 1)
    store = weights if weights is not None else model.open_weights(quiet=True)
    _, dec = _op_level(model, len(tokens), max(64, 2 * len(tokens)))
    runs = []
    for r in ("f32", recipe):
        fn, _ = _blueprints(model, r, len(tokens))
        values: dict[str, tuple[str, str, np.ndarray]] = {}

        def observe(op, results, values=values):
            if "edges" in op.attributes and "node" in op.attributes:
                for e, x in zip(op.attributes["edges"].data, results):
                    values[e.data] = (op.attributes["node"].data, op.name.removeprefix("blueprint."), np.asarray(x))

        run_blueprint(fn, store, alloc_state(dec), [tokens], pos=0, observe=observe)
        runs.append(values)
    ref, got = runs
    rows = []
    for edge, (node, op, want) in ref.items():
        have = got[edge][2]
        err = float(np.abs(have.astype(np.float64) - want).max()) if want.size else 0.0
        scale = float(np.abs(want.astype(np.float64)).max()) if want.size else 0.0
        rows.append(NodeError(node, op, edge, err, err / scale if scale else 0.0))
    return rows


def greedy_agreement(model: Model, recipe: str, prompt: Sequence[int], steps: int, weights=None) -> Agreement:
    """Greedy generation by the op level (f32) and by the blueprint under `recipe`, through the
    runtime's generation loop: free-running, and teacher-forced with the op level's tokens."""
    from strata.runtime.generate import generate
    from strata.semantics.programs import BlueprintProgram, OpLevelProgram

    tokens = [int(t) for t in prompt]
    store = weights if weights is not None else model.open_weights(quiet=True)
    ctx = max(64, len(tokens) + steps)
    pre, dec = _op_level(model, len(tokens), ctx)
    bpre, bdec = _blueprints(model, recipe, len(tokens))
    reference = generate(OpLevelProgram(pre, dec, store, model.name), tokens, steps).ids
    blueprint = BlueprintProgram(bpre, bdec, store, dec, model.name)
    free = generate(blueprint, tokens, steps).ids
    forced = generate(blueprint, tokens, steps, forced=reference).ids
    return Agreement(steps, sum(a == b for a, b in zip(free, reference)),
                     sum(a == b for a, b in zip(forced, reference)), reference, free)


def error_table(rows: Sequence[NodeError]) -> str:
    head = ("node", "op", "edge", "max_abs", "rel")
    body = [(r.node, r.op, r.edge, f"{r.max_abs:.3e}", f"{r.rel:.3e}") for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n" for row in [head, *body])


def errors_report(model: Model, recipe: str, prompt: Sequence[int], steps: int) -> str:
    """`strata blueprint --errors`: each node's error under `recipe` against f32 on the prompt's
    prefill, then greedy top-1 agreement with the op level over `steps` steps."""
    import sys

    from strata.errors import StrataError
    from strata.runtime.request import check_prompt

    prompt = [int(t) for t in check_prompt(prompt, int(model.config.vocab_size))]
    limit = int(model.config.max_position_embeddings)
    if len(prompt) + steps > limit:
        raise StrataError(f"the prompt ({len(prompt)} token{'s' * (len(prompt) != 1)}) and {steps} greedy steps need {len(prompt) + steps} "
                          f"positions, more than the model's context of {limit}")
    store = model.open_weights(quiet=not sys.stderr.isatty())
    text = error_table(node_errors(model, recipe, prompt, store))
    a = greedy_agreement(model, recipe, prompt, steps, store)
    return text + (f"greedy top-1 agreement with the op level in f32 over {a.steps} steps: "
                   f"{a.free_running}/{a.steps} free-running, {a.teacher_forced}/{a.steps} teacher-forced\n")
