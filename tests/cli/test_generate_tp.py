"""`strata generate --tp 2`: the reply on two ranks (gloo, two processes on this machine; rank 0
owns the tokenizer, the detokenizer, the stop strings and the sampler) is one process's, text for
text, greedy and sampled; what it cannot run is refused in one line before anything is compiled."""

from __future__ import annotations

from support import run_tool

#: Each run on two ranks imports strata and torch in both processes on a shared machine: bounded, not timed.
RUN_TIMEOUT_S = 600
PROMPT = "Once upon a time"


def _gen(model, cache, *flags):
    r = run_tool("generate", str(model), "--prompt", PROMPT, "--max-new-tokens", "8", "--ctx", "64",
                 "--cache-dir", str(cache), *flags, timeout=RUN_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    return r


def test_generate_tp2_writes_one_processs_text(text_model, tmp_path):
    sample = ("--temperature", "0.9", "--top-k", "50", "--seed", "11")
    for flags in ((), sample):
        one = _gen(text_model, tmp_path / "tp1", *flags)
        two = _gen(text_model, tmp_path / "tp2", "--tp", "2", *flags)
        assert one.stdout.strip() and two.stdout == one.stdout
        assert "(numpy, 2 ranks)" in two.stderr and "stopped: 8 new tokens" in two.stderr
    greedy = _gen(text_model, tmp_path / "tp1").stdout
    assert greedy != one.stdout  # the sampled reply is another one


def test_generate_tp2_on_the_cuda_target_in_the_interpreter(text_model, tmp_path):
    """The cuda target's ranks meet on gloo when its kernels run in Triton's interpreter."""
    flags = ("--target", "cuda", "--interpret")
    one = _gen(text_model, tmp_path / "tp1", *flags)
    two = _gen(text_model, tmp_path / "tp2", *flags, "--tp", "2")
    assert one.stdout.strip() and two.stdout == one.stdout
    assert "(Triton interpreter, 2 ranks)" in two.stderr


def test_generate_tp_refuses_what_it_does_not_run(text_model, tmp_path):
    r = run_tool("generate", str(text_model), "--prompt", PROMPT, "--tp", "2", "--ep", "3",
                 "--cache-dir", str(tmp_path / "c"), timeout=RUN_TIMEOUT_S)
    assert r.returncode == 1 and r.stderr == "strata: error: --ep is 1 or the ranks of --tp (2), got 3\n"
    r = run_tool("generate", str(text_model), "--prompt", PROMPT, "--tp", "3",
                 "--cache-dir", str(tmp_path / "c"), timeout=RUN_TIMEOUT_S)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "is not divisible by 3" in r.stderr
    assert not (tmp_path / "c").exists()
