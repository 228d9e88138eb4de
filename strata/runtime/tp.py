"""Tensor-parallel programs: one process per rank on torch.distributed (gloo on CPUs and under
an interpreter, NCCL on GPUs: `backend_of`), behind the one runtime protocol (`strata.runtime.program`).

    program = open_model("models/tiny", "cpu", {"tp": 2}).program()   # rank 0 here; ranks 1.. spawned
    program = launch("models/tiny", tp=2)             # the same, from a path
    out = generate(program, [1, 2, 3], 16)            # the one loop: every step runs on every rank
    program.close()                                   # the followers stop and are waited for

Rank 0 owns the request (the tokenizer, the scheduler, the output): its `Leader` is a Program
whose every call (prefill, decode, reset, close) is first broadcast to the other ranks, which
`follow` it with their own program over the same group; the collectives inside the compiled
program meet across the processes. `launch_opened` starts the ranks of a model opened with a
`tp` knob above 1 (`strata run --tp N` and `strata generate --tp N` call it; `strata serve`
runs on one process); `torchrun
--nproc-per-node N -m strata.runtime.worker MODEL ...` starts the same ranks on one or more
nodes (`strata.runtime.worker`). The target is asked which backend its ranks meet on
(`Target.ranks`); one that names none takes no ranks.

A rank compiles nothing: rank 0 compiles (or reuses) the sharded program into the cache
(`MODEL/.strata-cache/TARGET-tpN`) while the others wait at a barrier, then every rank loads it
with its own pieces of the weights (the weight store reads only those).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from strata.errors import StrataError
from strata.runtime.program import Program, Step

#: How long a rank waits for the others (in a collective, at the start) before failing.
TIMEOUT_S = 300
#: The commands rank 0 broadcasts: a header [command, position, tokens], then the tokens.
CLOSE, PREFILL, DECODE, RESET, MEMORY = 0, 1, 2, 3, 4
#: The gloo group rank 0's commands travel on (CPU tensors), beside the program's own group.
_CONTROL: Any = None


class TensorParallelError(StrataError):
    """Ranks that cannot be started or that stopped."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for the ranks' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The backend of ranks on CPUs: the cpu target's, and any target's run in its interpreter.
LOCAL_BACKEND = "gloo"


def backend_of(tgt: Any, interpret: bool = False) -> str:
    """The torch.distributed backend the target's ranks meet on (a one-line error if it takes
    none): the target's own (`Target.ranks`: gloo for cpu, NCCL for cuda), except that a program
    run in an interpreter (`--interpret`: Triton's, on CPU tensors) meets on gloo, which is
    where that choice is made."""
    if tgt.ranks is None:
        raise TensorParallelError(f"--target {tgt.name} takes no tensor-parallel ranks (--tp)")
    return LOCAL_BACKEND if interpret else tgt.ranks


def _device_of_rank(backend: str, rank: int) -> None:
    """NCCL's ranks each on a GPU of their own (torchrun's LOCAL_RANK, else the rank), made the
    process's current device before the group is joined."""
    if backend != "nccl":
        return
    import torch

    count = torch.cuda.device_count()
    local = int(os.environ.get("LOCAL_RANK", rank))
    if local >= count:
        raise TensorParallelError(f"rank {rank} (local rank {local}) has no GPU of its own: this machine has {count}; "
                                  "NCCL's ranks each take one")
    torch.cuda.set_device(local)


