"""The batched and paged entries of a compiled CUDA model: the part of `model.py` that runs them
(copied after `runtime.py` and the host-input functions, its imports dropped).

    logits, = m.call("step_paged", tokens=..., positions=..., rows=..., slots=..., last=...,
                     step_tokens=..., step_positions=..., table=...)

Each entry's arguments are checked and turned into per-token facts (position, row, cache cell,
the rows it returns) by `entry_call`, the host-input code every target shares
(strata/semantics/host_inputs.py); then the call's tokens run through the generated `_tokens`
(@prefill's kernel groups, attention through each row's table of cells) in one pass, as
llama.cpp runs a batch. How a row reaches its K/V:

* paged entries (decode_paged, prefill_paged, step_paged): the call's block table over the pool
  of Batch * MaxSeq / PageSize pages;
* a cache of Batch rows of MaxSeq cells (decode_rows, prefill_packed, step_packed, and
  prefill_slots, whose prompt m is slot `slots[m]`): one page of MaxSeq cells per row;
* the call's own tokens (forward, next_token, hidden_packed, log_probs_packed, loss_packed): a
  scratch cache of one page per segment, dropped after the call.

The pool is one buffer per K/V state; the one-sequence prefill and decode use its first MaxSeq
cells (row 0), as the cpu target's share row 0 of its cache. A hybrid's recurrent state lives in
Batch slots (slot 0 the one-sequence entries'); its call runs each sequence's tokens in turn
(`_by_sequence`), the state read from the sequence's slot and written back.
"""

from __future__ import annotations

import numpy as np
import torch

from strata.semantics.host_inputs import entry_call
from strata.targets.cuda.runtime import ModelError, Runtime, launch_failure


class TokenCall:
    """What `_tokens` and its attention launches read of one call (device tensors but `runs`):
    each token's K/V cell (int64 [n], -1: not written), each row's pages (int32 [rows, pages])
    of `page` cells, each token's position (int32 [n]), the runs of the tokens (int64
    [runs, 3]: first token, length, row; kernels.token_runs), the tokens whose rows the entry
    returns (`sel`, int64), and whether it returns the final norm's rows only."""

    def __init__(self, cells, table, page: int, positions, runs, sel, hidden_only: bool = False):
        self.cells, self.table, self.page, self.positions = cells, table, page, positions
        self.runs, self.sel, self.hidden_only = runs, sel, hidden_only
        self.blocks: dict = {}  # (group, block_m) -> the attention's block list


def _returned(tokens: np.ndarray, device) -> torch.Tensor:
    """The tokens whose rows the final norm and the head compute (int64): those returned, or token
    0 when none is (a prompt chunk not at its prompt's end), since a launch of no rows is none."""
    return torch.from_numpy(np.asarray(tokens if tokens.size else [0], np.int64)).to(device)


