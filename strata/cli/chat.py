"""`strata chat MODEL`: an interactive multi-turn chat through the model's chat template; `/reset`
starts over, `/exit` ends it, Ctrl-C stops the current reply (not the session)."""

from __future__ import annotations

import argparse

from strata.cli.args import (
    add_allow_nonfinite,
    add_chat_template,
    add_model,
    add_sampling,
    add_target,
    bounded_int,
    knobs_of,
    sampling_of,
)


def add(sub) -> None:
    p = sub.add_parser("chat", help="chat with a model, turn by turn, through its chat template")
    add_model(p)
    p.add_argument("--system", metavar="TEXT", default=None, help="a system message at the start of the chat")
    p.add_argument("--max-new-tokens", type=bounded_int(1), default=256,
                   help="the most tokens of one reply (default 256)")
    p.add_argument("--template-kwargs", metavar="JSON", default=None,
                   help="the chat template's extra variables, e.g. '{\"enable_thinking\": false}'")
    add_sampling(p)
    add_target(p, run=True)
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the compiled model is kept and reused (default: MODEL/.strata-cache/TARGET)")
    add_chat_template(p)
    add_allow_nonfinite(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.runtime.commands.chat import chat_session
    from strata.runtime.commands.tokenize import template_kwargs_of

    _readline()
    chat_session(args.model, sampling_of(args), system=args.system, max_new_tokens=args.max_new_tokens,
                 template_kwargs=template_kwargs_of(args.template_kwargs), target_name=args.target,
                 knobs=knobs_of(args), interpret=getattr(args, "interpret", False), cache_dir=args.cache_dir,
                 allow_nonfinite=args.allow_nonfinite, chat_template=args.chat_template)
    return 0


def _readline() -> None:
    """Line editing and history for input(), where the platform has readline."""
    try:
        import readline  # noqa: F401
    except ImportError:
        pass
