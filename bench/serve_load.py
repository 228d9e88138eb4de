"""`strata serve` under load: does continuous batching pay on the CPU target?

    .venv/bin/python bench/serve_load.py [--cache-dir DIR] [--clients 1,8,32] [--requests 64]
                                         [--prompt 32] [--new 32] [--tiny]

The server runs a Qwen3-0.6B-shaped model (bench/cpu_decode.py's, random fp32 weights; the
default 512-token BPE beside it, since the bench sends token ids and only needs a tokenizer to
start) on the cpu target, in its own process, with --max-num-seqs the largest client count.
The clients run in another process: for each count N, N threads send --requests streamed
greedy /v1/completions requests in all (prompts of --prompt random ids, up to --new tokens
each; the tokens counted are those streamed, should a reply end early).
Each count is run --reps times, alternating, and the best throughput counts (the machine's
vCPUs slow down at random for seconds). It prints, per count, output tokens/s and p50/p99 of
time to first token and inter-token latency, the server's RSS after warm-up and after the load;
the last line is the ratio to 1 client:

    serve_ratio_8=<tok/s at 8 / tok/s at 1> serve_ratio_32=<tok/s at 32 / tok/s at 1>

`--tiny` serves a 2-layer model instead (a quick check of the bench itself). llama.cpp's
llama-server on the same model is not run here yet (it needs a GGUF of this random model).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _model(cache: Path, tiny: bool) -> Path:
    from strata.models.default_vocab import DATA_DIR, FILES

    if tiny:
        from strata.models import save_random_checkpoint
        from strata.models.llama_config import LlamaConfig

        d = cache / "serve-tiny"
        if not (d / "config.json").is_file():
            cfg = LlamaConfig(arch="LlamaForCausalLM", name="serve-tiny", vocab_size=512, hidden_size=64,
                              num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128,
                              rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None, max_position_embeddings=512,
                              tie_word_embeddings=False, attention_bias=False, o_bias=False, qk_norm=False,
                              dtype="float32")
            save_random_checkpoint(cfg, d, seed=0, dtype="float32", std=0.3)
    else:
        from cpu_decode import ensure_model

        d = ensure_model(cache)
    for name in FILES:
        if not (d / name).is_file():
            shutil.copyfile(DATA_DIR / name, d / name)
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def client_main(url: str, clients: int, requests: int, prompt: int, new: int, vocab: int) -> None:
    """One load run: prints a JSON line of the measurements."""
    import httpx2

    rng = np.random.default_rng(clients)
    prompts = [[int(t) for t in rng.integers(0, vocab, prompt)] for _ in range(requests)]
    ttft: list[float] = []
    itl: list[float] = []
    tokens = [0]
    failures: list[str] = []
    lock = threading.Lock()
    todo = iter(range(requests))

    def worker():
        with httpx2.Client(timeout=600) as c:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                body = {"prompt": prompts[i], "max_tokens": new, "temperature": 0, "stream": True}
                t0 = last = time.perf_counter()
                first = True
                with c.stream("POST", url + "/v1/completions", json=body) as r:
                    if r.status_code != 200:
                        failures.append(f"{r.status_code}")
                        continue
                    for line in r.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        if json.loads(line[6:])["choices"][0]["finish_reason"] is not None:
                            continue
                        now = time.perf_counter()
                        with lock:
                            (ttft if first else itl).append(now - (t0 if first else last))
                            tokens[0] += 1
                        first, last = False, now

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(json.dumps({"clients": clients, "tok_s": tokens[0] / wall, "tokens": tokens[0], "wall": wall,
                      "ttft_p50": _percentile(ttft, 50), "ttft_p99": _percentile(ttft, 99),
                      "itl_p50": _percentile(itl, 50), "itl_p99": _percentile(itl, 99), "failures": failures}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", type=Path, default=HERE / ".cache")
    p.add_argument("--clients", default="1,8,32")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--client", nargs=6, metavar=("URL", "N", "REQUESTS", "PROMPT", "NEW", "VOCAB"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.client:
        url, *nums = args.client
        client_main(url, *(int(x) for x in nums))
        return
    counts = [int(c) for c in args.clients.split(",")]
    model = _model(args.cache_dir, args.tiny)
    port = _free_port()
    ctx = 256
    server = subprocess.Popen([sys.executable, "-m", "strata.cli", "serve", str(model), "--port", str(port),
                               "--ctx", str(ctx), "--max-num-seqs", str(max(counts)),
                               "--max-num-batched-tokens", "512", "--max-waiting", "1024"],
                              stderr=subprocess.PIPE, text=True, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx2

        deadline = time.monotonic() + 1800
        while True:
            if server.poll() is not None:
                raise SystemExit(f"strata serve exited {server.returncode}: {server.stderr.read()}")
            try:
                if httpx2.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.5)
            if time.monotonic() > deadline:
                raise SystemExit("strata serve did not come up")
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()  # keep the pipe drained
        vocab = 512
        best: dict[int, dict] = {}
        subprocess.run([sys.executable, __file__, "--client", url, "1", "2", str(args.prompt), "4", str(vocab)],
                       check=True, capture_output=True)  # warm-up
        rss_warm = _rss_mib(server.pid)
        for _ in range(args.reps):
            for n in counts:  # alternating counts: each meets the same slow spells
                out = subprocess.run([sys.executable, __file__, "--client", url, str(n), str(args.requests),
                                      str(args.prompt), str(args.new), str(vocab)],
                                     check=True, capture_output=True, text=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if r["failures"]:
                    raise SystemExit(f"{n} clients: {len(r['failures'])} requests failed: {r['failures'][:5]}")
                if n not in best or r["tok_s"] > best[n]["tok_s"]:
                    best[n] = r
        for n in counts:
            r = best[n]
            print(f"clients={n:3d}  {r['tok_s']:8.1f} output tok/s  TTFT p50 {r['ttft_p50'] * 1e3:7.1f} ms "
                  f"p99 {r['ttft_p99'] * 1e3:7.1f} ms  ITL p50 {r['itl_p50'] * 1e3:6.1f} ms p99 {r['itl_p99'] * 1e3:6.1f} ms")
        rss = _rss_mib(server.pid)
        print(f"server RSS {rss_warm:.0f} MiB after warm-up, {rss:.0f} MiB after the load "
              f"({(rss / rss_warm - 1) * 100:+.1f}%)")
        base = best[counts[0]]["tok_s"] if counts[0] == 1 else float("nan")
        print(" ".join(f"serve_ratio_{n}={best[n]['tok_s'] / base:.2f}" for n in counts if n != 1))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