def open_rank(opened: Any, rank: int, init_method: str, *, timeout_s: float = TIMEOUT_S) -> Program:
    """Join the group as `rank` of the opened model's `tp` ranks and open this rank's program:
    rank 0 compiles (or reuses) it first, the others wait and load what it wrote."""
    global _CONTROL
    import torch.distributed as dist

    from strata.pipeline import cached_compile

    tp = opened.ranks
    backend = backend_of(opened.target, opened.interpret)
    _device_of_rank(backend, rank)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=tp,
                            timeout=timedelta(seconds=timeout_s))
    # rank 0's commands travel as CPU tensors, on a gloo group of their own (NCCL carries only
    # device tensors); every rank makes it, in the same order
    _CONTROL = dist.new_group(backend=LOCAL_BACKEND, timeout=timedelta(seconds=timeout_s))
    cache = opened.cache()
    if rank == 0:
        from strata.errors import say

        out, rebuilt = cached_compile(opened.model, opened.target.name, cache, opened.knobs, opened.store)
        if rebuilt is not None:
            say(f"compiled {opened.model.source} for {opened.target.name} on {tp} ranks into {out}")
    dist.barrier(group=_CONTROL)
    program = opened.program(group=dist.group.WORLD, quiet=rank != 0)
    program.weights_dir = opened.model.root  # type: ignore[attr-defined]  (what resident_weight_bytes reads)
    return program


class Leader:
    """Rank 0's program: each call is broadcast to the followers, then run here."""

    def __init__(self, program: Program, followers: Sequence[subprocess.Popen] = ()):
        self.program, self.followers = program, list(followers)
        self.name, self.vocab, self.n_ctx = program.name, program.vocab, program.n_ctx
        self.runtime = f"{program.runtime}, {self.size} ranks"
        self.closed = False

    @property
    def size(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size()

    def _send(self, command: int, position: int = 0, tokens: Sequence[int] = ()) -> None:
        import torch
        import torch.distributed as dist

        self._check_followers()
        dist.broadcast(torch.tensor([command, position, len(tokens)], dtype=torch.int64), src=0, group=_CONTROL)
        if tokens:
            dist.broadcast(torch.tensor(list(tokens), dtype=torch.int64), src=0, group=_CONTROL)

    def _check_followers(self) -> None:
        for p in self.followers:
            if p.poll() is not None:
                raise TensorParallelError(f"rank process {p.pid} stopped (exit status {p.returncode})")

    def reset(self) -> None:
        self._send(RESET)
        self.program.reset()

    def prefill(self, tokens: Sequence[int], start: int, sampling: Any = None) -> Step:
        # rank 0 draws with its own sampler: the others follow the tokens it sends
        self._send(PREFILL, start, tokens)
        return self.program.prefill(tokens, start, sampling)

    def decode(self, token: int, pos: int, sampling: Any = None) -> Step:
        self._send(DECODE, pos, [int(token)])
        return self.program.decode(token, pos, sampling)

    def chooser(self) -> Any:
        """Rank 0's: it draws every token, the followers run the tokens it sends."""
        return self.program.chooser()

    def resident_weight_bytes(self) -> list[int]:
        """Each rank's resident weight bytes, by rank (see `resident_weight_bytes`)."""
        import torch
        import torch.distributed as dist

        self._send(MEMORY)
        mine = torch.tensor([resident_weight_bytes(self.program, self.program.weights_dir)], dtype=torch.int64)
        out = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
        dist.all_gather(out, mine, group=_CONTROL)
        return [int(t[0]) for t in out]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if all(p.poll() is None for p in self.followers):
                self._send(CLOSE)
        finally:
            self.program.close()
            _leave()  # before waiting: leaving the group is collective
            stop(self.followers)


def follow(program: Program) -> None:
    """A follower's loop: run each call rank 0 broadcasts until it closes."""
    import torch
    import torch.distributed as dist

    try:
        while True:
            header = torch.zeros(3, dtype=torch.int64)
            dist.broadcast(header, src=0, group=_CONTROL)
            command, position, n = (int(v) for v in header)
            tokens = torch.zeros(n, dtype=torch.int64)
            if n:
                dist.broadcast(tokens, src=0, group=_CONTROL)
            ids = np.asarray(tokens.numpy(), dtype=np.int32)
            if command == CLOSE:
                return
            if command == RESET:
                program.reset()
            elif command == PREFILL:
                program.prefill(ids.tolist(), position)
            elif command == DECODE:
                program.decode(int(ids[0]), position)
            elif command == MEMORY:
                out = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
                mine = resident_weight_bytes(program, program.weights_dir)  # type: ignore[attr-defined]
                dist.all_gather(out, torch.tensor([mine], dtype=torch.int64), group=_CONTROL)
            else:
                raise TensorParallelError(f"rank {dist.get_rank()}: unknown command {command} from rank 0")
    finally:
        program.close()
        _leave()


def resident_weight_bytes(program: Any, weights: str | Path) -> int:
    """The weight bytes this process holds in memory: the resident pages of its mappings of the
    checkpoint's files under `weights` (read from /proc/self/smaps: what the views of the memory
    map have touched), plus the arrays that the program's `Model` owns (the copied pieces and
    converted tensors), less its state buffers (the KV cache)."""
    root = str(Path(weights).resolve())
    mapped, current = 0, ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's first line
            current = fields[5] if len(fields) > 5 else ""
        elif fields and fields[0] == "Rss:" and current.startswith(root):
            mapped += int(fields[1]) * 1024
    model = getattr(program, "model", None)
    owned: dict[int, int] = {}
    for value in vars(model).values() if model is not None else ():
        base = value
        while isinstance(base, np.ndarray) and not isinstance(base, np.memmap) and base.base is not None:
            base = base.base
        if isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
            owned[id(base)] = base.nbytes
    state = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in getattr(model, "STATE", {}).values())
    return mapped + sum(owned.values()) - state


