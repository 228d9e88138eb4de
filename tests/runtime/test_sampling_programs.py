"""Sampling inside the compiled program: a seed draws the same ids on the cpu target, the op-level
interpreter and the cuda target in Triton's interpreter, run after run, for a dense model and a
hybrid one; the ids are the numpy sampler's on each step's logits (key (seed, 0), step the new
token's position, the penalties over the prompt's and the output's counts); temperature 0 is
exactly the greedy loop's ids."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

from strata.runtime.generate import generate
from strata.runtime.sampling import SamplingParams
from strata.semantics import sampling as S
from support import TINY, write_checkpoint

PROMPT = [3, 17, 5, 40, 11]
STEPS = 6
PARAMS = SamplingParams(temperature=1.1, top_k=24, top_p=0.95, min_p=0.02, repetition_penalty=1.3,
                        presence_penalty=0.2, frequency_penalty=0.1, seed=1234)


@pytest.fixture(scope="module", params=["llama", "qwen3.5-moe"])
def model(request, tmp_path_factory):
    from strata.pipeline import load_model

    return load_model(write_checkpoint(TINY[request.param], tmp_path_factory.mktemp("sampling") / request.param,
                                       std=0.5))


def _op_program(model):
    from strata.dialects.op import SAMPLER
    from strata.pipeline import lowered
    from strata.semantics.op_interp import find_function
    from strata.semantics.programs import OpLevelProgram
    from strata.targets import target

    module = lowered(model.module, target("cpu").pipeline({"ctx": 32, "kv_pad": 256, "flash_attn": True}))
    pre, dec, sampler = (find_function(module, n) for n in ("prefill", "decode", SAMPLER))
    return OpLevelProgram(pre, dec, model.open_weights(quiet=True), model.name, sampler=sampler)


def _cpu(model):
    from strata.runtime.opener import open_program

    return open_program(model, "cpu", {"ctx": 32})


def _reference(program, params: SamplingParams) -> list[int]:
    """The numpy sampler on the program's own logits, step by step (the ids fed back)."""
    out = generate(program, PROMPT, STEPS, keep_logits=True, sampling=params)
    counts_prompt = np.bincount(PROMPT, minlength=program.vocab)[None].astype(np.int32)
    want = []
    for i, row in enumerate(out.logits):
        counts_out = np.bincount(out.ids[:i], minlength=program.vocab)[None].astype(np.int32)
        want.append(int(S.sample(row[None], params.key, len(PROMPT) + i, params.temperature, params.top_k,
                                 params.top_p, params.min_p, params.repetition_penalty, params.presence_penalty,
                                 params.frequency_penalty, counts_prompt, counts_out)[0]))
    assert want == out.ids
    return out.ids


def test_the_same_seed_draws_the_same_ids_on_every_program(model):
    cpu = _cpu(model)
    ids = _reference(cpu, PARAMS)
    assert len(set(ids)) > 2  # a draw that says something
    assert generate(cpu, PROMPT, STEPS, sampling=PARAMS).ids == ids  # run after run
    assert _reference(_op_program(model), PARAMS) == ids
    other = generate(cpu, PROMPT, STEPS, sampling=dataclasses.replace(PARAMS, seed=99)).ids
    assert other != ids  # the seed matters
    if importlib.util.find_spec("triton") is None:
        pytest.skip("no triton: the cuda target's interpreter run needs it")
    from strata.runtime.opener import open_program
    from strata.targets.cuda.device import start_triton_interpreter

    start_triton_interpreter()
    cuda = open_program(model, "cuda", {"ctx": 32, "recipe": "f32"}, interpret=True)
    assert generate(cuda, PROMPT, STEPS, sampling=PARAMS).ids == ids


def test_temperature_zero_is_the_greedy_loop(model):
    cpu = _cpu(model)
    greedy = generate(cpu, PROMPT, STEPS).ids
    assert generate(cpu, PROMPT, STEPS, sampling=SamplingParams(temperature=0.0, top_k=3, seed=5)).ids == greedy
    assert generate(_op_program(model), PROMPT, STEPS, sampling=SamplingParams()).ids == greedy
    # temperature 0 with a penalty goes through the sampler: the argmax of the penalized logits,
    # here a frequency penalty that no repeated token survives
    ids = _reference(cpu, SamplingParams(temperature=0.0, frequency_penalty=1000.0, seed=1))
    assert len(set(ids)) == len(ids) and ids[0] == greedy[0]


