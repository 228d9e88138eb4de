"""The module level's semantics of its entries (forward, prefill, decode, ...), as plainly as they can be said: every
entry that runs several sequences runs each one alone, in its own row of the state, through the
blocks' one-sequence `prefill`; a paged cache is gathered into a row of its own from the pages
the block table names, and what the call wrote is put back.

    runner = ModuleRunner(model_op, weights)
    logits = runner.call("decode_rows", {"tokens": [[5], [9]], "positions": [3, 7]})

This is the reference the op level's batched graphs (one flat row of tokens, masks, cache cells,
state slots) are checked against: the two share no code but the blocks' formulas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from strata.semantics.module_blocks import Block, ModuleRunError
from strata.semantics.sampling import sample


def _blocks(block: Block) -> Iterator[Block]:
    yield block
    for c in block.children.values():
        for b in c if isinstance(c, list) else [c]:
            yield from _blocks(b)


def _is_kv(block: Block, name: str) -> bool:
    """A state with a position axis (the KV cache [Batch, KvHeads, MaxSeq, D]), not a
    per-sequence recurrent state."""
    member = block.inst.block.member(name)
    return member is not None and "MaxSeq" in member.type_text


@contextmanager
def row_state(root: Block, row: int, table: np.ndarray | None = None, page: int = 0):
    """Every block's state seen as one sequence's, row `row` of it: a view of the row (writes
    go through), or, with a block `table` [Pages] of pages of `page` cells, the cells it names
    gathered into a row of their own and scattered back when the call is done."""
    saved: list[tuple[Block, str, np.ndarray]] = []
    paged: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for block in _blocks(root):
        for name, buf in list(block.state.items()):
            saved.append((block, name, buf))
            if table is None or not _is_kv(block, name):
                block.state[name] = buf[row:row + 1]
                continue
            max_seq = buf.shape[2]
            positions = np.arange(table.size * page)
            pages = np.repeat(table, page)
            cells = np.where(pages >= 0, pages * page + positions % page, -1)
            own = np.zeros((1, buf.shape[1], positions.size, buf.shape[3]), dtype=buf.dtype)
            live = cells >= 0
            own[0][:, live] = buf[cells[live] // max_seq, :, cells[live] % max_seq].transpose(1, 0, 2)
            block.state[name] = own
            paged.append((buf, own, cells))
    try:
        yield
    finally:
        for buf, own, cells in paged:
            live = cells >= 0
            max_seq = buf.shape[2]
            buf[cells[live] // max_seq, :, cells[live] % max_seq] = own[0][:, live].transpose(1, 0, 2)
        for block, name, buf in saved:
            block.state[name] = buf


def _runs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, first token, end) of each run of tokens of one row."""
    out = []
    i = 0
    while i < rows.size:
        j = i
        while j < rows.size and rows[j] == rows[i]:
            j += 1
        out.append((int(rows[i]), i, j))
        i = j
    return out


def _chunk_logits(root: Block, tokens, rows, positions, last, n_rows: int, state: Callable) -> np.ndarray:
    """Each row's run of chunk tokens prefilled alone in its state; the logits of `last`."""
    out = np.zeros((n_rows, root.inst.dim("Vocab")), dtype=np.float32)
    for r, i, j in _runs(rows):
        with state(r):
            x = root.states(tokens[None, i:j], int(positions[i]))[0]  # [run, H]
        for row in range(n_rows):
            if i <= last[row] < j:
                out[row] = root.logits(x[last[row] - i])
    return out


def _steps(root: Block, tokens, positions, state: Callable) -> np.ndarray:
    out = np.zeros((positions.size, root.inst.dim("Vocab")), dtype=np.float32)
    for r in np.flatnonzero(positions >= 0):
        with state(int(r)):
            out[r] = root.prefill(tokens[r:r + 1], int(positions[r]))[0]
    return out


