"""The module level of Llama-3-8B against its module-level listing, row for row where they share rows.

Strata's blocks carry one generic the seed does not have, `HeadDim` (the seed writes
`H / Heads`, which is wrong for Qwen3 and other head sizes), so the rows that mention
the head size are compared after writing `HeadDim` as the seed would.

A block's path is its kind in Strata. Where the seed's path names a family (`llama::`,
`llama.attention::`) Strata uses the standard kind that every family shares
(`std.layer.decoder`, `std.attn.grouped_query`, `std.model.causal_lm`); the other paths
are the seed's. Header rows are compared with the path written as the seed writes it.
"""

from __future__ import annotations

import re

import pytest

from strata.exporters.listing import model_listing
from strata.pipeline import load_model
from support import EXAMPLES, SEEDS

LLAMA3_8B_LISTING = SEEDS / "003_d12d2afe00e6155e.txt"
pytestmark = pytest.mark.skipif(not LLAMA3_8B_LISTING.exists(), reason="no Llama-3-8B module listing beside the checkout (../shared/seeds/003_*.txt)")


def sections(text: str) -> dict[str, list[str]]:
    """Top-level sections (Entries, Generics, Blocks) -> their non-empty lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line in ("Entries", "Generics", "Blocks", "Params", "State"):
            current = out.setdefault(line, [])
        elif current is not None and line.strip():
            current.append(line)
    return out


def blocks(lines: list[str]) -> dict[str, list[str]]:
    """Block name -> its header and member rows."""
    out: dict[str, list[str]] = {}
    name = None
    for line in lines:
        if re.fullmatch(r"[A-Z]\w*", line):
            name = line
            out[name] = []
        elif name is not None and (line.startswith("  ") or "::" in line):
            out[name].append(line)
    return out


#: Strata's kind -> the seed's path, where the seed names a family instead of a kind.
SEED_PATHS = {"std.layer.decoder::": "llama::", "std.attn.grouped_query::": "llama.attention::",
              "std.model.causal_lm::": "llama::"}


def as_seed_writes_it(row: str) -> str:
    for ours, theirs in SEED_PATHS.items():
        row = row.replace(ours, theirs)
    row = row.replace("HeadDim: Dim, ", "").replace("KvHeads, HeadDim, ", "KvHeads, ")
    return row.replace("* HeadDim", "* (H / Heads)").replace("HeadDim", "H / Heads")


@pytest.fixture(scope="module")
def listings():
    ours = model_listing(load_model(EXAMPLES / "llama-3-8b").module)
    return sections(ours), sections(LLAMA3_8B_LISTING.read_text())


def test_generics_bind_the_same_values(listings):
    ours, seed = listings
    theirs = dict(line.split("\t") for line in seed["Generics"] if "\t" in line)
    mine = dict(line.split("\t") for line in ours["Generics"] if "\t" in line)
    assert mine.pop("HeadDim") == "128"
    assert mine == theirs


def test_entries_table_is_the_seeds(listings):
    """All seventeen entries, with the seed's signatures, in the seed's order."""
    ours, seed = listings
    assert len(seed["Entries"]) == 18  # the header and seventeen entries
    assert ours["Entries"] == seed["Entries"]


@pytest.mark.parametrize("block", ["Embedding", "Linear", "RmsNorm", "SwiGlu", "GroupedQueryAttention", "DecoderLayer", "Model"])
def test_block_rows_match(listings, block):
    ours, seed = listings
    mine = [as_seed_writes_it(r) for r in blocks(ours["Blocks"])[block] if not r.strip().startswith("const ")]
    theirs = blocks(seed["Blocks"])[block]
    # Every row we print is one of the seed's, in the seed's order.
    assert [r for r in theirs if r in mine] == mine, "\n".join(r for r in mine if r not in theirs)


@pytest.mark.parametrize("block", ["GroupedQueryAttention", "DecoderLayer", "Model"])
def test_sequence_blocks_have_all_the_seeds_functions(listings, block):
    """The blocks with entries or sequence functions list every one of the seed's (the seed's
    paged, packed and slot functions included), word for word."""
    ours, seed = listings
    mine = [as_seed_writes_it(r) for r in blocks(ours["Blocks"])[block]]
    theirs = [r for r in blocks(seed["Blocks"])[block] if " fn " in r or " entry " in r]
    assert [r for r in mine if " fn " in r or " entry " in r] == theirs
