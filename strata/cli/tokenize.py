"""`strata tokenize MODEL --prompt TEXT | --file F | --decode IDS | --messages FILE.json`: a
tokenizer alone (no weights needed): ids on one line as llama-tokenize prints them, the text of
ids, or a chat template rendered on a message list (its ids, or `--text`)."""

from __future__ import annotations

import argparse
import sys

from strata.cli.args import add_model


def add(sub) -> None:
    p = sub.add_parser("tokenize", help="the ids of a text, the text of ids, a chat template rendered")
    add_model(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", metavar="TEXT", help="the text to tokenize")
    what.add_argument("--file", metavar="F", help="tokenize this file's text, byte for byte")
    what.add_argument("--decode", metavar="IDS", help="print the text of these comma-separated ids")
    what.add_argument("--messages", metavar="FILE.json",
                      help="render the chat template on this list of messages ({role, content} objects)")
    p.add_argument("--no-bos", action="store_true", help="do not add the BOS (or what else the tokenizer adds)")
    p.add_argument("--no-parse-special", action="store_true",
                   help="tokenize special tokens written in the text as plain text")
    p.add_argument("--template", metavar="F.jinja", default=None, help="with --messages: this template instead")
    p.add_argument("--template-kwargs", metavar="JSON", default=None,
                   help="with --messages: the template's extra variables, e.g. '{\"enable_thinking\": false}'")
    p.add_argument("--no-generation-prompt", action="store_true",
                   help="with --messages: no assistant turn opened at the end")
    p.add_argument("--text", action="store_true", help="with --messages: print the rendered text, not its ids")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from strata.errors import StrataError
    from strata.runtime.commands import tokenize as tokens
    from strata.runtime.request import parse_prompt_ids

    options = {"--template": args.template, "--template-kwargs": args.template_kwargs,
               "--no-generation-prompt": args.no_generation_prompt, "--text": args.text}
    if args.messages is None:
        given = [flag for flag, value in options.items() if value]
        if given:
            raise StrataError(f"{', '.join(given)} apply to --messages")
    if args.decode is not None and (args.no_bos or args.no_parse_special):
        raise StrataError("--no-bos and --no-parse-special apply to tokenizing a text, not to --decode")
    if args.decode is not None:
        text = tokens.detokenize(args.model, parse_prompt_ids(args.decode, "--decode"))
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    elif args.messages is not None:
        out = tokens.render_messages(args.model, args.messages, template_file=args.template,
                                     template_kwargs=tokens.template_kwargs_of(args.template_kwargs),
                                     generation_prompt=not args.no_generation_prompt, text=args.text)
        sys.stdout.write(out if args.text else out + "\n")
    else:
        text = tokens.read_text_file(args.file) if args.file is not None else args.prompt
        print(tokens.tokenize(args.model, text, add_special=not args.no_bos, parse_special=not args.no_parse_special))
    return 0
