"""A tiny random llama with a real vocabulary for the server: the default 512-token BPE and its
ChatML template beside random weights of that vocabulary."""

from __future__ import annotations

import shutil

import pytest

from strata.models.default_vocab import DATA_DIR, FILES, VOCAB_SIZE
from support import tiny, write_checkpoint


@pytest.fixture(scope="session")
def serve_model(tmp_path_factory):
    d = write_checkpoint(tiny("llama", vocab_size=VOCAB_SIZE), tmp_path_factory.mktemp("serve") / "tiny", std=0.5)
    for name in FILES:
        shutil.copyfile(DATA_DIR / name, d / name)
    return d
