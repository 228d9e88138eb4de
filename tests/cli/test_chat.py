"""`strata chat` in a pseudo-terminal, typed as a person types: replies stream after the prompt,
the history goes through the template turn by turn, /reset and /exit work, Ctrl-C mid-reply
returns to the prompt (the session goes on), Ctrl-D ends it; a model without a tokenizer is
one line."""

from __future__ import annotations

import json
import signal
import sys

import pexpect
import pytest

from support import ROOT, run_tool, tiny, write_checkpoint

TIMEOUT = 120


def _spawn(model, tmp_path, *flags, **env):
    args = ["-m", "strata.cli", "chat", str(model), "--ctx", "128", "--cache-dir", str(tmp_path / "cache"), *flags]
    # As from a shell: Ctrl-C's default disposition, whatever this test process inherited (a
    # signal ignored here stays ignored across exec, and Python then installs no handler for it).
    child = pexpect.spawn(sys.executable, args, cwd=str(ROOT), encoding="utf-8", timeout=TIMEOUT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TERM": "dumb", **env},
                          dimensions=(40, 200), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child.expect_exact("/reset starts over")
    child.expect_exact("> ")
    return child


def _reply(child) -> str:
    child.expect_exact("\r\n> ")
    return child.before


def _said(before: str, typed: str) -> str:
    """The reply after the terminal's echo of the typed line, its newlines as the program wrote them."""
    echo, _, reply = before.partition(typed + "\r\n")
    assert not echo.strip(), before
    return reply.replace("\r\n", "\n")


def _ok(*args) -> str:
    r = run_tool(*map(str, args))
    assert r.returncode == 0, r.stderr
    return r.stdout


def _generated(model, tmp_path, messages, flags) -> str:
    """`strata generate`'s reply to the chat template rendered on `messages`, as text."""
    f = tmp_path / "messages.json"
    f.write_text(json.dumps(messages), encoding="utf-8")
    ids = ",".join(map(str, json.loads(_ok("tokenize", model, "--messages", f))))
    out = _ok("generate", model, "--prompt-ids", ids, "--ctx", "128", "--cache-dir", tmp_path / "cache", *flags)
    return _ok("tokenize", model, "--decode", out.rpartition("ids=")[2].strip()).removesuffix("\n")


def test_a_scripted_session(text_model, tmp_path):
    flags = ["--max-new-tokens", "6", "--temperature", "0.8", "--seed", "4"]
    child = _spawn(text_model, tmp_path, *flags)
    try:
        child.sendline("Hello there")
        first = _said(_reply(child), "Hello there")  # the typed line is echoed by the terminal, the reply follows
        child.sendline("And then?")
        second = _said(_reply(child), "And then?")
        child.sendline("/reset")
        child.expect_exact("history cleared")
        child.expect_exact("> ")
        child.sendline("Hello there")
        again = _said(_reply(child), "Hello there")  # a fresh history and the same seed: the first reply again
        assert again == first
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    # The model saw the history: the second reply is the one to the whole conversation (the
    # session's seed draws at the same positions as `strata generate --seed`), and not the one to
    # the last message alone.
    history = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": first},
               {"role": "user", "content": "And then?"}]
    assert second == _generated(text_model, tmp_path, history, flags)
    assert second != _generated(text_model, tmp_path, history[2:], flags)


def test_ctrl_c_stops_the_reply_not_the_session(text_model, tmp_path):
    # in Triton's interpreter a token takes a good fraction of a second: Ctrl-C lands mid-reply
    child = _spawn(text_model, tmp_path, "--max-new-tokens", "200", "--target", "cuda", "--interpret")
    try:
        for _ in range(4):
            child.sendline("Tell me a long story")
            child.expect_exact("Tell me a long story\r\n")
            child.expect(".")  # the reply's first character: it is being written
            # A busy machine may let the whole reply arrive before this process looks: then the
            # interrupt lands at the prompt (a fresh line) and the test asks again.
            finished = "\r\n> " in child.buffer
            child.sendintr()
            if not finished:
                break
            child.expect_exact("> ")
        else:
            pytest.fail("every reply ended before it could be interrupted")
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
