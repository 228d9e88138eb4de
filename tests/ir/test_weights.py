"""Tests for strata.ir.weights (the safetensors weight store) and the default model."""

from __future__ import annotations

import dataclasses
import json
import struct
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file
from safetensors.torch import load_file as load_file_torch

from strata.errors import StrataError
from strata.models import read_config as load_hf_config
from strata.models.llama_config import LlamaConfig
from strata.dialects.instances import find_model, model_params
from strata.ir.weights import WeightError, WeightStore, write_safetensors
from strata.models import build_module
from strata.models import save_random_checkpoint
from support import open_store
from strata.models.default import DEFAULT_CONFIG, ensure_default_model

TINY = LlamaConfig(
    arch="LlamaForCausalLM", name="tiny", vocab_size=32, hidden_size=16, num_layers=2,
    num_heads=4, num_kv_heads=2, head_dim=4, intermediate_size=24, rms_norm_eps=1e-5,
    rope_theta=10000.0, rope_scaling=None, max_position_embeddings=64,
    tie_word_embeddings=False, attention_bias=False, o_bias=False, qk_norm=False,
    dtype="float32")
QWEN2 = dataclasses.replace(TINY, arch="Qwen2ForCausalLM", attention_bias=True)
QWEN3 = dataclasses.replace(TINY, arch="Qwen3ForCausalLM", qk_norm=True, head_dim=8,
                            tie_word_embeddings=True)


