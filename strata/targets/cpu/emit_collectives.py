"""What a tensor-parallel module of the CPU emitter carries besides its kernels: the collectives
of `collectives.py` (torch.distributed on the `Model`'s process group, each collective op printing
as a call of one) and the binding of a rank's pieces of the weights."""

from __future__ import annotations

from pathlib import Path

#: The source of the collectives a tensor-parallel module carries, and their names.
COLLECTIVES = Path(__file__).with_name("collectives.py")
TP_FUNCTIONS = ("tp_rank", "all_reduce", "all_gather")


def tp_functions() -> list[str]:
    """The source of the functions a tensor-parallel module carries: the collectives and the
    weights' piece cutter (`strata.ir.split`), read as text (compiling imports no torch)."""
    from strata.ir import split
    from strata.targets.cpu.kernel_library import KernelLibrary

    collectives = KernelLibrary(COLLECTIVES.read_text())
    texts = [collectives.text(n) for n in collectives.closure(set(TP_FUNCTIONS))]
    return texts + [KernelLibrary(Path(split.__file__).read_text()).text("split_piece")]


#: The generated `_bind_piece`: a rank's piece of a weight, read by the store (only the piece's
#: bytes) where it can, else cut from the whole; then bound as `_bind` binds a whole weight.
BIND_PIECE = """\
def _bind_piece(weights, name, shape, dtype, split, index, convert=None, args=()):
    \"\"\"This rank's piece `index` of weight `name` (split = (axis, pieces, parts)): read by the
    store's `piece` where it has one (only the piece's bytes), else cut from the whole.\"\"\"
    piece = getattr(weights, 'piece', None)
    if piece is not None:
        return _bind(lambda n: piece(n, *split, index), name, shape, dtype, convert, args)
    return _bind(lambda n: split_piece(_bind(weights, n, None, None), *split, index), name, shape, dtype, convert, args)
"""
