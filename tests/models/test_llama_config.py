"""Reading llama-family config.json files: the file (strata.frontends.hf_config) and the
family's fields (strata.models.llama_config)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import transformers

from strata.errors import StrataError
from strata.frontends import hf_config
from strata.frontends.hf_config import ConfigError, write_hf_config
from strata.models import read_config as load_hf_config
from strata.models.llama_config import LlamaConfig, RopeScaling

SMALL = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=48)
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}


def _save(tmp_path: Path, hf_config: transformers.PretrainedConfig, arch: str) -> Path:
    hf_config.architectures = [arch]
    out = tmp_path / "mymodel"
    hf_config.save_pretrained(out)
    return out


def _write(tmp_path: Path, data: dict | str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_llama_round_trip_with_llama3_rope_and_odd_head_dim(tmp_path: Path) -> None:
    hf = transformers.LlamaConfig(**SMALL, head_dim=16, rope_parameters=LLAMA3_ROPE,
                                  max_position_embeddings=256, rms_norm_eps=1e-5,
                                  tie_word_embeddings=True, dtype="bfloat16")
    cfg = load_hf_config(_save(tmp_path, hf, "LlamaForCausalLM"))
    assert cfg == LlamaConfig(
        arch="LlamaForCausalLM", name="mymodel", vocab_size=64, hidden_size=32, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=48, rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64),
        max_position_embeddings=256, tie_word_embeddings=True, attention_bias=False,
        o_bias=False, qk_norm=False, dtype="bfloat16")


def test_qwen2_round_trip(tmp_path: Path) -> None:
    hf = transformers.Qwen2Config(**SMALL, rope_parameters={"rope_type": "default",
                                                           "rope_theta": 1e6})
    cfg = load_hf_config(_save(tmp_path, hf, "Qwen2ForCausalLM") / "config.json")
    assert (cfg.arch, cfg.head_dim, cfg.rope_theta, cfg.rope_scaling) == \
        ("Qwen2ForCausalLM", 8, 1e6, None)
    assert (cfg.attention_bias, cfg.o_bias, cfg.qk_norm) == (True, False, False)
    assert (cfg.max_position_embeddings, cfg.dtype) == (32768, "float32")


def test_qwen3_round_trip(tmp_path: Path) -> None:
    hf = transformers.Qwen3Config(**SMALL, head_dim=12, attention_bias=True)
    cfg = load_hf_config(_save(tmp_path, hf, "Qwen3ForCausalLM"))
    assert (cfg.arch, cfg.head_dim, cfg.num_kv_heads) == ("Qwen3ForCausalLM", 12, 2)
    assert (cfg.attention_bias, cfg.o_bias, cfg.qk_norm) == (True, True, True)


def test_qwen3_absent_head_dim_is_128_like_transformers(tmp_path: Path) -> None:
    cfg = load_hf_config(_write(tmp_path, {"model_type": "qwen3", **SMALL}))
    assert cfg.head_dim == transformers.Qwen3Config(**SMALL).head_dim == 128
    cfg = load_hf_config(_write(tmp_path, {"model_type": "qwen3", **SMALL, "head_dim": None}))
    assert cfg.head_dim == 8


def test_legacy_rope_keys_and_torch_dtype(tmp_path: Path) -> None:
    legacy = {k: v for k, v in LLAMA3_ROPE.items() if k not in ("rope_type", "rope_theta")}
    data = {"architectures": ["LlamaForCausalLM"], **SMALL, "rope_theta": 500000,
            "rope_scaling": {"type": "llama3", **legacy}, "torch_dtype": "float16"}
    cfg = load_hf_config(_write(tmp_path, data))
    assert cfg.rope_theta == 500000.0 and cfg.dtype == "float16"
    assert cfg.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 64)
    assert cfg.num_kv_heads == 2 and cfg.head_dim == 8


def test_defaults_and_model_type_fallback(tmp_path: Path) -> None:
    data = {k: v for k, v in SMALL.items() if k != "num_key_value_heads"}
    cfg = load_hf_config(_write(tmp_path, {"model_type": "llama", **data}))
    assert cfg.arch == "LlamaForCausalLM" and cfg.num_kv_heads == 4
    assert (cfg.rope_theta, cfg.rope_scaling, cfg.rms_norm_eps) == (10000.0, None, 1e-6)


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"])
def test_to_hf_dict_round_trips_through_transformers(tmp_path: Path, arch: str) -> None:
    base = load_hf_config(_write(tmp_path, {"architectures": [arch], **SMALL, "head_dim": 16}))
    cfg = dataclasses.replace(base, name="m", rope_theta=5e5, tie_word_embeddings=True,
                              rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64))
    write_hf_config(cfg, tmp_path / "m")
    assert load_hf_config(tmp_path / "m") == cfg
    hf = transformers.AutoConfig.from_pretrained(tmp_path / "m")
    assert (hf.head_dim, hf.num_key_value_heads, hf.tie_word_embeddings) == (16, 2, True)
    assert hf.rope_parameters["rope_type"] == "llama3"
    assert hf.rope_parameters["rope_theta"] == 5e5


def _err(tmp_path: Path, data: dict | str) -> str:
    with pytest.raises(ConfigError) as info:
        load_hf_config(_write(tmp_path, data))
    assert isinstance(info.value, StrataError)
    msg = str(info.value)
    assert "config.json" in msg and "\n" not in msg
    return msg


LLAMA = {"architectures": ["LlamaForCausalLM"], **SMALL}


@pytest.mark.parametrize("change, expected", [
    ({"hidden_size": None}, "field 'hidden_size' is missing"),
    ({"num_attention_heads": 7, "hidden_size": 4096, "num_key_value_heads": 7},
     "field 'num_attention_heads' (7) must divide 'hidden_size' (4096)"),
    ({"num_key_value_heads": 3}, "'num_attention_heads' (4) must be a multiple of "
                                 "'num_key_value_heads' (3)"),
    ({"architectures": ["FooForCausalLM"]}, "unknown architecture 'FooForCausalLM' (supported: "),
    ({"vocab_size": "64"}, "field 'vocab_size' must be an integer, got \"64\""),
    ({"num_hidden_layers": True}, "field 'num_hidden_layers' must be an integer"),
    ({"intermediate_size": 0}, "field 'intermediate_size' must be a positive integer, got 0"),
    ({"rms_norm_eps": "1e-5"}, "field 'rms_norm_eps' must be a number"),
    ({"tie_word_embeddings": 1}, "field 'tie_word_embeddings' must be true or false"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
     "field 'rope_parameters.rope_type' is 'yarn' (supported: 'default', 'llama3')"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "field 'rope_scaling.type' is 'linear'"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
     "field 'rope_parameters.low_freq_factor' is missing"),
    ({"rope_parameters": {**LLAMA3_ROPE, "high_freq_factor": 1.0}},
     "field 'rope_parameters.high_freq_factor' (1.0) must be greater than"),
    ({"dtype": "int8"}, "field 'dtype' is 'int8'"),
    ({"hidden_act": "gelu"}, "field 'hidden_act' is 'gelu'"),
    ({"mlp_bias": True}, "field 'mlp_bias' is true"),
])
def test_errors_name_the_field(tmp_path: Path, change: dict, expected: str) -> None:
    data = {**LLAMA, **change}
    data = {k: v for k, v in data.items() if not (k == "hidden_size" and v is None)}
    assert expected in _err(tmp_path, data)


def test_missing_architecture_and_model_type(tmp_path: Path) -> None:
    assert "field 'architectures' is missing" in _err(tmp_path, SMALL)


def test_sliding_window_refused(tmp_path: Path) -> None:
    data = {"architectures": ["Qwen2ForCausalLM"], **SMALL, "use_sliding_window": True}
    assert "field 'use_sliding_window'" in _err(tmp_path, data)


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    assert "config.json:3:" in _err(tmp_path, '{\n  "a": 1,\n  oops\n}')
    assert "top level" in _err(tmp_path, "[1, 2]")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config.json: no such file"):
        load_hf_config(tmp_path)


def test_inconsistent_programmatic_config_refused(tmp_path: Path) -> None:
    cfg = load_hf_config(_write(tmp_path, LLAMA))
    with pytest.raises(ConfigError, match="qk_norm"):
        dataclasses.replace(cfg, qk_norm=True)


# ---------------------------------------------------------------------------------------------
# Hostile or mistaken input: each gives one ConfigError line naming the file (and the field)


def _inspect(model: Path):
    """Run ``strata inspect MODEL`` as a user would."""
    return subprocess.run([sys.executable, "-m", "strata.cli", "inspect", str(model)],
                          capture_output=True, text=True)


def _assert_cli_error(model: Path, message: str) -> None:
    r = _inspect(model)
    assert r.returncode == 1, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("field, value", [
    ("hidden_size", 10**30),
    ("vocab_size", 2**63),  # wrapped to a negative i64 downstream before the bound
    ("max_position_embeddings", 2**31),
])
def test_integer_fields_are_bounded(tmp_path: Path, field: str, value: int) -> None:
    msg = _err(tmp_path, {**LLAMA, field: value})
    assert f"field '{field}' is {value}, above the limit of 2147483647" in msg
    _assert_cli_error(tmp_path, f"field '{field}' is {value}, above the limit of 2147483647")


def test_the_largest_sizes_still_build(tmp_path: Path) -> None:
    # Every dim at the limit: products of two dims (vocab x hidden) still fit in int64, and
    # the module is instantiated and listed without overflowing anywhere.
    top = 2**31 - 1
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1,
        "num_attention_heads": top, "num_key_value_heads": top, "head_dim": top - 1,
        "vocab_size": top, "hidden_size": top, "intermediate_size": top,
        "max_position_embeddings": top}))
    r = _inspect(tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"Tensor[{top}, {top}; f32]" in r.stdout  # head_dim is even: top - 1


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"hidden_size": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}",
])
def test_deeply_nested_json(tmp_path: Path, text: str) -> None:
    assert "config.json: invalid JSON: nested too deeply" in _err(tmp_path, text)
    _assert_cli_error(tmp_path, "config.json: invalid JSON: nested too deeply")


def _with_raw(field: str, literal: str) -> str:
    """LLAMA as JSON text with ``field`` set to ``literal``, which json.dumps cannot write."""
    return json.dumps({k: v for k, v in LLAMA.items() if k != field})[:-1] + \
        f', "{field}": {literal}}}'


def test_integer_with_too_many_digits_names_the_field(tmp_path: Path) -> None:
    huge = "9" * 5000  # past Python's 4300-digit limit for int("...")
    assert "field 'vocab_size' is a 5000-digit integer, above the limit of 2147483647" in \
        _err(tmp_path, _with_raw("vocab_size", huge))
    assert "field 'vocab_size' must be a positive integer, got a negative 5000-digit integer" \
        in _err(tmp_path, _with_raw("vocab_size", "-" + huge))
    assert "field 'rope_theta' must be a finite positive number, got a 5000-digit integer" in \
        _err(tmp_path, _with_raw("rope_theta", huge))
    assert "field 'dtype' must be a string, got a 5000-digit integer" in \
        _err(tmp_path, _with_raw("dtype", huge))
    _assert_cli_error(tmp_path, "config.json: field 'dtype' must be a string")
    assert "field 'hidden_act' must be a string, got [\"a 5000-digit integer\"]" in \
        _err(tmp_path, _with_raw("hidden_act", f"[{huge}]"))
    # A field strata never reads may hold anything JSON allows.
    assert load_hf_config(_write(tmp_path, _with_raw("unused", huge))).vocab_size == 64


def test_integer_too_large_for_a_float_field(tmp_path: Path) -> None:
    msg = _err(tmp_path, _with_raw("rope_theta", "1" + "0" * 400))
    assert "field 'rope_theta' must be a finite positive number, got a 401-digit integer" in msg


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_refused(tmp_path: Path, literal: str) -> None:
    msg = _err(tmp_path, _with_raw("rms_norm_eps", literal))
    assert f"field 'rms_norm_eps' must be a finite positive number, got {literal}" in msg
    assert f"field 'hidden_size' must be an integer, got {literal}" in \
        _err(tmp_path, _with_raw("hidden_size", literal))


def test_safetensors_file_given_as_model(tmp_path: Path) -> None:
    from strata.ir.weights import write_safetensors

    weights = write_safetensors(tmp_path / "model.safetensors",
                                {"model.norm.weight": np.ones(4, dtype=np.float32)})
    with pytest.raises(ConfigError) as info:
        load_hf_config(weights)
    assert str(info.value) == (
        f"{weights}: is a safetensors weights file; MODEL must be the model directory "
        "(holding config.json) or a config.json file")
    _assert_cli_error(weights, f"{weights}: is a safetensors weights file; MODEL must be")


@pytest.mark.parametrize("junk", [bytes(range(256)) * 4, b"\x00" * 16, b"{\x00}"])
def test_binary_file_given_as_model(tmp_path: Path, junk: bytes) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(junk)
    with pytest.raises(ConfigError, match=r"weights.bin: is a binary file, not JSON; MODEL must"):
        load_hf_config(path)
    _assert_cli_error(path, f"{path}: is a binary file, not JSON; MODEL must be")


def test_dangling_link_as_model(tmp_path: Path) -> None:
    link = tmp_path / "model"
    link.symlink_to(tmp_path / "gone")
    expected = f"{link}: dangling symbolic link to '{tmp_path / 'gone'}'"
    with pytest.raises(ConfigError) as info:
        load_hf_config(link)
    assert str(info.value) == expected
    _assert_cli_error(link, expected)
    # A dangling directory on the way to config.json is named too.
    with pytest.raises(ConfigError, match="dangling symbolic link"):
        load_hf_config(link / "config.json")


def test_dangling_config_link_in_model_dir(tmp_path: Path) -> None:
    (tmp_path / "config.json").symlink_to("../elsewhere/config.json")
    expected = f"{tmp_path / 'config.json'}: dangling symbolic link to '../elsewhere/config.json'"
    with pytest.raises(ConfigError) as info:
        load_hf_config(tmp_path)
    assert str(info.value) == expected
    _assert_cli_error(tmp_path, expected)


def test_config_json_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").mkdir()
    expected = f"{tmp_path / 'config.json'}: is a directory, not a config file"
    with pytest.raises(ConfigError) as info:
        load_hf_config(tmp_path)
    assert str(info.value) == expected
    _assert_cli_error(tmp_path, expected)


def test_unreadable_config(tmp_path: Path, monkeypatch) -> None:
    # Root (CI's user) reads a file whatever its mode, so the refusal a user gets from the kernel
    # is made at the reader's open instead.
    path = _write(tmp_path, LLAMA)
    real_open = open

    def open_as_a_user(file, *args, **kwargs):
        if os.path.realpath(file) == os.path.realpath(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(hf_config, "open", open_as_a_user, raising=False)
    with pytest.raises(ConfigError, match="config.json: cannot read: Permission denied"):
        load_hf_config(tmp_path)


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_empty_config(tmp_path: Path, text: str) -> None:
    assert f"{tmp_path / 'config.json'}: is empty" in _err(tmp_path, text)
    _assert_cli_error(tmp_path, f"{tmp_path / 'config.json'}: is empty")


def test_oversized_config_is_not_read_whole(tmp_path: Path) -> None:
    assert "config.json: is larger than 16 MiB, too large for a config file" in \
        _err(tmp_path, " " * (16 * 1024 * 1024 + 1))


def test_odd_head_dim_and_too_many_layers(tmp_path: Path) -> None:
    """An odd head_dim cannot be rotated by RoPE and used to crash the lowering; a huge layer
    count used to hang `inspect` building every layer."""
    base = {"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 12, "num_hidden_layers": 1,
            "num_attention_heads": 4, "intermediate_size": 8}
    (tmp_path / "config.json").write_text(json.dumps(base))
    r = subprocess.run([sys.executable, "-m", "strata.cli", "trace", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and "field 'head_dim' is 3" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "config.json").write_text(json.dumps({**base, "hidden_size": 16, "num_hidden_layers": 2**31 - 1}))
    r = _inspect(tmp_path)
    assert r.returncode == 1 and "field 'num_hidden_layers' is 2147483647, above the limit of 4096" in r.stderr