def expected(cfg: LlamaConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """The params a config implies, by llama.cpp name: the `check` argument."""
    return {name: (t.shape, t.dtype) for name, t in model_params(find_model(build_module(cfg))).items()}


def test_unknown_tensors_are_listed(tmp_path: Path) -> None:
    """Stored tensors the model does not use are not silently dropped: the store lists them."""
    d = save_random_checkpoint(TINY, tmp_path / "m", seed=1)
    tensors = load_file(str(d / "model.safetensors"))
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.zeros(2, np.float32)
    tensors["extra.head.weight"] = np.zeros((2, 2), np.float32)
    write_safetensors(d / "model.safetensors", tensors)
    store = open_store(d)
    assert store.unused == ["extra.head.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"]
    assert "blk.0.attn_q.weight" in store


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_random_checkpoint(TINY, tmp_path_factory.mktemp("w") / "tiny", seed=1)


def test_store_is_memory_mapped_and_matches_safetensors(tiny_dir: Path) -> None:
    store = open_store(tiny_dir)
    reference = load_file(str(tiny_dir / "model.safetensors"))
    assert len(reference) == len(store.names()) == len(expected(TINY))
    for name in store.names():
        arr = store.get(name)
        assert isinstance(arr, np.memmap) and not arr.flags.owndata and not arr.flags.writeable
        np.testing.assert_array_equal(arr, reference[store.stored_name(name)])
        assert store.info(name) == (arr.shape, "f32")
    assert store.info("blk.1.attn_k.weight") == ((8, 16), "f32")  # HF [out, in] layout
    store.check(expected(TINY))
    assert load_hf_config(tiny_dir) == dataclasses.replace(TINY, name="tiny")


def test_random_weights_are_deterministic_and_sensible(tiny_dir: Path, tmp_path: Path) -> None:
    again = save_random_checkpoint(TINY, tmp_path / "again", seed=1)
    assert (again / "model.safetensors").read_bytes() == \
        (tiny_dir / "model.safetensors").read_bytes()
    store = open_store(tiny_dir)
    assert abs(float(store.get("blk.0.ffn_up.weight").std()) - 0.02) < 0.005
    assert abs(float(store.get("blk.0.attn_norm.weight").mean()) - 1.0) < 0.1


def test_sharded_index(tiny_dir: Path, tmp_path: Path) -> None:
    sharded = save_random_checkpoint(TINY, tmp_path / "sharded", seed=1, shards=3)
    files = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(files)
    store, single = open_store(sharded), open_store(tiny_dir)
    assert store.names() == single.names()
    for name in store.names():
        np.testing.assert_array_equal(store.get(name), single.get(name))
    store.check(expected(TINY))


def test_index_pointing_at_missing_shard(tmp_path: Path) -> None:
    d = save_random_checkpoint(TINY, tmp_path / "m", seed=1, shards=2)
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(WeightError, match=r"index.json: shard 'model-00002-of-00002"):
        open_store(d)


def test_tied_output_is_the_embedding(tmp_path: Path) -> None:
    """A tied lm_head reads token_embd.weight; a stored copy of lm_head.weight is ignored quietly."""
    d = save_random_checkpoint(QWEN3, tmp_path / "q3", seed=2)
    store = open_store(d)
    assert "output.weight" not in store.names() and "output.weight" not in expected(QWEN3)
    store.check(expected(QWEN3))
    assert store.info("blk.0.attn_q_norm.weight") == ((8,), "f32")
    tensors = load_file(str(d / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    write_safetensors(d / "model.safetensors", tensors)
    assert open_store(d).unused == []
    with pytest.raises(WeightError, match=r"tensor 'output.weight' is missing"):
        store.check({**expected(QWEN3), "output.weight": ((32, 16), "f32")})


def test_missing_tensor_shape_mismatch_and_unused(tiny_dir: Path) -> None:
    store = open_store(tiny_dir)
    want = expected(TINY)
    with pytest.raises(WeightError) as info:
        store.check({**want, "blk.0.attn_q.bias": ((16,), "f32")})
    msg = str(info.value)
    assert "model.safetensors" in msg and "'blk.0.attn_q.bias'" in msg and "missing" in msg

    with pytest.raises(WeightError) as info:
        store.check({**want, "blk.1.ffn_down.weight": ((16, 48), "f32")})
    msg = str(info.value)
    assert "model.safetensors: tensor 'blk.1.ffn_down.weight' (HF 'model.layers.1.mlp.down_proj.weight')" in msg
    assert "[16, 24]" in msg and "[16, 48]" in msg
    with pytest.raises(WeightError, match="no tensor 'blk.9.ffn_up.weight'"):
        store.get("blk.9.ffn_up.weight")


def test_integer_dtype_for_float_param_refused(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors",
                      {"model.norm.weight": np.ones(4, dtype=np.int32)})
    store = WeightStore.open(tmp_path, {"model.norm.weight": "output_norm.weight"})
    assert store.info("output_norm.weight") == ((4,), "i32")
    with pytest.raises(WeightError, match="'output_norm.weight'.*dtype i32, expected a float"):
        store.check({"output_norm.weight": ((4,), "f32")})


def _corrupt(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    with pytest.raises(WeightError) as info:
        WeightStore.open(tmp_path)
    assert isinstance(info.value, StrataError) and "model.safetensors" in str(info.value)
    return str(info.value)


def test_truncated_file(tiny_dir: Path, tmp_path: Path) -> None:
    data = (tiny_dir / "model.safetensors").read_bytes()
    msg = _corrupt(tmp_path, data[:-100])
    assert "tensor 'model.layers.1.self_attn.v_proj.weight'" in msg  # sorted last
    assert "runs past the end of the file" in msg
    assert "does not fit in the file" in _corrupt(tmp_path, data[:50])
    assert "too short" in _corrupt(tmp_path, b"abc")


def test_garbage_files(tmp_path: Path) -> None:
    assert "does not fit" in _corrupt(tmp_path, b"\xff" * 64)
    bad_json = b"{not json"
    assert "not valid JSON" in _corrupt(tmp_path, struct.pack("<Q", len(bad_json)) + bad_json)


def _raw_file(entry: dict, data: bytes) -> bytes:
    header = json.dumps({"t": entry}).encode()
    return struct.pack("<Q", len(header)) + header + data


def test_header_validation(tmp_path: Path) -> None:
    msg = _corrupt(tmp_path, _raw_file({"dtype": "C64", "shape": [2], "data_offsets": [0, 16]},
                                       bytes(16)))
    assert "tensor 't' has dtype 'C64'" in msg
    msg = _corrupt(tmp_path, _raw_file({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]},
                                       bytes(8)))
    assert "tensor 't' has 8 bytes of data but shape [3] of F32 needs 12" in msg
    msg = _corrupt(tmp_path, _raw_file({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]},
                                       bytes(8)))
    assert "invalid data_offsets" in msg


def test_bf16_round_trip(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    ints = np.arange(6, dtype=np.int64).reshape(2, 3)
    write_safetensors(tmp_path / "model.safetensors",
                      {"model.embed_tokens.weight": x, "model.norm.weight": ints})
    store = WeightStore.open(tmp_path)  # no name map: addressed by the stored names
    assert store.info("model.embed_tokens.weight") == ((3, 5), "bf16")
    assert store.get("model.embed_tokens.weight").dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(store.get("model.embed_tokens.weight").view(np.uint16),
                                  x.view(np.uint16))
    np.testing.assert_array_equal(store.get("model.norm.weight"), ints)
    # The official reader agrees on the bytes.
    ref = load_file_torch(str(tmp_path / "model.safetensors"))["model.embed_tokens.weight"]
    assert ref.dtype == torch.bfloat16
    np.testing.assert_array_equal(ref.view(torch.int16).numpy().view(np.uint16),
                                  x.view(np.uint16))


def test_save_random_llama_bf16(tmp_path: Path) -> None:
    d = save_random_checkpoint(QWEN2, tmp_path / "bf", seed=3, dtype="bfloat16", shards=2)
    assert load_hf_config(d).dtype == "bfloat16"
    store = open_store(d)
    store.check(expected(QWEN2))
    assert store.info("blk.0.attn_q.bias") == ((16,), "bf16")


@pytest.mark.parametrize("cfg", [TINY, QWEN2, QWEN3], ids=lambda c: c.arch)
def test_transformers_loads_random_weights(tmp_path: Path, cfg: LlamaConfig) -> None:
    d = save_random_checkpoint(cfg, tmp_path / "hf", seed=4)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    store = open_store(d)
    attn = model.model.layers[1].self_attn
    np.testing.assert_array_equal(attn.k_proj.weight.detach().numpy(),
                                  store.get("blk.1.attn_k.weight"))
    if cfg.attention_bias:
        np.testing.assert_array_equal(attn.v_proj.bias.detach().numpy(),
                                      store.get("blk.1.attn_v.bias"))


def test_default_model(tmp_path: Path) -> None:
    d = ensure_default_model(tmp_path)
    assert d == tmp_path / "default-llama"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default-llama"]  # no temp dirs left
    before = (d / "model.safetensors").stat().st_mtime_ns
    assert ensure_default_model(tmp_path) == d
    assert (d / "model.safetensors").stat().st_mtime_ns == before
    cfg = load_hf_config(d)
    assert cfg == DEFAULT_CONFIG
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads,
            cfg.intermediate_size) == (512, 64, 2, 4, 2, 160)
    open_store(d).check(expected(cfg))
    from strata.runtime.text import load_tokenizer

    assert load_tokenizer(d).vocab_size == cfg.vocab_size  # a real vocabulary of the model's size


def test_a_default_model_of_an_earlier_strata_gets_its_tokenizer(tmp_path: Path) -> None:
    d = ensure_default_model(tmp_path)
    (d / "tokenizer.json").unlink()  # as an earlier strata wrote it: config and weights only
    assert ensure_default_model(tmp_path) == d and (d / "tokenizer.json").is_file()
    (d / "tokenizer.json").unlink()
    (d / "model.safetensors").unlink()  # something else: refused, not replaced
    with pytest.raises(StrataError, match="exists but holds no complete model"):
        ensure_default_model(tmp_path)


def _with_header(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize("header", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"t": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}",
])
def test_deeply_nested_header(tmp_path: Path, header: bytes) -> None:
    msg = _corrupt(tmp_path, _with_header(header))
    assert "model.safetensors: header is not valid JSON (nested too deeply)" in msg


def test_header_integer_with_too_many_digits(tmp_path: Path) -> None:
    header = b'{"t": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}'
    msg = _corrupt(tmp_path, _with_header(header))
    assert "model.safetensors: header is not valid JSON (an integer with too many digits)" in msg


def test_bad_header_through_the_cli(tmp_path: Path) -> None:
    model = save_random_checkpoint(TINY, tmp_path / "m", seed=1)
    (model / "model.safetensors").write_bytes(_with_header(b"[" * 100_000))
    r = subprocess.run([sys.executable, "-m", "strata.cli", "compile", str(model),
                        "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "model.safetensors: header is not valid JSON (nested too deeply)" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, problem", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"weight_map": {"a": ' + "9" * 5000 + "}}", "an integer with too many digits"),
])
def test_unreadable_index(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(text)
    with pytest.raises(WeightError) as info:
        WeightStore.open(tmp_path)
    assert str(info.value) == f"{tmp_path}/model.safetensors.index.json: invalid JSON: {problem}"


@pytest.mark.parametrize("name", ["model.safetensors", "model.safetensors.index.json"])
def test_dangling_weights_link(tmp_path: Path, name: str) -> None:
    (tmp_path / name).symlink_to("../blobs/gone")
    with pytest.raises(WeightError) as info:
        WeightStore.open(tmp_path)
    assert str(info.value) == f"{tmp_path / name}: dangling symbolic link to '../blobs/gone'"


def test_dangling_model_dir_and_shard(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(WeightError, match=f"{link}: dangling symbolic link to '{tmp_path}/gone'"):
        WeightStore.open(link)
    d = save_random_checkpoint(TINY, tmp_path / "m", seed=1, shards=2)
    shard = d / "model-00002-of-00002.safetensors"
    shard.unlink()
    shard.symlink_to("blobs/0123abcd")
    with pytest.raises(WeightError, match=f"{shard}: dangling symbolic link to 'blobs/0123abcd'"):
        WeightStore.open(d)
