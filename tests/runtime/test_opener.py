"""Opening a model the one way (`strata.runtime.opener.open_model`): every command that opens
a model refuses NaN or infinite weights before compiling (run and generate did; chat, call,
perplexity, bench and serve now do too), `--allow-nonfinite` still runs, the knobs are
resolved once on a command's path, and what a target cannot do is refused by asking it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import strata.pipeline
from strata.ir.weights import SINGLE_FILE, WeightStore, write_safetensors
from strata.runtime.opener import OpenError, open_model
from strata.runtime.request import RequestError
from support import tiny, write_checkpoint

POISONED = ("model.norm.weight", "output_norm.weight")


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory):
    d = write_checkpoint(tiny("llama"), tmp_path_factory.mktemp("nan") / "model")
    store = WeightStore.open(d)
    tensors = {name: np.array(store.get(name)) for name in store.names()}
    del store
    tensors[POISONED[0]].reshape(-1)[-1] = np.nan
    write_safetensors(d / "new.tmp", tensors, {"format": "pt"})
    os.replace(d / "new.tmp", d / SINGLE_FILE)
    return d


def _commands(model, tmp):
    from strata.runtime.commands.bench import bench
    from strata.runtime.commands.call import call_model
    from strata.runtime.commands.chat import chat_session
    from strata.runtime.commands.perplexity import perplexity
    from strata.runtime.commands.serve import open_engine

    calls = tmp / "calls.json"
    calls.write_text(json.dumps([{"entry": "decode", "inputs": {"token": [[1]], "pos": 0}}]))
    text = tmp / "text.txt"
    text.write_text("some text " * 50)
    return {
        "call": lambda **kw: call_model(model, calls, tmp / "out.npz", **kw),
        "perplexity": lambda **kw: perplexity(model, text, ctx=16, out=None, **kw),
        "bench": lambda **kw: bench(model, n_prompt=2, n_gen=2, batches=(1,), repetitions=1, **kw),
        "chat": lambda **kw: chat_session(model, read=lambda _: "/exit", **kw),
        "serve": lambda **kw: open_engine(model, "cpu", {"ctx": 32}, **kw),
    }


@pytest.mark.parametrize("command", ["call", "perplexity", "bench", "chat", "serve"])
def test_every_command_refuses_nonfinite_weights_before_compiling(poisoned, tmp_path, command):
    run = _commands(poisoned, tmp_path)[command]
    with pytest.raises(RequestError, match=rf"tensor '{POISONED[1]}' \(HF '{POISONED[0]}'\) holds NaN or infinite "
                                           r"values; refusing to run \(--allow-nonfinite runs anyway\)"):
        run()
    assert not (poisoned / ".strata-cache").exists()


def test_allow_nonfinite_warns_and_opens(poisoned, capsys):
    opened = open_model(poisoned, "cpu", {"ctx": 16}, allow_nonfinite=True)
    assert "warning" in capsys.readouterr().err and opened.knobs["ctx"] == 16


def test_knobs_are_resolved_once_on_a_commands_path(tmp_path, monkeypatch, capsys):
    from strata.runtime.commands.textgen import run_prompt

    model = write_checkpoint(tiny("llama"), tmp_path / "model")
    calls = []
    resolve = strata.pipeline.resolve_knobs

    def counted(*args, **kwargs):
        calls.append(args[0].name)
        return resolve(*args, **kwargs)

    monkeypatch.setattr(strata.pipeline, "resolve_knobs", counted)
    out = run_prompt(model, [1, 2, 3], 3, knobs={"ctx": 16}, cache_dir=tmp_path / "cache")
    assert len(out.ids) == 3 and calls == ["cpu"]


def test_what_a_target_cannot_do_is_refused_by_asking_it(tmp_path):
    from strata.runtime.commands.call import CallError, call_model
    from strata.targets.target import TargetError

    model = write_checkpoint(tiny("llama"), tmp_path / "model")
    with pytest.raises(OpenError, match="--interpret applies to a target that runs an interpreter, not --target cpu"):
        open_model(model, "cpu", interpret=True)
    with pytest.raises(OpenError, match="unknown runtime 'tvm' for --via"):
        open_model(model, "cpu", via="tvm")
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps([{"entry": "decode", "inputs": {"token": [[1]], "pos": 0}}]))
    with pytest.raises(CallError, match="the epu target's program runs prefill and decode"):
        call_model(model, calls, tmp_path / "out.npz", target_name="epu")
    from strata.runtime.sampling import SamplingParams

    opened = open_model(model, "epu")
    with pytest.raises(TargetError, match="the EPU decodes greedily"):
        opened.check_sampling(SamplingParams(temperature=0.5, seed=1))
    opened.check_sampling(SamplingParams())  # greedy is the argmax: fine