def _leave() -> None:
    import torch.distributed as dist

    global _CONTROL
    _CONTROL = None
    if dist.is_initialized():
        dist.destroy_process_group()


def stop(processes: Sequence[subprocess.Popen], wait_s: float = 30.0) -> None:
    """Wait for the follower processes, killing any that do not stop in time."""
    for p in processes:
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(model_path: str | Path, tp: int, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
           cache_dir: str | Path | None = None, threads: int | None = None, timeout_s: float = TIMEOUT_S) -> Leader:
    """`launch_opened` of the model at `model_path`, opened with `tp` ranks."""
    from strata.runtime.opener import open_model

    if tp < 2:
        raise TensorParallelError(f"--tp takes 2 or more ranks, got {tp}")
    opened = open_model(model_path, target_name, {**(knobs or {}), "tp": tp}, cache_dir=cache_dir)
    return launch_opened(opened, threads=threads, timeout_s=timeout_s)


def launch_opened(opened: Any, *, threads: int | None = None, timeout_s: float = TIMEOUT_S) -> Leader:
    """Start the opened model's `tp` ranks on this machine: ranks 1.. as processes of this module
    (the worker's), this process as rank 0, joined on 127.0.0.1. Returns rank 0's program, whose
    calls every rank runs; `threads`: the math threads of each rank (OMP/BLAS)."""
    tp, tgt = opened.ranks, opened.target
    if tp < 2:
        raise TensorParallelError(f"--tp takes 2 or more ranks, got {tp}")
    backend = backend_of(tgt, opened.interpret)
    if backend == "nccl":  # one GPU a rank, on this machine
        import torch

        if torch.cuda.device_count() < tp:
            raise TensorParallelError(f"--tp {tp} on --target {tgt.name}: NCCL's ranks each take a GPU and this machine "
                                      f"has {torch.cuda.device_count()} (--interpret runs them on gloo, on the CPU)")
    elif backend != LOCAL_BACKEND:
        raise TensorParallelError(f"--tp starts ranks on this machine's CPUs ({LOCAL_BACKEND}) or GPUs (nccl); "
                                  f"--target {tgt.name}'s ranks meet on {backend} and are started by torchrun "
                                  "-m strata.runtime.worker")
    model_path, target_name, knobs, cache_dir = opened.model.source, tgt.name, opened.knobs, opened.cache_dir
    init = f"tcp://127.0.0.1:{free_port()}"
    env = dict(os.environ)
    if threads is not None:
        env.update({v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    followers = [subprocess.Popen(
        [sys.executable, "-m", "strata.runtime.tp", str(model_path), "--tp", str(tp), "--rank", str(r),
         "--init-method", init, "--target", target_name, "--knobs", json.dumps(dict(knobs or {})),
         "--timeout", str(timeout_s), *(["--cache-dir", str(cache_dir)] if cache_dir is not None else []),
         *(["--interpret"] if opened.interpret else [])],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) for r in range(1, tp)]
    try:
        program = open_rank(opened, 0, init, timeout_s=timeout_s)
    except BaseException:
        for p in followers:
            p.kill()
        stop(followers)
        _leave()
        raise
    return Leader(program, followers)


# ---------------------------------------------------------------------------------------------
# One rank as a process: `python -m strata.runtime.tp` (spawned by launch) or strata.runtime.worker (torchrun)


def main(argv: list[str] | None = None) -> int:
    from strata.errors import run_tool

    p = argparse.ArgumentParser(prog="strata rank", description="one rank of a tensor-parallel program")
    p.add_argument("model", help="the model directory or GGUF file")
    p.add_argument("--tp", type=int, default=None, help="the ranks (default: torchrun's WORLD_SIZE)")
    p.add_argument("--rank", type=int, default=None, help="this process's rank (default: torchrun's RANK)")
    p.add_argument("--init-method", default=None, help="the rendezvous (default: torchrun's env://)")
    p.add_argument("--target", default="cpu", help="the target (one that takes ranks)")
    p.add_argument("--knobs", default="{}", help="the target's knobs, as JSON")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--timeout", type=float, default=None, help="seconds a rank waits for the others")
    p.add_argument("--interpret", action="store_true", help="run the target's kernels in its interpreter (gloo)")
    p.add_argument("--prompt-ids", default=None, help="rank 0: the request's ids, e.g. 1,2,3")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--dump-logits", default=None)
    args = p.parse_args(argv)
    return run_tool("strata rank", lambda: _run(args), owns_process=True)


def _run(args: argparse.Namespace) -> int:
    from strata.errors import StrataError
    from strata.runtime.opener import open_model

    tp = args.tp if args.tp is not None else int(os.environ.get("WORLD_SIZE", "0"))
    rank = args.rank if args.rank is not None else int(os.environ.get("RANK", "-1"))
    if tp < 2 or not 0 <= rank < tp:
        raise StrataError(f"strata.runtime.worker: needs --tp N >= 2 and --rank in 0..N-1 (or torchrun's "
                          f"WORLD_SIZE and RANK), got tp={tp} rank={rank}")
    try:
        knobs = json.loads(args.knobs)
    except ValueError as e:
        raise StrataError(f"strata.runtime.worker: --knobs is not JSON ({e})") from None
    # Every rank opens the model itself; rank 0 of torchrun checks the weights, the others trust it.
    opened = open_model(args.model, args.target, {**knobs, "tp": tp}, cache_dir=args.cache_dir,
                        interpret=args.interpret, check_weights=rank == 0, quiet=rank != 0)
    program = open_rank(opened, rank, args.init_method or "env://", timeout_s=args.timeout or TIMEOUT_S)
    if rank != 0:
        follow(program)
        return 0
    if args.prompt_ids is None:
        raise StrataError("strata.runtime.worker: rank 0 needs --prompt-ids")
    from strata.runtime.engine import generate_reported
    from strata.runtime.request import check_request, parse_prompt_ids

    leader = Leader(program)
    try:
        ids = check_request(parse_prompt_ids(args.prompt_ids), args.max_new_tokens, leader.vocab, leader.n_ctx)
    except BaseException:
        leader.close()
        raise
    generate_reported(leader, ids, args.max_new_tokens, args.dump_logits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
