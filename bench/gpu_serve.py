"""`strata serve` throughput at a few client counts, for `bench/gpu_check.sh`.

    python bench/gpu_serve.py MODEL [--target cuda] [--interpret] [--clients 1,64] [--prompt 128]
                              [--new 64] [--json FILE]

Starts `strata serve MODEL --target T` on 127.0.0.1 (a free port; --max-num-seqs the largest
client count) and, for each count N, runs bench/serve_load.py's load client (N threads sending
streamed greedy /v1/completions of --prompt random ids, up to --new tokens each; max(N, 4)
requests in all) and records output tokens/s and time to first token. The server is stopped
at the end (SIGTERM, then killed). A server that exits before it is healthy, a client that
fails or a run past its timeout is recorded as that count's one-line error: the table says it.

On the cuda target the server's scheduler steps its `step_paged` entry (Triton kernels,
attention through each row's page table).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOAD_CLIENT = HERE / "serve_load.py"


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _vocab(model: Path) -> int:
    return int(json.loads((model / "config.json").read_text())["vocab_size"])


def _wait_healthy(server: subprocess.Popen, url: str, tail: deque, deadline: float) -> str | None:
    """None once /health answers 200; else why not (one line)."""
    import httpx2

    while True:
        if server.poll() is not None:
            return f"strata serve exited {server.returncode}: {tail[-1] if tail else '(no output)'}"
        try:
            if httpx2.get(url + "/health", timeout=1).status_code == 200:
                return None
        except httpx2.HTTPError:
            pass
        if time.monotonic() > deadline:
            return "strata serve did not answer /health in time"
        time.sleep(0.5)


def _load(url: str, clients: int, prompt: int, new: int, vocab: int, timeout: float) -> dict:
    requests = max(clients, 4)
    try:
        out = subprocess.run([sys.executable, str(LOAD_CLIENT), "--client", url, str(clients), str(requests),
                              str(prompt), str(new), str(vocab)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"clients": clients, "error": f"the load did not finish in {timeout:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"clients": clients, "error": f"the load client failed: {last[:200]}"}
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["failures"]:
        return {"clients": clients, "error": f"{len(r['failures'])} of {requests} requests failed: {r['failures'][:3]}"}
    return {"clients": clients, "requests": requests, "tok_s": r["tok_s"], "tokens": r["tokens"],
            "ttft_p50_ms": r["ttft_p50"] * 1e3, "itl_p50_ms": r["itl_p50"] * 1e3}


def serve_bench(model: Path, target: str, interpret: bool, counts: list[int], prompt: int, new: int,
                start_timeout: float, timeout: float, extra: list[str]) -> dict:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    ctx = 1 << max(8, (prompt + new).bit_length())
    with tempfile.TemporaryDirectory(prefix="gpu-serve-") as cache:
        cmd = [sys.executable, "-m", "strata.cli", "serve", str(model), "--target", target, "--port", str(port),
               "--ctx", str(ctx), "--max-num-seqs", str(max(counts)), "--max-waiting", "1024", "--cache-dir", cache,
               *(["--interpret"] if interpret else []), *extra]
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=dict(os.environ))
        tail: deque = deque(maxlen=20)
        threading.Thread(target=lambda: [tail.append(ln.rstrip()) for ln in server.stderr], daemon=True).start()
        report: dict = {"target": target, "command": " ".join(cmd[2:]), "runs": []}
        try:
            t0 = time.monotonic()
            problem = _wait_healthy(server, url, tail, t0 + start_timeout)
            report["startup_s"] = time.monotonic() - t0
            if problem is not None:
                report["error"] = problem
                return report
            vocab = _vocab(model)
            _load(url, 1, min(prompt, 8), 2, vocab, timeout)  # warm-up: the kernels' compile
            for n in counts:
                report["runs"].append(_load(url, n, prompt, new, vocab, timeout))
            return report
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_serve.py", description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path)
    p.add_argument("--target", default="cuda")
    p.add_argument("--interpret", action="store_true", help="--target cuda in Triton's interpreter")
    p.add_argument("--clients", default="1,64")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--start-timeout", type=float, default=300.0, help="seconds for the server to answer /health")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for each count's load (and the warm-up's)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a knob passed to strata serve")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    if not counts or min(counts) < 1:
        p.error("--clients: comma-separated counts >= 1")
    extra = [a for kv in args.set for a in ("--set", kv)]
    report = serve_bench(args.model, args.target, args.interpret, counts, args.prompt, args.new, args.start_timeout,
                         args.timeout, extra)
    if "error" in report:
        print(f"serve --target {args.target}: {report['error']}")
    for r in report["runs"]:
        print(f"serve --target {args.target}, {r['clients']} clients: "
              + (r["error"] if "error" in r else f"{r['tok_s']:.1f} output tok/s, TTFT p50 {r['ttft_p50_ms']:.0f} ms"))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
