"""The code says what a thing is, not which outside document it came from: no file under strata/ or
bench/ cites the design's source documents by number ("seed 001") or by their path
(../shared/seeds). docs/sources.md is the one place that maps each level to its source."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: "seed 003", "Seed 001's", "seed-004", "seed002.json", and the folder the documents live in.
CITATION = re.compile(r"seed[ _-]?00\d|shared/seeds", re.IGNORECASE)


def citations(folder: Path) -> list[str]:
    """Every line under `folder` that cites a source document, as `path:line: text`."""
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file holds no prose
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if CITATION.search(line):
                found.append(f"{path.relative_to(folder)}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("folder", ["strata", "bench"])
def test_no_file_cites_a_source_document_by_number(folder):
    assert citations(ROOT / folder) == []


def test_the_check_finds_a_citation(tmp_path):
    (tmp_path / "a.py").write_text('"""x\n\nThe entries (Seed 003\'s) and ../shared/seeds/001.txt."""\n')
    (tmp_path / "b.py").write_text("rng = random.Random(seed=3)  # --seed 0 stays\n")
    assert [line.split(":")[:2] for line in citations(tmp_path)] == [["a.py", "3"]]

