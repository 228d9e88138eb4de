"""`strata serve`'s flags: refused in one line, exit 1, before anything is compiled."""

from __future__ import annotations

import socket

from support import run_tool


def test_a_taken_port_and_bad_flags_are_one_line(text_model, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        taken = run_tool("serve", str(text_model), "--port", str(port), "--cache-dir", str(tmp_path / "c"))
    assert taken.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    pages = run_tool("serve", str(text_model), "--ctx", "60", "--port", "0", "--cache-dir", str(tmp_path / "c"))
    assert pages.returncode == 1 and "not a whole number of KV pages of 16" in pages.stderr
    epu = run_tool("serve", str(text_model), "--target", "epu", "--port", "0")
    assert epu.returncode == 1 and "runs on --target cpu, --target cuda: the epu target" in epu.stderr
    timeout = run_tool("serve", str(text_model), "--read-timeout", "0", "--port", "0",
                       "--cache-dir", str(tmp_path / "c"))
    assert timeout.returncode == 1 and "--read-timeout must be above 0, got 0.0" in timeout.stderr
    for r in (taken, pages, epu, timeout):
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "c").exists()  # nothing compiled
