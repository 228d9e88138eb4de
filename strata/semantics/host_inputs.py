"""The host side of an entry's call: its arguments checked, then every `op.input` of the
entry's op-level function computed from them, as llama.cpp's host fills a graph's inputs from a
batch of tokens (each with its position and sequence) and its cache cells.

    call = entry_call(layout, spec, {"tokens": [[5], [9]], "positions": [3, 7]})
    mask = call_input("kq_mask", call, (2, 1, 64))

`layout` is what the lowering recorded on the function (`op.call`: the entry, how its attention
reaches K and V, whether each row is its own attention stream, whether the recurrent state is
kept in slots, and the generics); `spec` its arguments (`op.args`, `op.arg_types`). The call is
a small set of per-token facts that every input is read from:

* `tokens`, `positions` [N]: the call's tokens in the function's order, each at its position;
* `label` [N]: the sequence each token attends within (its KV row, or its segment); `cell` [N]:
  the cache cell its K and V go to (-1: none, a padding or idle token);
* the columns of each attention stream: `col_label`, `col_pos` [R, C], and for a paged cache
  the cells they are read from (`cells`): a query sees a column of its own sequence at a
  position up to its own (a query that would see nothing, a padding or idle token, sees
  column 0, so that its row stays finite; its result is never used);
* `out` [R]: the token whose row each output row is (-1: a row of zeros);
* the recurrent state: each token's state sequence `seq` [N] (-1: none), and per sequence the
  slot it reads (`state_read`, -1: zeros, a new sequence) and writes (`state_write`, -1: none).

A cache of `Batch` rows holds `MaxSeq` cells per row (row b's position p is cell b*MaxSeq + p);
seen as pages of `PageSize` cells it is a pool of Batch*MaxSeq / PageSize pages that a block
table maps to (row r's position p is cell table[r, p // PageSize] * PageSize + p % PageSize).

Like `kernels.py`, this file is copied into the CPU target's generated modules: numpy only, no
module-level names but functions. Bad arguments raise ValueError with a one-line message that
names the argument (the caller adds which call it was).
"""

from __future__ import annotations

import numpy as np


def check_args(entry: str, spec, given) -> dict:
    """The arguments `given` (name -> value) of a call of `entry` as numpy arrays of the types
    `spec` declares: a sequence of (name, shape or None for a scalar, numpy dtype name), a
    shape's -1 being the call's one dynamic dim (the same size wherever it appears)."""
    names = [name for name, _, _ in spec]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"{entry}: no argument {unknown[0]!r} (it takes {', '.join(names)})")
    out = {}
    dynamic = None
    for name, shape, dtype in spec:
        if name not in given:
            raise ValueError(f"{entry}: missing argument {name!r}")
        value = given[name]
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError):
            arr = np.asarray(None)
        want = np.dtype(dtype)
        ints = want.kind == "i"
        if arr.dtype.kind not in ("iu" if ints else "iuf") or arr.dtype == np.bool_:
            what = "integers" if ints else "numbers"
            raise ValueError(f"{entry}: argument {name!r} must hold {what}, got {_describe_value(arr)}")
        if ints and arr.size and (arr.min() < np.iinfo(want).min or arr.max() > np.iinfo(want).max):
            raise ValueError(f"{entry}: argument {name!r} holds values outside {want.name}")
        if shape is None:
            if arr.ndim != 0:
                raise ValueError(f"{entry}: argument {name!r} is a scalar, got shape {list(arr.shape)}")
        else:
            ok = arr.ndim == len(shape)
            for want_dim, got in zip(shape, arr.shape if ok else ()):
                if want_dim == -1:
                    dynamic = got if dynamic is None else dynamic
                    ok = ok and got == dynamic and got >= 1
                else:
                    ok = ok and got == want_dim
            if not ok:
                dims = ", ".join("?" if d == -1 and dynamic is None else str(dynamic if d == -1 else d) for d in shape)
                raise ValueError(f"{entry}: argument {name!r} must have shape [{dims}], got {list(arr.shape)}")
        if not ints and not np.all(np.isfinite(arr)):
            raise ValueError(f"{entry}: argument {name!r} must be finite")
        out[name] = arr.astype(want)
    return out


