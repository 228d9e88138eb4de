"""`strata serve --target cuda --interpret` on a tiny model through the official `openai` client:
the scheduler steps the cuda program's `step_paged` (Triton's interpreter, f32), and each reply
is the one the same program's one-sequence loop gives alone (sampled: the device sampler with
the same seed), greedy replies the cpu target's; and test_server.py's faults and log-probability
tests. Few requests: the interpreter is slow."""

from __future__ import annotations

import threading

import pytest

from serve_support import API_KEY, CTX, running_server
from strata.pipeline import load_model
from strata.runtime.engine import Engine
from strata.runtime.opener import model_tokenizer, open_program
from strata.runtime.sampling import SamplingParams

openai = pytest.importorskip("openai")
pytest.importorskip("triton", reason="the cuda target needs triton (the `test` extra)")

# The cpu target's server tests that hold for any target, run again here on this module's cuda
# server (pytest gives them this module's `server` fixture): every fault an OpenAI-shaped error,
# a client gone mid-stream cancelled with its pages freed, and the served log-probabilities
# those of the cpu target's log_probs_packed entry (greedy, the same tokens).
def _cpu_server_tests():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("cpu_server_tests", Path(__file__).with_name("test_server.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cpu = _cpu_server_tests()
alone = _cpu.alone
test_faults_are_errors_and_leak_nothing = _cpu.test_faults_are_errors_and_leak_nothing
test_logprobs_are_the_log_probs_entrys = _cpu.test_logprobs_are_the_log_probs_entrys


@pytest.fixture(scope="module")
def server(serve_model, tmp_path_factory):
    # 4-cell pages, 3 rows: a prompt spans pages, and a shared system prompt hits the prefix cache.
    with running_server(serve_model, tmp_path_factory.mktemp("cuda_server"), "--api-key", API_KEY, "--target", "cuda",
                        "--interpret", "--max-num-seqs", "3", "--kv-pages", "40", "--max-num-batched-tokens", "24",
                        "--set", "PageSize=4", timeout=300) as s:
        yield s


def _engine(serve_model, tmp, target):
    model = load_model(serve_model)
    knobs = {"ctx": CTX, "recipe": "f32"} if target == "cuda" else {"ctx": CTX}  # --interpret's recipe
    program = open_program(model, target, knobs, cache_dir=tmp, interpret=target == "cuda", quiet=True)
    return Engine(program, model_tokenizer(model))


def _text(engine, prompt, params, n):
    stream = engine.generate(prompt, params, max_new_tokens=n)
    for _ in stream:
        pass
    return stream.text


def _client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


def test_openai_client_gets_the_cuda_programs_text(server, serve_model, tmp_path):
    client = _client(server)
    (model,) = client.models.list().data
    alone = _engine(serve_model, tmp_path / "cuda", "cuda")
    sampled = dict(temperature=0.8, top_p=0.95, seed=7)
    got = client.completions.create(model=model.id, prompt="Once upon a time", max_tokens=6, **sampled)
    assert got.choices[0].text == _text(alone, "Once upon a time", SamplingParams(temperature=0.8, top_p=0.95, seed=7), 6)
    assert got.usage.completion_tokens == 6 and got.choices[0].finish_reason == "length"

    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Say hi"}]
    want = _text(_engine(serve_model, tmp_path / "cpu", "cpu"), messages, SamplingParams(), 6)
    streamed = client.chat.completions.create(model=model.id, messages=messages, max_tokens=6, temperature=0,
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want


def test_concurrent_requests_each_get_their_own_reply(server, serve_model, tmp_path):
    """Three requests at once ride one step_paged call per step (a system prompt shared): each
    gets the greedy text the cpu target gives it alone."""
    client = _client(server)
    prompts = [[{"role": "system", "content": "Be terse."}, {"role": "user", "content": q}]
               for q in ("Why?", "What is it", "Tell me more")]
    got: dict[int, str] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(prompts))

    def worker(i):
        try:
            barrier.wait(timeout=30)
            out = client.chat.completions.create(model="tiny", messages=prompts[i], max_tokens=4 + i, temperature=0)
            got[i] = out.choices[0].message.content
        except BaseException as e:  # reported below, with the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[0]
    cpu = _engine(serve_model, tmp_path / "cpu", "cpu")
    for i, messages in enumerate(prompts):
        assert got[i] == _text(cpu, messages, SamplingParams(), 4 + i), i