class EntriesRuntime(Runtime):
    """A Runtime with the entries of its `LAYOUTS` (`call(entry, **arguments)`)."""

    #: entry -> its arguments: (name, shape (None: a scalar; -1: the call's size), numpy dtype)
    ARGS: dict = {}
    #: entry -> how its arguments become per-token facts (host_inputs.entry_call)
    LAYOUTS: dict = {}

    def __init__(self, weights, **options):
        super().__init__(weights, **options)
        self.kv_names = tuple(n for n in self.STATE if n not in self.RECURRENT and not n.endswith(".snapshot"))
        layout = next(iter(self.LAYOUTS.values()), None)
        cells = int(layout["Batch"]) * int(layout["MaxSeq"]) if layout is not None else 0
        self.pool = {}
        for name in self.kv_names:
            buf = self.state[name]
            if cells > buf.shape[0]:  # Batch rows: the one-sequence entries keep row 0
                pool = torch.zeros((cells, *buf.shape[1:]), dtype=buf.dtype, device=self.device)
                self.state[name] = pool[:buf.shape[0]]
                self.pool[name] = pool
            else:
                self.pool[name] = buf
        #: a hybrid's recurrent state per slot (Batch of them; the one-sequence entries keep slot 0),
        #: and the buffers one run of tokens steps (loaded from its slot, written back)
        self.slots, self.run_state = {}, {}
        slots = int(layout["Batch"]) if layout is not None else 1
        for name in self.RECURRENT:
            buf = self.state[name]
            self.slots[name] = torch.zeros((slots, *buf.shape), dtype=buf.dtype, device=self.device)
            self.state[name] = self.slots[name][0]
            self.run_state[name] = torch.zeros_like(buf)

    def reset(self) -> None:
        super().reset()
        for buf in [*self.pool.values(), *self.slots.values()]:
            buf.zero_()

    def read_slot(self, slot: int) -> dict:
        """Slot `slot`'s recurrent state (numpy, by state name); empty for a model without one."""
        return {n: buf[slot].float().cpu().numpy().copy() for n, buf in self.slots.items()}

    def write_slot(self, slot: int, state: dict) -> None:
        for n, buf in self.slots.items():
            buf[slot].copy_(torch.as_tensor(np.asarray(state[n], np.float32)).to(buf.dtype))

    def _zeros(self, rows: int, cols: int, elem: str) -> torch.Tensor:
        return torch.zeros((rows, cols), dtype=self._dt(elem), device=self.device)

    def _token_rope(self, positions: torch.Tensor) -> dict:
        """Each rope mode's positions of the call's tokens ([n], or [4, n] for M-RoPE text)."""
        out = {}
        for m in self.ROPE_MODES:
            out[m] = torch.stack([positions, positions, positions, torch.zeros_like(positions)]) \
                if m in ("mrope", "imrope") else positions
        return out

    def call(self, entry: str, **given):
        """The entry `entry` on its arguments by name: its results as numpy arrays (a tuple)."""
        if entry not in self.LAYOUTS:
            raise ModelError(f"this compiled model has no entry {entry!r} (it has: "
                             f"{', '.join(['prefill', 'decode', *self.LAYOUTS])})")
        try:
            call = entry_call(self.LAYOUTS[entry], self.ARGS[entry], given)
        except ValueError as e:
            raise ModelError(str(e)) from None
        layout = call["layout"]
        positions, label, cells = call["positions"].astype(np.int64), call["label"], call["cell"]
        buffers = self.pool
        if layout["kv"] == "paged":
            table, page = np.maximum(call["table"], 0), int(layout["PageSize"])
        elif layout["kv"] == "self" and entry != "prefill_slots":  # the call's own tokens: a page per segment
            page = max(16, 1 << int(positions.max()).bit_length())  # a power of two: few kernels to compile
            groups = int(label.max()) + 1
            table = np.arange(groups)[:, None]
            cells = np.where(label >= 0, label * page + positions, -1)
            buffers = {n: torch.zeros((groups * page, *self.pool[n].shape[1:]), dtype=self.pool[n].dtype,
                                      device=self.device) for n in self.kv_names}
        else:  # Batch rows of MaxSeq cells; prefill_slots' prompt m is the row slots[m]
            page = int(layout["MaxSeq"])
            table = call["args"]["slots"][:, None] if entry == "prefill_slots" else np.arange(layout["Batch"])[:, None]
        out = np.asarray(call["out"], np.int64)
        dev = self.device
        pos_t = torch.from_numpy(positions.astype(np.int32)).to(dev)
        a = TokenCall(torch.from_numpy(np.asarray(cells, np.int64)).to(dev),
                      torch.from_numpy(np.ascontiguousarray(table, np.int32)).to(dev), page, pos_t,
                      self.kernels.token_runs(label, positions), _returned(out[out >= 0], dev),
                      hidden_only=entry == "hidden_packed")
        ids = torch.from_numpy(call["tokens"].astype(np.int32)).reshape(-1, 1).to(dev)
        try:
            if self.RECURRENT:
                res = self._by_sequence(call, ids, a, buffers, out)
            else:
                res = self._tokens(ids, ids.shape[0], self._token_rope(pos_t), a, buffers)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001 - reported as one line; the original is the cause
            raise ModelError(launch_failure("tokens", e).replace("@tokens", f"@{entry}", 1)) from e
        return self._results(entry, call, out, res)

    def _by_sequence(self, call: dict, ids, a: TokenCall, buffers: dict, out: np.ndarray) -> dict:
        """A hybrid's call: each sequence's run of tokens in turn through `_tokens`, its recurrent
        state read from its slot (zeros for a new one) and written back (host_inputs' `seq`,
        `state_read`, `state_write`; a call of fresh sequences keeps nothing). Tokens of no
        sequence (padding, idle rows) are not run: no output row is theirs."""
        seq, positions = call["seq"], call["positions"].astype(np.int64)
        fresh = call["fresh"]
        rows = {}
        hidden = {}
        dev = self.device
        for t0, length, g in self.kernels.token_runs(seq, positions).tolist():
            read = -1 if fresh else int(call["state_read"][g])
            write = -1 if fresh else int(call["state_write"][g])
            for n, buf in self.run_state.items():
                if read >= 0:
                    buf.copy_(self.slots[n][read])
                else:
                    buf.zero_()
            mine = np.flatnonzero((out >= t0) & (out < t0 + length))
            run = TokenCall(a.cells[t0:t0 + length], a.table, a.page, a.positions[t0:t0 + length],
                            np.array([[0, length, int(call["label"][t0])]], np.int64),
                            _returned(out[mine] - t0, dev), hidden_only=a.hidden_only)
            res = self._tokens(ids[t0:t0 + length], length, self._token_rope(run.positions), run,
                               {**buffers, **self.run_state})
            for j, i in enumerate(out[mine].tolist()):  # (none: the row computed for nothing)
                hidden[i] = res["hidden"][j]
                if "logits" in res:
                    rows[i] = res["logits"][j]
            if write >= 0:
                for n, buf in self.run_state.items():
                    self.slots[n][write].copy_(buf)
        order = out[out >= 0].tolist()
        missing = [i for i in order if i not in hidden]
        if missing:
            raise ModelError(f"token {missing[0]} is returned but belongs to no sequence")
        done = {"hidden": torch.stack([hidden[i] for i in order]) if order else None}
        if not a.hidden_only:
            done["logits"] = torch.stack([rows[i] for i in order]) if order else \
                torch.zeros((0, self.VOCAB), dtype=torch.float32, device=dev)
        return done

    def _results(self, entry: str, call: dict, out: np.ndarray, res: dict) -> tuple:
        if entry == "hidden_packed":
            return (res["hidden"].float().cpu().numpy(),)
        logits = torch.zeros((out.size, self.VOCAB), dtype=torch.float32, device=self.device)
        returned = np.flatnonzero(out >= 0)
        if returned.size:  # else `_tokens` computed a row of its own for nothing (see _returned)
            logits[torch.from_numpy(returned).to(self.device)] = res["logits"][:returned.size].float()
        if entry in ("log_probs_packed", "loss_packed"):
            targets = torch.from_numpy(call["args"]["targets"].astype(np.int64)).to(self.device)
            picked = torch.log_softmax(logits.double(), dim=-1)[torch.arange(out.size, device=self.device), targets]
            if entry == "log_probs_packed":
                return (picked.float().cpu().numpy(),)
            w = torch.from_numpy(call["args"]["weights"].astype(np.float64)).to(self.device)
            return (np.float32(float(-(picked * w).sum() / w.sum())),)
        if entry == "forward":
            b, s = call["args"]["tokens"].shape
            logits = logits.reshape(b, s, -1)
        return (logits.cpu().numpy(),)
