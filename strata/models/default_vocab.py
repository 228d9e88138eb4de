"""The default model's vocabulary: a byte-level BPE of 512 tokens, trained by HF's `tokenizers`
on the fixed English text below, with ChatML's special tokens and chat template.

The files it makes are shipped (`strata/models/data/default-tokenizer/`: tokenizer.json,
tokenizer_config.json, generation_config.json) and copied beside the default model's weights;
this module is how they were made (a test checks that it still makes them byte for byte):

    python -m strata.models.default_vocab strata/models/data/default-tokenizer
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The shipped files, beside this module.
DATA_DIR = Path(__file__).resolve().parent / "data" / "default-tokenizer"
FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
#: Every id from 0 to VOCAB_SIZE - 1 is a token: the model's vocabulary is this size.
VOCAB_SIZE = 512
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: The training text (written for this vocabulary): common English words, and the words of the
#: things Strata does, so that a prompt about either tokenizes into words rather than bytes.
CORPUS = """\
Once upon a time there was a little town by the sea. Every morning the people of the town
walked to the market, and every evening they came back home to eat, to talk and to sleep.
The children played in the street and the old men sat in the sun. It was a quiet place, and
the people who lived there liked it that way. One day a stranger came to the town. He was tall
and he wore a long grey coat. Nobody knew his name, and nobody knew where he had come from.
He asked for a room at the inn, and the woman who kept the inn gave him the best room she had.
What do you want here? she asked him. I want to see the sea, he said, and I want to learn
how the fishermen of this town find their way home in the dark. The woman laughed. That is
easy, she said. They follow the light on the hill. But who keeps the light? he asked. She did
not answer. The next morning the stranger walked up the hill. At the top he found a small
house, and in the house he found an old woman who was reading a book by the window.
Hello, he said. Hello, she said, and she closed her book. I have been waiting for you.
The question is simple and the answer is not: what is a good life? Some say it is work, some
say it is love, and some say it is to know the world as it is. We think it is all of these.
I think that you are right. You think that I am wrong. They think that we are both right.
She said that he would come back before the night. He said that he would not. They were both
wrong, because he came back in the morning, with the first light of the new day.
Hello world. How are you today? I am fine, thank you, and you? Very well, thank you.
What is your name? My name is Ada. Where do you live? I live in a house near the river.
A model is a function from tokens to the logits of the next token. A compiler turns the model
into a program for a target: the CPU, a GPU or an accelerator. The program runs the prefill of
the prompt, then decodes one token at a time, and the sampler chooses each token from the
logits, with a temperature, a top-k, a top-p and a min-p, and a seed that makes the choice the
same every time. The tokenizer turns text into tokens and tokens back into text, and the chat
template turns the messages of a conversation into the text the model reads.
The numbers one, two, three, four, five, six, seven, eight, nine and ten. The days Monday,
Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday. The colours red, green, blue,
yellow, black and white. The weather was good, the water was warm, and the sky was clear.
"""


def build(out_dir: str | Path) -> Path:
    """Train the vocabulary and write the three files into `out_dir`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1)
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"the trainer made {tok.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 256, "chat_template": CHAT_TEMPLATE}
    ends = [tok.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>")]
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": ends}, indent=2) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else DATA_DIR))