def run_entry(root: Block, entry: str, args: dict):
    """Entry `entry` of the model whose root block is `root` on `args` (the module level's argument
    names, and `steps` for a device loop) -> its result, or a tuple of its results."""
    a = {k: np.asarray(v) for k, v in args.items()}
    if entry in ("forward", "next_token"):
        logits = root.forward(a["tokens"].astype(np.int64))
        return logits if entry == "forward" else logits[:, -1]
    if entry == "decode":
        return root.decode(a["token"].astype(np.int64), int(a["pos"]))
    if entry == "prefill":
        return root.prefill(a["tokens"].astype(np.int64), int(a["pos"]))
    if entry == "decode_rows":
        return _steps(root, a["tokens"].astype(np.int64), a["positions"], lambda r: row_state(root, r))
    if entry == "prefill_slots":
        out = []
        for m, slot in enumerate(a["slots"].tolist()):
            with row_state(root, slot):
                out.append(root.prefill(a["tokens"][m:m + 1, :int(a["lengths"][m])].astype(np.int64), 0)[0])
        return np.stack(out)
    if entry in ("hidden_packed", "log_probs_packed", "loss_packed"):
        return _packed(root, entry, a)
    if entry in ("prefill_packed", "step_packed"):
        n = a["last"].size
        state = lambda r: row_state(root, r)  # noqa: E731
        chunk = _chunk_logits(root, a["tokens"].astype(np.int64), a["rows"], a["positions"], a["last"], n, state)
        if entry == "prefill_packed":
            return chunk
        return np.concatenate((chunk, _steps(root, a["step_tokens"].astype(np.int64), a["step_positions"], state)))
    if entry in ("decode_paged", "prefill_paged", "step_paged"):
        page = root.inst.dim("PageSize")
        table = a["table"]
        state = lambda r: row_state(root, r, table[r], page)  # noqa: E731
        if entry == "decode_paged":
            return _steps(root, a["tokens"].astype(np.int64), a["positions"], state)
        n = table.shape[0]
        chunk = _chunk_logits(root, a["tokens"].astype(np.int64), a["rows"], a["positions"], a["last"], n, state)
        if entry == "prefill_paged":
            return chunk
        return np.concatenate((chunk, _steps(root, a["step_tokens"].astype(np.int64), a["step_positions"], state)))
    if entry in ("generate", "generate_until", "sample"):
        return _generate(root, entry, a)
    raise ModuleRunError(f"the module interpreter has no entry '{entry}'")


def _packed(root: Block, entry: str, a: dict):
    """Each segment run alone from position 0, without a cache."""
    segments, tokens = a["segments"], a["tokens"].astype(np.int64)
    hidden, logits = [], []
    for _, i, j in _runs(segments):
        x = root.hidden_states(tokens[None, i:j])[0]
        hidden.append(root.children["norm"].forward(x))
        logits.append(root.logits(x))
    if entry == "hidden_packed":
        return np.concatenate(hidden)
    z = np.concatenate(logits).astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = log_probs[np.arange(tokens.size), a["targets"].astype(np.int64)]
    if entry == "log_probs_packed":
        return picked.astype(np.float32)
    w = a["weights"].astype(np.float64)
    return np.float32(-(picked * w).sum() / w.sum())


def _generate(root: Block, entry: str, a: dict):
    """The loops: each step's logits give each row's argmax or, for sample, the sampler's draw
    for the row at the counter the drawn token's position (temperature alone; nothing filtered)."""
    steps = int(a["steps"])
    token, pos = a["token"].astype(np.int64), int(a["pos"])
    eos = int(a["eos"]) if entry == "generate_until" else None
    ids = np.full((token.shape[0], steps), eos if eos is not None else 0, dtype=np.int32)
    done = np.zeros(token.shape[0], dtype=bool)
    count = 0
    for i in range(steps):
        logits = root.decode(token, pos + i)
        if entry == "sample":
            chosen = sample(logits, a["key"], pos + i + 1, temperature=a["temperature"])
        else:
            chosen = np.argmax(logits, axis=-1).astype(np.int32)
        if eos is not None:
            chosen = np.where(done, eos, chosen)
        ids[:, i] = chosen
        count = i + 1
        token = chosen[:, None].astype(np.int64)
        if eos is not None:
            done |= chosen == eos
            if done.all():
                break
    return ids if eos is None else (ids, np.int32(count))
