"""HF tokenizer directories: read as transformers reads them, and one-line errors for bad files.

The directories are small ones written here (a word-level vocabulary and a few special tokens),
so each companion file's effect is seen alone; transformers reads the same files for the
comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.runtime.text import ChatTemplateError, TokenizerError, load_tokenizer

WORDS = ["<unk>", "<s>", "</s>", "<|eot|>", "hello", "world", "!", "<pad>"]


def write_dir(path: Path, *, bos_in_post_processor: bool = True, config: dict | None = None,
              files: dict[str, object] | None = None) -> Path:
    """A tokenizer directory: tokenizer.json (word-level, whitespace-split), the config and `files`."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(w, special=True, normalized=False) for w in ("<unk>", "<s>", "</s>", "<|eot|>")])
    if bos_in_post_processor:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(path / "tokenizer.json"))
    base = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
            "unk_token": "<unk>"}
    (path / "tokenizer_config.json").write_text(json.dumps({**base, **(config or {})}))
    for name, content in (files or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture(scope="module")
def transformers_auto():
    import transformers  # imported here: it takes seconds, and only some tests compare with it

    return transformers.AutoTokenizer


@pytest.mark.parametrize("bos_in_post_processor", [True, False], ids=["post-processor-bos", "no-post-processor"])
@pytest.mark.parametrize("config", [{}, {"add_bos_token": False}, {"add_bos_token": True},
                                    {"add_bos_token": True, "add_eos_token": True}, {"add_eos_token": True}],
                         ids=["unset", "no-bos", "bos", "bos-eos", "eos"])
def test_bos_and_eos_are_what_tokenizer_json_adds_as_in_transformers(tmp_path, transformers_auto, config,
                                                                     bos_in_post_processor):
    d = write_dir(tmp_path / "t", config=config, bos_in_post_processor=bos_in_post_processor)
    tok, ref = load_tokenizer(d), transformers_auto.from_pretrained(str(d))
    for text in ("hello world !", "hello <|eot|> world", ""):
        assert tok.encode(text) == ref(text)["input_ids"], text
        assert tok.encode(text, add_special=False) == ref(text, add_special_tokens=False)["input_ids"], text
    assert tok.bos_id == 1 and tok.eos_id == 2
    assert tok.adds_bos == (ref("hello")["input_ids"][0] == 1)


def test_special_tokens_and_end_of_generation_ids(tmp_path):
    d = write_dir(tmp_path / "t", config={"eos_token": {"__type": "AddedToken", "content": "</s>"},
                                           "pad_token": "<pad>", "extra_special_tokens": {"turn_token": "<|eot|>"}},
                  files={"config.json": {"eos_token_id": [2, 3], "text_config": {"eos_token_id": 6}},
                         "generation_config.json": {"eos_token_id": 5}})
    tok = load_tokenizer(d)
    assert tok.special_tokens == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                  "pad_token": "<pad>", "turn_token": "<|eot|>"}
    assert tok.end_of_generation_ids == {2, 3, 5, 6}
    assert tok.special_ids == {0, 1, 2, 3}
    assert tok.vocab_size == len(WORDS)
    assert tok.decode([1, 4, 3, 5], skip_special=True) == "hello world"
    # The legacy special_tokens_map.json overrides the config where it has no added_tokens_decoder.
    legacy = write_dir(tmp_path / "legacy", files={"special_tokens_map.json": {"eos_token": "<|eot|>"}})
    assert load_tokenizer(legacy).eos_id == 3
    assert load_tokenizer(legacy / "tokenizer.json").eos_id == 3  # a tokenizer.json path reads its directory