def _describe_value(arr) -> str:
    if arr.dtype == object:
        return "something that is not a rectangular array of numbers"
    return {"b": "booleans", "f": "floats", "U": "text", "S": "bytes"}.get(arr.dtype.kind, str(arr.dtype))


def entry_call(layout: dict, spec, given) -> dict:
    """The facts of one call (see the module docstring): the arguments checked against `spec`
    and against the generics and the context of `layout`."""
    entry = layout["entry"]
    args = check_args(entry, spec, given)
    if "temperature" in args and args["temperature"] < 0:  # 0 is greedy; the sampler divides by the rest
        raise ValueError(f"{entry}: argument 'temperature' must be >= 0, got {float(args['temperature'])}")
    if "step" in args and not 0 <= int(args["step"]) < 2**31:
        raise ValueError(f"{entry}: argument 'step' must be in [0, 2**31), got {int(args['step'])}")
    batch, max_seq = layout["Batch"], layout["MaxSeq"]
    for name in ("tokens", "step_tokens", "token"):
        if name in args:
            _check_range(entry, name, args[name], 0, layout["Vocab"] - 1, "the vocabulary")
    if entry in ("forward", "next_token"):
        b, s = args["tokens"].shape
        rows = np.repeat(np.arange(b), s)
        call = _call(args["tokens"], np.tile(np.arange(s), b), rows, -np.ones(b * s, np.int64))
        _check_positions(entry, "tokens", s, max_seq)
        call["out"] = np.arange(b) * s + s - 1 if entry == "next_token" else np.arange(b * s)
        call.update(_fresh_state(rows))
    elif entry in ("decode", "prefill", "generate", "sample", "generate_until"):
        tokens = args["token"] if "token" in args else args["tokens"]
        pos = int(args["pos"])
        s = tokens.shape[1]
        if pos < 0 or pos + s > max_seq:
            raise ValueError(f"{entry}: 'pos' {pos} with {s} token(s) is past the context (MaxSeq = {max_seq})")
        steps = layout.get("Steps", 1)
        if pos + steps > max_seq:
            raise ValueError(f"{entry}: 'pos' {pos} with {steps} steps is past the context (MaxSeq = {max_seq})")
        rows = np.repeat(np.arange(batch), s)
        positions = np.tile(pos + np.arange(s), batch)
        call = _call(tokens, positions, rows, rows * max_seq + positions)
        call["out"] = np.arange(batch) * s + s - 1
        call.update(_slot_state(rows, rows, positions, batch))
    elif entry == "decode_rows":
        positions = args["positions"]
        _check_range(entry, "positions", positions, 0, max_seq - 1, f"the context, MaxSeq = {max_seq}")
        rows = np.arange(batch)
        call = _call(args["tokens"], positions, rows, rows * max_seq + positions)
        call["out"] = rows
        call.update(_slot_state(rows, rows, positions, batch))
    elif entry == "prefill_slots":
        call = _prefill_slots(entry, args, batch, max_seq)
    elif entry in ("hidden_packed", "log_probs_packed", "loss_packed"):
        call = _packed(entry, args, max_seq, layout["Vocab"])
    elif entry in ("prefill_packed", "step_packed"):
        call = _packed_rows(entry, args, batch, max_seq, layout)
    elif entry in ("decode_paged", "prefill_paged", "step_paged"):
        call = _paged(entry, args, layout)
    else:
        raise ValueError(f"unknown entry {entry!r}")
    call["args"] = args
    call["layout"] = layout
    _columns(call, layout)
    return call


def _call(tokens, positions, label, cell) -> dict:
    return {"tokens": np.asarray(tokens, np.int32).reshape(-1), "positions": np.asarray(positions, np.int32),
            "label": np.asarray(label, np.int64), "cell": np.asarray(cell, np.int64)}


def _check_range(entry: str, name: str, values, low: int, high: int, what: str) -> None:
    flat = np.asarray(values).reshape(-1)
    bad = np.flatnonzero((flat < low) | (flat > high))
    if bad.size:
        i = int(bad[0])
        where = f"[{', '.join(str(int(x)) for x in np.unravel_index(i, np.shape(values)))}]" if np.ndim(values) else ""
        raise ValueError(f"{entry}: {name}{where} = {int(flat[i])} is not in [{low}, {high}] ({what})")


