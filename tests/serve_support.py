"""`strata serve` started on a free loopback port for a test, always stopped after."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

from support import ROOT

CTX = 128
API_KEY = "test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log):
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def stderr(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()


@contextlib.contextmanager
def running_server(model, tmp_path, *flags: str, timeout: float = 90.0):
    """`strata serve MODEL` on a free port until it answers /health; killed afterwards whatever happens."""
    import httpx2

    port = free_port()
    log = open(tmp_path / f"serve-{port}.log", "w+")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "strata.cli", "serve", str(model), "--ctx", str(CTX),
                             "--port", str(port), "--cache-dir", str(tmp_path / "cache"), *flags],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"strata serve exited {proc.returncode}:\n{server.stderr()}")
            try:
                if httpx2.get(server.url + "/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"strata serve did not come up in {timeout} s:\n{server.stderr()}")
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
