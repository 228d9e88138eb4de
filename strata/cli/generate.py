"""`strata generate MODEL --prompt TEXT`: the reply streamed as text (timing on standard error),
through the model's tokenizer, its chat template (`--chat`) and the program's sampler; with
`--prompt-ids` it prints `ids=...` last, as `strata run`."""

from __future__ import annotations

import argparse

from strata.cli.args import (
    add_allow_nonfinite,
    add_chat_prompt,
    add_model,
    add_prompt,
    add_ranks,
    add_sampling,
    add_target,
    bounded_int,
    knobs_of,
    prompt_of,
    ranks_of,
    sampling_of,
)


def add(sub) -> None:
    p = sub.add_parser("generate", help="generate text from a prompt, streamed")
    add_model(p)
    add_prompt(p)
    add_chat_prompt(p)
    p.add_argument("--max-new-tokens", type=bounded_int(0), default=64,
                   help="the most tokens to generate (default 64); it also stops at the end of a reply")
    p.add_argument("--stop", action="append", default=[], metavar="S",
                   help="stop before this text (repeatable); it is not printed")
    p.add_argument("--verbose-prompt", action="store_true",
                   help="print the prompt's token ids to standard error first")
    add_sampling(p)
    add_target(p, run=True)
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET)")
    add_allow_nonfinite(p)
    add_ranks(p)
    add_constraint(p)
    p.set_defaults(func=run)


def add_constraint(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("constrained output (one of; llguidance, the `grammar` extra)")
    c = g.add_mutually_exclusive_group()
    c.add_argument("--json-schema", metavar="FILE", help="the reply is JSON valid against this JSON schema file")
    c.add_argument("--grammar", metavar="FILE", help="the reply follows this GBNF grammar file (llama.cpp's)")
    c.add_argument("--regex", metavar="RE", help="the reply matches this regular expression")


def constraint_of(args: argparse.Namespace):
    """The `ConstraintSpec` the flags give (None: none); a file that cannot be read: one line naming it."""
    from strata.errors import StrataError
    from strata.runtime.constrain import ConstraintSpec

    if args.regex is not None:
        return ConstraintSpec("regex", args.regex)
    for flag, kind, path in (("--json-schema", "json_schema", args.json_schema), ("--grammar", "grammar", args.grammar)):
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    return ConstraintSpec(kind, f.read())
            except (OSError, UnicodeDecodeError) as e:
                raise StrataError(f"{flag} {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    return None


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.textgen import generate_text

    knobs = knobs_of(args)
    ranks_of(args, knobs)
    generate_text(args.model, prompt_of(args), args.max_new_tokens, sampling_of(args), stop=args.stop,
                  target_name=args.target, knobs=knobs, interpret=getattr(args, "interpret", False),
                  cache_dir=args.cache_dir, allow_nonfinite=args.allow_nonfinite, verbose_prompt=args.verbose_prompt,
                  constraint=_named(args))
    return 0


def _named(args: argparse.Namespace):
    """The flags' constraint, checked: a bad schema, grammar or regex names its flag (and file)."""
    from strata.runtime.constrain import ConstraintError, grammar_of

    spec = constraint_of(args)
    if spec is not None:
        flag = {"json_schema": f"--json-schema {args.json_schema}", "grammar": f"--grammar {args.grammar}",
                "regex": "--regex"}[spec.kind]
        try:
            grammar_of(spec)
        except ConstraintError as e:
            raise ConstraintError(f"{flag}: {e}") from None
    return spec