def test_chat_templates_come_from_the_config_or_the_jinja_files(tmp_path, transformers_auto):
    msgs = [{"role": "user", "content": "hello"}]
    inline = write_dir(tmp_path / "inline", config={"chat_template": "A{{ messages[0].content }}{{ eos_token }}"})
    assert load_tokenizer(inline).render_chat(msgs) == "Ahello</s>"

    named = write_dir(tmp_path / "named", config={"chat_template": [
        {"name": "default", "template": "D{{ messages | length }}"},
        {"name": "tool_use", "template": "T{{ tools | length }}"}]})
    tok, ref = load_tokenizer(named), transformers_auto.from_pretrained(str(named))
    assert tok.render_chat(msgs) == ref.apply_chat_template(msgs, tokenize=False) == "D1"
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert tok.render_chat(msgs, tools=tools) == ref.apply_chat_template(msgs, tools=tools, tokenize=False) == "T1"
    assert tok.render_chat(msgs, template="default", tools=tools) == "D1"

    files = write_dir(tmp_path / "files", config={"chat_template": "config"},
                      files={"chat_template.jinja": "file", "additional_chat_templates/rag.jinja": "rag"})
    tok, ref = load_tokenizer(files), transformers_auto.from_pretrained(str(files))
    assert sorted(tok.chat_templates) == ["default", "rag"]
    assert tok.render_chat(msgs) == ref.apply_chat_template(msgs, tokenize=False) == "file"
    assert tok.render_chat(msgs, template="rag") == ref.apply_chat_template(msgs, chat_template="rag",
                                                                            tokenize=False) == "rag"

    broken = write_dir(tmp_path / "broken", config={"chat_template": "ok\n{% for m in messages %}\n{{ m.content }"})
    with pytest.raises(ChatTemplateError, match=r"broken/tokenizer_config\.json: chat_template: line 3: "):
        load_tokenizer(broken).render_chat(msgs)
    assert load_tokenizer(broken).encode("hello") == [1, 4]  # a bad template does not stop plain text
    with pytest.raises(ChatTemplateError, match=r"has no chat template"):
        load_tokenizer(write_dir(tmp_path / "none")).render_chat(msgs)


def _truncated(d: Path) -> None:
    text = (d / "tokenizer.json").read_text()
    (d / "tokenizer.json").write_text(text[: len(text) // 2])


@pytest.mark.parametrize("damage, message", [
    (_truncated, r"t/tokenizer\.json: not a valid tokenizer\.json \(EOF while parsing .* at line \d+ column \d+\)"),
    (lambda d: (d / "tokenizer.json").write_text('{"model": {"type": "Nonsense"}}'),
     r"t/tokenizer\.json: not a valid tokenizer\.json"),
    (lambda d: (d / "tokenizer_config.json").write_text('{\n  "bos_token": "<s>",\n  oops\n}'),
     r"t/tokenizer_config\.json: not valid JSON \(line 3, column 3"),
    (lambda d: (d / "tokenizer_config.json").write_text('{"bos_token": 5}'),
     r"t/tokenizer_config\.json: bos_token must be a token's text"),
    (lambda d: (d / "tokenizer_config.json").write_text('{"chat_template": 3}'),
     r"t/tokenizer_config\.json: chat_template must be a string or a list"),
    (lambda d: (d / "config.json").write_text('{"eos_token_id": "</s>"}'),
     r"t/config\.json: eos_token_id must be a token id or a list of token ids"),
    (lambda d: (d / "generation_config.json").write_text('[1, 2]'),
     r"t/generation_config\.json: must hold a JSON object, not list"),
    (lambda d: (d / "tokenizer.json").unlink(), r"t: no tokenizer\.json"),
])
def test_bad_files_are_one_line_errors_naming_file_and_field(tmp_path, damage, message):
    d = write_dir(tmp_path / "t")
    damage(d)
    with pytest.raises(TokenizerError, match=message) as e:
        load_tokenizer(d)
    assert "\n" not in str(e.value)


def test_paths_that_are_no_tokenizer(tmp_path):
    with pytest.raises(TokenizerError, match=r"nowhere: no such file or directory"):
        load_tokenizer(tmp_path / "nowhere")
    (tmp_path / "fake.gguf").write_bytes(b"not gguf at all")
    with pytest.raises(TokenizerError, match=r"fake\.gguf: not a GGUF file"):
        load_tokenizer(tmp_path / "fake.gguf")
