"""`strata chat` in a pseudo-terminal, typed as a person types: replies stream after the prompt,
the history goes through the template turn by turn, /reset and /exit work, Ctrl-C mid-reply
returns to the prompt (the session goes on), Ctrl-D ends it; a model without a tokenizer is
one line."""

from __future__ import annotations

import sys
import time

import pexpect

from support import ROOT, run_tool, tiny, write_checkpoint

TIMEOUT = 120


def _spawn(model, tmp_path, *flags, **env):
    args = ["-m", "strata.cli", "chat", str(model), "--ctx", "128", "--cache-dir", str(tmp_path / "cache"), *flags]
    child = pexpect.spawn(sys.executable, args, cwd=str(ROOT), encoding="utf-8", timeout=TIMEOUT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TERM": "dumb", **env},
                          dimensions=(40, 200))
    child.expect_exact("/reset starts over")
    child.expect_exact("> ")
    return child


def _reply(child) -> str:
    child.expect_exact("\r\n> ")
    return child.before


def test_a_scripted_session(text_model, tmp_path):
    child = _spawn(text_model, tmp_path, "--max-new-tokens", "6", "--temperature", "0.8", "--seed", "4")
    try:
        child.sendline("Hello there")
        first = _reply(child)
        assert "Hello there" in first  # the typed line is echoed by the terminal, the reply follows
        child.sendline("And then?")
        second = _reply(child)
        assert "And then?" in second
        child.sendline("/reset")
        child.expect_exact("history cleared")
        child.expect_exact("> ")
        child.sendline("Hello there")
        again = _reply(child)  # a fresh history and the same seed: the first reply again
        assert again.split("Hello there", 1)[1] == first.split("Hello there", 1)[1]
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_ctrl_c_stops_the_reply_not_the_session(text_model, tmp_path):
    # in Triton's interpreter a token takes a good fraction of a second: Ctrl-C lands mid-reply
    child = _spawn(text_model, tmp_path, "--max-new-tokens", "200", "--target", "cuda", "--interpret")
    try:
        child.sendline("Tell me a long story")
        child.expect_exact("Tell me a long story")
        time.sleep(3)
        child.sendintr()
        child.expect_exact("reply stopped")
        child.expect_exact("> ")
        child.sendintr()  # at the prompt: a fresh line
        child.expect_exact("> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_a_model_without_a_tokenizer(tmp_path):
    bare = write_checkpoint(tiny("llama"), tmp_path / "bare")
    r = run_tool("chat", str(bare), "--cache-dir", str(tmp_path / "cache"), input="hi\n")
    assert r.returncode == 1 and "--prompt-ids still works" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "cache").exists()