def _check_positions(entry: str, name: str, length: int, max_seq: int) -> None:
    if length > max_seq:
        raise ValueError(f"{entry}: {name} has {length} positions, past the context (MaxSeq = {max_seq})")


def _fresh_state(seq) -> dict:
    """Every sequence starts from zero state and keeps none (one block of zeros feeds them all)."""
    return {"seq": np.asarray(seq, np.int64), "state_read": -np.ones(1, np.int64),
            "state_write": np.zeros(0, np.int64), "fresh": True}


def _slot_state(seq, slot_of_token, positions, groups: int) -> dict:
    """Sequence g of the call is slot `slot` of the state: it reads it unless it starts at
    position 0 (a new sequence), and writes it back. `seq` [N]: each token's sequence (-1:
    none); `slot_of_token` [N]: the slot each token's sequence is."""
    seq = np.asarray(seq, np.int64)
    read = -np.ones(groups, np.int64)
    write = -np.ones(groups, np.int64)
    for i in np.flatnonzero(seq >= 0)[::-1]:  # the sequence's first token decides (read backwards)
        g = int(seq[i])
        write[g] = int(slot_of_token[i])
        read[g] = int(slot_of_token[i]) if positions[i] > 0 else -1
    return {"seq": seq, "state_read": read, "state_write": write, "fresh": False}


def _prefill_slots(entry: str, args: dict, batch: int, max_seq: int) -> dict:
    tokens, slots, lengths = args["tokens"], args["slots"], args["lengths"]
    m, s = tokens.shape
    _check_positions(entry, "tokens", s, max_seq)
    _check_range(entry, "slots", slots, 0, batch - 1, f"the {batch} slots, Batch")
    _check_range(entry, "lengths", lengths, 1, s, f"the {s} tokens per prompt")
    _check_distinct(entry, "slots", slots)
    rows = np.repeat(np.arange(m), s)
    offset = np.tile(np.arange(s), m)
    real = offset < np.repeat(lengths, s)
    cell = np.where(real, np.repeat(slots.astype(np.int64), s) * max_seq + offset, -1)
    call = _call(tokens, offset, rows, cell)
    call["out"] = np.arange(m) * s + lengths - 1
    call.update(_slot_state(np.where(real, rows, -1), np.repeat(slots, s), np.zeros(m * s), m))
    return call


def _check_distinct(entry: str, name: str, values) -> None:
    flat = np.asarray(values).reshape(-1)
    seen: dict = {}
    for i, v in enumerate(flat.tolist()):
        if v in seen:
            raise ValueError(f"{entry}: {name}[{seen[v]}] and {name}[{i}] are both {v}")
        seen[v] = i


