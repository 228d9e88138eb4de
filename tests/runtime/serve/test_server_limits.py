"""`strata serve` against clients that would take more than their share: a 100 MB body (413
before it is read whole, by Content-Length or counted in a chunked body), a header flood, a body
trickled slowly (408 while the others are served), a burst of 1,000 requests (429 with
Retry-After past the queue, the server's memory bounded); and the gauges routers read, under
vLLM's names, during load."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx2
import pytest

from serve_support import running_server

pytest.importorskip("fastapi")

BODY_LIMIT = 1 << 20
HUNDRED_MB = 100 * 10**6


@pytest.fixture(scope="module")
def server(serve_model, tmp_path_factory):
    with running_server(serve_model, tmp_path_factory.mktemp("limits"), "--max-body-bytes", str(BODY_LIMIT),
                        "--read-timeout", "2", "--max-num-seqs", "2", "--max-waiting", "8") as s:
        yield s


def _connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.settimeout(10)
    return sock


def _head(path: str, *lines: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + "".join(f"{line}\r\n" for line in lines) + "\r\n").encode()


def _status(sock: socket.socket) -> int:
    """The status of the response read from `sock` (10 s at most)."""
    data = b""
    while b"\r\n" not in data:
        piece = sock.recv(4096)
        if not piece:
            break
        data += piece
    assert data.startswith(b"HTTP/1.1 "), data[:200]
    return int(data.split(b" ")[1])


def _healthy(server) -> bool:
    return httpx2.get(server.url + "/health", timeout=10).status_code == 200


def test_a_100_mb_body_is_refused_before_it_is_read(server):
    # by its Content-Length: the answer comes after a few KB of the 100 MB
    with _connect(server) as sock:
        sock.sendall(_head("/v1/completions", f"Content-Length: {HUNDRED_MB}") + b'{"prompt": "' + b"a" * 65536)
        assert _status(sock) == 413

    # chunked, no length: counted as it comes; the answer comes long before the 100 MB are sent
    with _connect(server) as sock:
        sock.sendall(_head("/v1/completions", "Transfer-Encoding: chunked"))
        sent, chunk = 0, b"a" * 65536
        stop = threading.Event()

        def send():
            nonlocal sent
            try:
                while sent < HUNDRED_MB and not stop.is_set():
                    sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    sent += len(chunk)
            except OSError:  # the server closed the connection after its answer
                pass

        sender = threading.Thread(target=send)
        sender.start()
        try:
            assert _status(sock) == 413
        finally:
            stop.set()
            sender.join(30)
        assert sent < HUNDRED_MB // 4, sent
    assert _healthy(server)


def test_a_header_flood_is_refused(server):
    many = [f"X-{i}: 1" for i in range(1000)]  # about 10 KB: within the head's byte limit
    with _connect(server) as sock:
        sock.sendall(_head("/v1/completions", "Content-Length: 2", *many) + b"{}")
        assert _status(sock) == 431
    with _connect(server) as sock:  # one header larger than the head may be: h11 refuses it
        sock.sendall(_head("/v1/completions", "Content-Length: 2", "X-Big: " + "b" * 100_000) + b"{}")
        assert _status(sock) in (400, 431)
    assert _healthy(server)


def test_a_slow_sender_times_out_and_the_others_are_served(server):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}).encode()
    with _connect(server) as sock:
        sock.sendall(_head("/v1/completions", f"Content-Length: {len(body)}") + body[:3])
        stop = threading.Event()

        def trickle():  # one byte every 0.2 s: the whole body would take several seconds past the timeout
            try:
                for b in body[3:-1]:
                    if stop.wait(0.2):
                        return
                    sock.sendall(bytes([b]))
            except OSError:
                pass

        trickler = threading.Thread(target=trickle)
        trickler.start()
        try:
            started = time.monotonic()
            served = httpx2.post(server.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=30)
            assert served.status_code == 200 and time.monotonic() - started < 5
            assert _status(sock) == 408
            assert time.monotonic() - started < 8  # the whole body would take some 14 s
        finally:
            stop.set()
            trickler.join(30)
    assert _healthy(server)


def test_a_head_trickled_slowly_has_its_connection_closed(server):
    with _connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        stop = threading.Event()

        def trickle():  # a header line a byte every 0.2 s, never ending the head, for some 20 s
            try:
                for b in b"X-Slow: " + b"s" * 100:
                    if stop.wait(0.2):
                        return
                    sock.sendall(bytes([b]))
            except OSError:
                pass

        trickler = threading.Thread(target=trickle)
        trickler.start()
        started = time.monotonic()
        try:
            try:
                closed = sock.recv(4096) == b""  # the server closes it without an answer
            except ConnectionResetError:
                closed = True
            assert closed and time.monotonic() - started < 8
        finally:
            stop.set()
            trickler.join(30)
    assert _healthy(server)


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_a_burst_of_1000_gets_429_past_the_queue_with_memory_bounded(server):
    burst = 1000
    body = {"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0}
    rss_before = _rss_kb(server.proc.pid)

    async def one(client, i):
        r = await client.post("/v1/completions", json={**body, "seed": i})
        return r.status_code, r.headers.get("retry-after")

    async def all_of_them():
        limits = httpx2.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx2.AsyncClient(base_url=server.url, limits=limits, timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(burst)))

    started = time.monotonic()
    answers = asyncio.run(all_of_them())
    took = time.monotonic() - started
    codes = [c for c, _ in answers]
    assert set(codes) <= {200, 429}, sorted(set(codes))
    assert codes.count(429) > 0 and codes.count(200) > 0, (codes.count(200), codes.count(429))
    assert all(retry for c, retry in answers if c == 429)
    grown_mb = (_rss_kb(server.proc.pid) - rss_before) / 1024
    assert grown_mb < 64, grown_mb
    assert _healthy(server)
    print(f"burst of {burst}: {codes.count(200)} served, {codes.count(429)} answered 429, in {took:.1f} s; "
          f"server RSS grew {grown_mb:.1f} MB")


def _gauges(server) -> dict[str, float]:
    text = httpx2.get(server.url + "/metrics", timeout=10).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("vllm:")}


def test_vllms_router_gauges_during_load(server, serve_model):
    label = f'{{model_name="{serve_model.name}"}}'
    names = [f"vllm:{n}{label}" for n in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
                                          "gpu_cache_usage_perc")]
    idle = _gauges(server)
    for _ in range(200):  # what an earlier test of this server sent may still be draining
        if all(idle[n] == 0 for n in names):
            break
        time.sleep(0.05)
        idle = _gauges(server)
    assert all(idle[n] == 0 for n in names), idle
    results: list[int] = []
    together = threading.Barrier(6)  # all at once: 6 requests on 2 rows, so some must wait

    def request():
        together.wait(30)
        r = httpx2.post(server.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 60,
                                                              "temperature": 0}, timeout=60)
        results.append(r.status_code)

    clients = [threading.Thread(target=request) for _ in range(6)]
    for t in clients:
        t.start()
    seen: list[dict[str, float]] = []
    deadline = time.monotonic() + 30
    while any(t.is_alive() for t in clients) and time.monotonic() < deadline:
        seen.append(_gauges(server))
        time.sleep(0.02)
    for t in clients:
        t.join(60)
    assert results == [200] * 6
    busy = [g for g in seen if g[names[0]] > 0]
    assert busy, seen[:3]
    assert max(g[names[0]] for g in busy) <= 2  # the server's rows
    assert any(g[names[1]] > 0 for g in seen)  # 6 clients, 2 rows: some wait
    assert all(0 < g[names[2]] <= 1 and g[names[2]] == g[names[3]] for g in busy)
    after = _gauges(server)
    for _ in range(100):
        if after[names[0]] == 0 and after[names[2]] == 0:
            break
        time.sleep(0.05)
        after = _gauges(server)
    assert after[names[0]] == 0 and after[names[1]] == 0 and after[names[2]] == 0
