"""What a tensor-parallel blueprint (`blueprint.ranks` > 1, from `shard-tensor-parallel`) adds to
the CUDA target's `model.py`: the rank runtime's text (`rank_runtime.py` below its marker, read
as text: printing imports no torch) and the `Model`'s tables `RANKS` and `PIECES`."""

from __future__ import annotations

from pathlib import Path

from xdsl.dialects import func

from strata.dialects.blueprint.facts import function_weights
from strata.targets.codegen import CodegenError
from strata.targets.cuda.host import checked, is_sampler

RANK_RUNTIME = Path(__file__).resolve().with_name("rank_runtime.py")
MARKER = "# -- copied into model.py from here "


def program_ranks(fns: list[func.FuncOp]) -> int:
    """The ranks every entry of the program runs on (1: not tensor-parallel); the sampler runs
    on each rank alike, on the gathered logits."""
    ranks = {int(fn.attributes["blueprint.ranks"].value.data) if "blueprint.ranks" in fn.attributes else 1  # type: ignore[attr-defined]
             for fn in fns if not is_sampler(fn)}
    if len(ranks) > 1:
        raise CodegenError(f"the entries disagree on blueprint.ranks ({sorted(ranks)})")
    return ranks.pop() if ranks else 1


def pieces_table(fns: list[func.FuncOp]) -> dict[str, tuple[int, ...]]:
    """Weight name -> the split of its stored tensor a rank holds (op.param's), for every split weight."""
    table: dict[str, tuple[int, ...]] = {}
    for fn in fns:
        for name, read in function_weights(fn).items():
            if read.split:
                table[checked(name, "weight name")] = tuple(int(v) for v in read.split)
    return table


def rank_runtime_text() -> str:
    """The rank runtime's source that model.py carries (below the marker of `rank_runtime.py`)."""
    text = RANK_RUNTIME.read_text(encoding="utf-8")
    _, found, body = text.partition(MARKER)
    if not found:
        raise CodegenError(f"{RANK_RUNTIME.name}: the marker line is missing")
    return body.split("\n", 1)[1]


def rank_tables(ranks: int, pieces: dict[str, tuple[int, ...]]) -> list[str]:
    """The class-body lines of the tables (indented)."""
    return [f"    RANKS = {ranks}", "    PIECES = {", *(f"        {k!r}: {v!r}," for k, v in sorted(pieces.items())), "    }"]