def _segments(entry: str, segments, positions, first_at_zero: bool) -> np.ndarray:
    """Each token's segment index 0, 1, ... (segments must come in order and each be whole),
    with the positions counting up by one within each segment (from 0 when `first_at_zero`)."""
    segments = np.asarray(segments, np.int64)
    if segments.size and segments.min() < 0:
        raise ValueError(f"{entry}: segments[{int(np.argmin(segments))}] is negative")
    back = np.flatnonzero(np.diff(segments) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise ValueError(f"{entry}: segments out of order: segments[{i}] = {int(segments[i])} after "
                         f"segments[{i - 1}] = {int(segments[i - 1])}")
    start = np.concatenate(([True], segments[1:] != segments[:-1]))
    index = np.cumsum(start) - 1
    for i in range(segments.size):
        if start[i]:
            if first_at_zero and positions[i] != 0:
                raise ValueError(f"{entry}: positions[{i}] = {int(positions[i])} starts segment {int(segments[i])}; "
                                 "each segment starts at position 0")
        elif positions[i] != positions[i - 1] + 1:
            raise ValueError(f"{entry}: positions[{i}] = {int(positions[i])} does not follow positions[{i - 1}] = "
                             f"{int(positions[i - 1])} within segment {int(segments[i])}")
    return index


def _packed(entry: str, args: dict, max_seq: int, vocab: int) -> dict:
    tokens, positions = args["tokens"], args["positions"]
    _check_range(entry, "positions", positions, 0, max_seq - 1, f"the context, MaxSeq = {max_seq}")
    seq = _segments(entry, args["segments"], positions, True)
    call = _call(tokens, positions, seq, -np.ones(tokens.size, np.int64))
    call["out"] = np.arange(tokens.size)
    call.update(_fresh_state(seq))
    if "targets" in args:
        _check_range(entry, "targets", args["targets"], 0, vocab - 1, "the vocabulary")
    if "weights" in args:
        weights = args["weights"]
        if weights.size and weights.min() < 0:
            raise ValueError(f"{entry}: weights[{int(np.argmin(weights))}] is negative")
        if not float(np.sum(weights, dtype=np.float64)) > 0:
            raise ValueError(f"{entry}: the weights sum to 0: the weighted mean has nothing to average")
    return call


def _chunk_rows(entry: str, rows, positions, segments, n_rows: int, max_pos: int, what: str):
    """Checks of a packed chunk: rows in range, each row one run of consecutive positions
    (whole segments, in order, when `segments` is given), no row twice; returns each token's
    row (int64)."""
    rows = np.asarray(rows, np.int64)
    _check_range(entry, "rows", rows, 0, n_rows - 1, what)
    _check_range(entry, "positions", positions, 0, max_pos - 1, f"the {max_pos} positions of the context")
    groups = rows if segments is None else np.asarray(segments, np.int64)
    if segments is not None:
        _segments(entry, segments, positions, False)
    start = np.concatenate(([True], groups[1:] != groups[:-1])) if rows.size else np.zeros(0, bool)
    seen: dict = {}
    for i in range(rows.size):
        if start[i]:
            r = int(rows[i])
            if r in seen:
                raise ValueError(f"{entry}: row {r} gets two runs of tokens (from {seen[r]} and from {i}); "
                                 "a row takes one run of consecutive positions per call")
            seen[r] = i
        else:
            if rows[i] != rows[i - 1]:
                raise ValueError(f"{entry}: rows[{i}] = {int(rows[i])} changes within segment {int(groups[i])}")
            if positions[i] != positions[i - 1] + 1:
                raise ValueError(f"{entry}: positions[{i}] = {int(positions[i])} does not follow positions[{i - 1}] = "
                                 f"{int(positions[i - 1])} in row {int(rows[i])}")
    return rows


def _check_last(entry: str, last, rows, offset: int) -> np.ndarray:
    """`last` [R]: for each row the index of the chunk token whose logits it returns, -1 for none;
    returns the output rows' token indices (shifted by `offset`, -1 kept)."""
    last = np.asarray(last, np.int64)
    _check_range(entry, "last", last, -1, rows.size - 1, f"the {rows.size} tokens, or -1 for none")
    for r, i in enumerate(last.tolist()):
        if i >= 0 and rows[i] != r:
            raise ValueError(f"{entry}: last[{r}] = {i} is a token of row {int(rows[i])}, not of row {r}")
    return np.where(last >= 0, last + offset, -1)


def _packed_rows(entry: str, args: dict, batch: int, max_seq: int, layout: dict) -> dict:
    positions = args["positions"]
    rows = _chunk_rows(entry, args["rows"], positions, args["segments"], batch, max_seq, f"the {batch} rows, Batch")
    out = _check_last(entry, args["last"], rows, batch if entry == "step_packed" else 0)
    chunk = _call(args["tokens"], positions, rows, rows * max_seq + positions)
    if entry == "prefill_packed":
        chunk["out"] = out
        chunk.update(_slot_state(rows, rows, positions, batch))
        return chunk
    step_pos = args["step_positions"]
    step = _steps(entry, args["step_tokens"], step_pos, rows, max_seq, f"the context, MaxSeq = {max_seq}")
    active = step_pos >= 0
    cells = np.where(active, np.arange(batch) * max_seq + step_pos, -1)
    call = _join(_call(args["step_tokens"], step, np.arange(batch), cells), chunk)
    seq = np.concatenate((np.where(active, np.arange(batch), -1), rows))
    call["out"] = np.concatenate((out, np.where(active, np.arange(batch), -1)))
    call.update(_slot_state(seq, np.where(seq >= 0, seq, 0), call["positions"], batch))
    return call


def _steps(entry: str, tokens, step_positions, chunk_rows, max_pos: int, what: str) -> np.ndarray:
    """The positions of the decode steps (-1: the row takes no step; it gets position 0, a
    harmless query): in the context, and no row both stepping and in the chunk."""
    step_positions = np.asarray(step_positions, np.int64)
    _check_range(entry, "step_positions", step_positions, -1, max_pos - 1, what + ", or -1 for none")
    both = sorted(set(np.flatnonzero(step_positions >= 0).tolist()) & set(np.asarray(chunk_rows).tolist()))
    if both:
        raise ValueError(f"{entry}: row {both[0]} takes a decode step and chunk tokens in one call")
    return np.maximum(step_positions, 0)


def _join(a: dict, b: dict) -> dict:
    return {k: np.concatenate((a[k], b[k])) for k in ("tokens", "positions", "label", "cell")}


def _paged(entry: str, args: dict, layout: dict) -> dict:
    table = np.asarray(args["table"], np.int64)
    n_rows, n_pages = table.shape
    page, pool = layout["PageSize"], layout["Batch"] * layout["MaxSeq"] // layout["PageSize"]
    span = n_pages * page
    if layout.get("ConvK") and n_rows > layout["Batch"]:
        raise ValueError(f"{entry}: {n_rows} rows, but the recurrent state has {layout['Batch']} slots (Batch)")
    bad = np.argwhere((table < -1) | (table >= pool))
    if bad.size:
        r, j = (int(x) for x in bad[0])
        raise ValueError(f"{entry}: table[{r}, {j}] = {int(table[r, j])} points at a page that does not exist "
                         f"(the cache has {pool} pages of {page} cells; -1 marks an unused entry)")

    if entry == "decode_paged":
        positions = args["positions"]
        _check_range(entry, "positions", positions, 0, span - 1, f"the {span} positions the table reaches")
        rows = np.arange(n_rows)
        call = _call(args["tokens"], positions, rows, _cell_of(entry, table, page, rows, positions))
        call["out"] = rows
        call.update(_slot_state(rows, rows, positions, n_rows))
    else:
        positions = args["positions"]
        rows = _chunk_rows(entry, args["rows"], positions, None, n_rows, span, f"the {n_rows} rows of the table")
        cells = _cell_of(entry, table, page, rows, positions)
        slots = np.asarray(args["slots"], np.int64)
        wrong = np.flatnonzero(slots != cells)
        if wrong.size:
            i = int(wrong[0])
            raise ValueError(f"{entry}: slots[{i}] = {int(slots[i])}, but row {int(rows[i])}'s position "
                             f"{int(positions[i])} is cell {int(cells[i])} by the table")
        out = _check_last(entry, args["last"], rows, 0)
        chunk = _call(args["tokens"], positions, rows, cells)
        if entry == "prefill_paged":
            call = chunk
            call["out"] = out
        else:
            step_pos = args["step_positions"]
            step = _steps(entry, args["step_tokens"], step_pos, rows, span, f"the {span} positions the table reaches")
            active = step_pos >= 0
            step_rows = np.arange(n_rows)
            cells = _cells_where(entry, table, page, step_rows, step, active)
            call = _join(chunk, _call(args["step_tokens"], step, step_rows, cells))
            call["out"] = np.concatenate((out, np.where(active, rows.size + step_rows, -1)))
            rows = np.concatenate((rows, np.where(active, step_rows, -1)))
        call.update(_slot_state(rows, np.where(rows >= 0, rows, 0), call["positions"], n_rows))
    _check_distinct_cells(entry, call["cell"])
    call["table"] = table
    return call


def _cell_of(entry: str, table, page: int, rows, positions) -> np.ndarray:
    """The cache cell of each (row, position) through the block table."""
    rows, positions = np.asarray(rows, np.int64), np.asarray(positions, np.int64)
    pages = table[rows, positions // page]
    missing = np.flatnonzero(pages < 0)
    if missing.size:
        i = int(missing[0])
        raise ValueError(f"{entry}: position {int(positions[i])} of row {int(rows[i])} is in page entry "
                         f"table[{int(rows[i])}, {int(positions[i]) // page}] = -1 (no page)")
    return pages * page + positions % page


def _cells_where(entry: str, table, page: int, rows, positions, active) -> np.ndarray:
    """The cells of the active (row, position)s, -1 for the others."""
    out = -np.ones(rows.size, np.int64)
    idx = np.flatnonzero(active)
    if idx.size:
        out[idx] = _cell_of(entry, table, page, rows[idx], positions[idx])
    return out


def _check_distinct_cells(entry: str, cells) -> None:
    written = cells[cells >= 0]
    if np.unique(written).size != written.size:
        values, counts = np.unique(written, return_counts=True)
        c = int(values[np.argmax(counts > 1)])
        first, second = (int(i) for i in np.flatnonzero(cells == c)[:2])
        raise ValueError(f"{entry}: tokens {first} and {second} would both write cache cell {c} (the table maps "
                         "two positions to one cell)")


def _columns(call: dict, layout: dict) -> None:
    """Each attention stream's columns: their labels and positions, and the cells they are read
    from. `layout['kv']`: "self" (the call's own tokens), "cache" (the cells of the contiguous
    cache) or "paged" (the cells the block table reaches); `layout['streams']`: "rows" (stream
    r is row r's tokens) or "one" (one stream of every token)."""
    kv, per_row = layout["kv"], layout["streams"] == "rows"
    n = call["tokens"].size
    if kv == "self":
        label, pos = call["label"], call["positions"].astype(np.int64)
        if per_row:  # stream r is row r of the tokens (forward's B rows, prefill_slots' M prompts)
            streams = call["args"]["tokens"].shape[0]
            label, pos = label.reshape(streams, -1), pos.reshape(streams, -1)
        else:
            label, pos = label.reshape(1, n), pos.reshape(1, n)
        call["col_label"], call["col_pos"] = label, pos
        return
    if kv == "cache":
        max_seq, batch, n_kv = layout["MaxSeq"], layout["Batch"], layout["n_kv"]
        if per_row:
            call["col_label"] = np.repeat(np.arange(batch), n_kv).reshape(batch, n_kv)
            call["col_pos"] = np.tile(np.arange(n_kv), batch).reshape(batch, n_kv)
        else:
            cells = np.arange(batch * max_seq)
            call["col_label"], call["col_pos"] = (cells // max_seq)[None], (cells % max_seq)[None]
        return
    table, page = call["table"], layout["PageSize"]
    n_rows, n_pages = table.shape
    pos = np.tile(np.arange(n_pages * page), n_rows).reshape(n_rows, -1)
    pages = np.repeat(table, page, axis=1)  # [Rows, Pages*PageSize]: each position's page
    cells = np.where(pages >= 0, pages * page + pos % page, 0)
    label = np.where(pages >= 0, np.arange(n_rows)[:, None], -1)
    if not per_row:
        cells, label, pos = cells.reshape(1, -1), label.reshape(1, -1), pos.reshape(1, -1)
    call["cells"], call["col_label"], call["col_pos"] = cells, label, pos


def attention_mask(call: dict, shape) -> np.ndarray:
    """`kq_mask` [S, C] (one stream) or [R, S, C]: 0 where a query sees a column (its sequence,
    a position up to its own), else -inf; a query that sees nothing sees column 0."""
    label, pos = call["label"], call["positions"].astype(np.int64)
    streams = 1 if len(shape) == 2 else shape[0]
    q_label, q_pos = label.reshape(streams, -1, 1), pos.reshape(streams, -1, 1)
    col_label, col_pos = call["col_label"][:, None, :], call["col_pos"][:, None, :]
    visible = (col_label == q_label) & (col_pos <= q_pos) & (q_label >= 0)
    blind = ~visible.any(axis=-1)
    visible[..., 0] |= blind
    mask = np.where(visible, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
    return mask[0] if len(shape) == 2 else mask


def conv_rows(call: dict, k: int) -> tuple:
    """The rows of the conv table (the state blocks' K-1 columns each, then the call's tokens)
    that each token's window reads ([N*K]) and that each sequence's new conv state is ([G*(K-1)]):
    a window reaches back K-1 tokens within the token's sequence, into the sequence's state
    block before its first token (block 0, zeros, for sequences that keep no state)."""
    seq, fresh = call["seq"], call["fresh"]
    n = seq.size
    blocks = call["state_read"].size
    base = blocks * (k - 1)
    window = np.repeat(base + np.arange(n), k)  # a token of no sequence: its own column
    members: dict = {}
    for i in range(n):
        g = int(seq[i])
        if g < 0:
            continue
        mine = members.setdefault(g, [])
        mine.append(i)
        block = 0 if fresh else g
        for j in range(k):
            back = len(mine) - k + j  # the in-sequence offset the window's column j holds
            window[i * k + j] = base + mine[back] if back >= 0 else block * (k - 1) + (k - 1) + back
    tail = np.zeros(0 if fresh else blocks * (k - 1), np.int64)
    if not fresh:
        for g in range(blocks):
            mine = members.get(g, [])
            for j in range(k - 1):
                back = len(mine) - (k - 1) + j
                tail[g * (k - 1) + j] = base + mine[back] if back >= 0 else g * (k - 1) + (k - 1) + back
    return window.astype(np.int32), tail.astype(np.int32)


def call_input(kind: str, call: dict, shape) -> np.ndarray:
    """The host input `kind` (an `op.input` of the entry's function) of shape `shape` for `call`."""
    if kind == "tokens":
        return call["tokens"]
    if kind == "positions":
        return call["positions"]
    if kind == "mrope_positions":
        p = call["positions"]
        return np.concatenate((p, p, p, np.zeros_like(p))).astype(np.int32)
    if kind == "kv_rows":
        return call["cell"]
    if kind == "kq_mask":
        return attention_mask(call, shape)
    if kind == "out_ids":
        return np.asarray(call["out"], np.int32)
    if kind == "kv_cells":
        return call["cells"].reshape(-1).astype(np.int64)
    if kind == "token_seq":
        return call["seq"].astype(np.int32)
    if kind == "state_read":
        return call["state_read"].astype(np.int32)
    if kind == "state_write":
        return call["state_write"].astype(np.int64)
    if kind in ("conv_window", "conv_tail"):
        k = call["layout"]["ConvK"]
        rows = conv_rows(call, k)
        return rows[0] if kind == "conv_window" else rows[1]
    if kind in ("targets", "weights"):
        return call["args"][kind]
    if kind in ("start", "eos", "temperature", "step"):
        name = "pos" if kind == "start" else kind
        return np.asarray(call["args"][name]).reshape(1)
    if kind == "key":
        return call["args"]["key"]
    raise ValueError(f"call_input: unknown kind {kind!r}")


def generate_loop(step, tokens, start, steps: int, eos=None, key=None, temperature=None):
    """The device loops (`op.generate`, `op.generate_until`, `op.generate_sampled`): `steps` calls
    of `step(token [Batch, 1], pos)` -> the chosen ids [Batch], each fed the previous ids at the
    next position, from `tokens` [Batch] at `start` [1]. With `key` [2] and `temperature` [1]
    (a sampling loop) each call is `step(token, pos, key, temperature, pos + 1)`: the last is
    the draw's counter, the position the drawn token takes (the runtime's loop's step). Returns
    the ids [Batch, steps] int32 and, with `eos` [1], the number of steps run: it stops once
    every row has chosen eos, and a row's ids after its eos (and every column after the stop)
    are eos."""
    tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
    start = int(np.asarray(start).reshape(-1)[0])
    stop = None if eos is None else int(np.asarray(eos).reshape(-1)[0])
    sampling = () if key is None else (np.asarray(key, dtype=np.int64).reshape(2),
                                       np.float32(np.asarray(temperature).reshape(-1)[0]))
    ids = np.full((tokens.shape[0], steps), 0 if stop is None else stop, dtype=np.int32)
    done = np.zeros(tokens.shape[0], dtype=bool)
    count = 0
    for i in range(steps):
        pos = start + i
        draw = (*sampling, np.int32(pos + 1)) if sampling else ()
        chosen = np.asarray(step(tokens[:, None], pos, *draw), dtype=np.int32).reshape(-1)
        if stop is not None:
            chosen = np.where(done, stop, chosen).astype(np.int32)
        ids[:, i] = chosen
        count = i + 1
        tokens = chosen
        if stop is not None:
            done |= chosen == stop
            if done.all():
                break
    return ids if stop is None else (ids, np.asarray(count, dtype=np.int32))