def test_a_sampled_step_has_the_models_logits(model):
    cpu = _cpu(model)
    greedy = generate(cpu, PROMPT, 1, keep_logits=True)
    sampled = generate(cpu, PROMPT, 1, keep_logits=True, sampling=PARAMS)
    np.testing.assert_array_equal(greedy.logits, sampled.logits)


def test_onnxruntime_samples_on_the_host_with_the_same_sampler(model):
    from strata.runtime.opener import open_program

    ort = open_program(model, "cpu", {"ctx": 32}, via="onnxruntime", prompt_len=len(PROMPT))
    assert generate(ort, PROMPT, STEPS, sampling=PARAMS).ids == generate(_cpu(model), PROMPT, STEPS,
                                                                          sampling=PARAMS).ids


def _step_masks(vocab: int) -> list[np.ndarray]:
    """A token bitmask per step ([1, ceil(vocab/32)] int32), each allowing a fifth of the tokens."""
    rng = np.random.default_rng(vocab)
    masks = []
    for _ in range(STEPS):
        allowed = np.zeros(-(-vocab // 32) * 32, bool)
        allowed[:vocab] = rng.random(vocab) < 0.2
        allowed[rng.integers(0, vocab)] = True
        bits = allowed.reshape(-1, 32).astype(np.uint64) << np.arange(32, dtype=np.uint64)
        masks.append(bits.sum(axis=1).astype(np.uint32).view(np.int32)[None])
    return masks


def _masked_run(program, params: SamplingParams, masks: list[np.ndarray]) -> tuple[list[int], list[np.ndarray]]:
    """The ids and logits of STEPS steps, step i drawing with masks[i] (the runtime's per-step mask)."""
    step = program.prefill(PROMPT, 0, params.with_mask(masks[0]))
    ids, rows = [], []
    for i in range(STEPS):
        ids.append(int(step.token))
        rows.append(np.asarray(step.logits, np.float32).reshape(-1))
        if i + 1 < STEPS:
            step = program.decode(ids[-1], len(PROMPT) + i, params.with_mask(masks[i + 1]))
    return ids, rows


@pytest.mark.parametrize("params", [PARAMS, SamplingParams(seed=3)], ids=["sampled", "greedy"])
def test_a_token_mask_draws_the_same_ids_on_every_program(model, params):
    """With a token mask per step (a grammar's), the cpu target, the op interpreter and the cuda
    target in Triton's interpreter draw the same ids, each an allowed token and the numpy
    sampler's on the step's logits (greedy parameters: the argmax of the allowed tokens)."""
    cpu = _cpu(model)
    masks = _step_masks(cpu.vocab)
    ids, rows = _masked_run(cpu, params, masks)
    counts_prompt = np.bincount(PROMPT, minlength=cpu.vocab)[None].astype(np.int32)
    for i, (token, row, mask) in enumerate(zip(ids, rows, masks)):
        assert (mask.view(np.uint32)[0, token // 32] >> np.uint32(token % 32)) & 1, (i, token)
        counts_out = np.bincount(ids[:i], minlength=cpu.vocab)[None].astype(np.int32)
        want = S.sample(row[None], params.key, len(PROMPT) + i, params.temperature, params.top_k, params.top_p,
                        params.min_p, params.repetition_penalty, params.presence_penalty, params.frequency_penalty,
                        counts_prompt, counts_out, mask=mask)
        assert token == int(want[0]), i
    if params.greedy:
        assert ids != generate(cpu, PROMPT, STEPS).ids  # the mask decides
    assert _masked_run(_op_program(model), params, masks)[0] == ids
    if importlib.util.find_spec("triton") is None:
        pytest.skip("no triton: the cuda target's interpreter run needs it")
    from strata.runtime.opener import open_program
    from strata.targets.cuda.device import start_triton_interpreter

    start_triton_interpreter()
    cuda = open_program(model, "cuda", {"ctx": 32, "recipe": "f32"}, interpret=True)
    assert _masked_run(cuda, params, masks)[0] == ids
