"""The argument types and groups that several `strata` commands share."""

from __future__ import annotations

import argparse

#: The largest --ctx / --tokens / --start the IR can describe (it keeps int64 products safe).
MAX_INT = 2**31 - 1

#: The flags of `add_lowering` and `add_blueprint`, for `refuse_unused`.
LOWERING_FLAGS = ("--entry", "--tokens", "--start", "--ctx", "--kv-pad", "--no-flash-attn")
BLUEPRINT_FLAGS = ("--mode", "--rows", "--recipe", "--kv")

MODEL_HELP = ("the model: a directory holding an HF config.json and its safetensors (or the config.json itself), "
              "or a llama.cpp GGUF file")


def bounded_int(low: int, high: int = MAX_INT):
    """An argparse type: an integer in [low, high], with a message that names the limits."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer") from None
        if not low <= value <= high:
            shown = text if len(text) <= 30 else text[:27] + "..."
            raise argparse.ArgumentTypeError(f"{shown} is not in [{low}, {high}]")
        return value

    parse.__name__ = "integer"
    return parse


def refuse_unused(args: argparse.Namespace, when: str, *flags: str) -> None:
    """Refuse each of `flags` given a value other than its default: the command ignores it `when`
    (as "with --level module"), and a flag that is silently ignored is a wrong answer."""
    from strata.errors import StrataError

    parser = args.command_parser
    for flag in flags:
        dest = next(a.dest for a in parser._actions if flag in a.option_strings)  # noqa: SLF001 - argparse's table
        if getattr(args, dest) != parser.get_default(dest):
            raise StrataError(f"{flag} does not apply {when}")


def add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)


def add_lowering(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entry", choices=["prefill", "decode"], default="prefill", help="the entry to lower (default prefill)")
    p.add_argument("--tokens", type=bounded_int(0), default=None,
                   help="tokens to prefill (default 5; 0: dynamic); decode takes 1")
    p.add_argument("--start", type=bounded_int(-1), default=0, help="position of the first token (-1: unknown)")
    p.add_argument("--ctx", type=bounded_int(0), default=0, help="context size in tokens (default: the model's MaxSeq)")
    p.add_argument("--kv-pad", type=bounded_int(1), default=256, help="round the visible KV rows up to this")
    p.add_argument("--no-flash-attn", action="store_true", help="unfused MUL_MAT/SOFT_MAX attention")


def lowering_of(args: argparse.Namespace):
    """The `Lowering` that --entry/--tokens/--start/--ctx/--kv-pad/--no-flash-attn ask for."""
    from strata.pipeline.views import Lowering

    return Lowering(args.entry, args.tokens, args.start, args.ctx, args.kv_pad, not args.no_flash_attn)


def add_blueprint(p: argparse.ArgumentParser) -> None:
    from strata.passes.blueprint_assign_precision import recipe_names
    from strata.passes.pipelines import BLUEPRINT_MODES

    p.add_argument("--mode", choices=BLUEPRINT_MODES, default="decode", help="the blueprint's mode (default decode)")
    p.add_argument("--rows", type=bounded_int(1), default=1,
                   help="rows per call (decode/multi_seq/verify: sequences or tokens; prefill: tokens; default 1)")
    p.add_argument("--recipe", choices=recipe_names(), default="fp8-bf16head",
                   help="the precision recipe (default fp8-bf16head)")
    p.add_argument("--kv", choices=["paged", "contiguous"], default="paged", help="the KV cache layout (default paged)")
    p.add_argument("--tp", type=bounded_int(1), default=1,
                   help="one rank's blueprint of this many tensor-parallel ranks, with its collectives and what "
                        "each rank sends (default 1)")
    p.add_argument("--ep", type=bounded_int(1), default=1,
                   help="with --tp: 1 (each expert split over the ranks, the default) or the ranks (whole experts "
                        "per rank)")


def blueprint_of(args: argparse.Namespace):
    """The `Blueprint` that --mode/--rows/--recipe/--kv/--tp/--ep ask for."""
    from strata.errors import StrataError
    from strata.pipeline.views import Blueprint

    if args.ep not in (1, args.tp):
        raise StrataError(f"--ep is 1 or the ranks of --tp ({args.tp}), got {args.ep}")
    return Blueprint(args.mode, args.rows, args.recipe, args.kv, args.tp, args.ep)


def add_allow_nonfinite(p: argparse.ArgumentParser) -> None:
    """--allow-nonfinite of the commands that open a model (its weights are checked for NaN first)."""
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="run even if a weight holds NaN or infinity (warns instead of refusing)")


def add_ranks(p: argparse.ArgumentParser) -> None:
    """--tp and --ep of the commands that run a model (`ranks_of` reads them)."""
    p.add_argument("--tp", type=bounded_int(1), default=1,
                   help="run on this many ranks, one process each, tensor-parallel on torch.distributed "
                        "(--target cpu, and cuda with --interpret: gloo on this machine; --target cuda: NCCL, a GPU "
                        "a rank; default 1)")
    p.add_argument("--ep", type=bounded_int(1), default=1,
                   help="expert parallelism: 1 (each expert split over the --tp ranks, the default) or the ranks "
                        "(whole experts per rank)")


def ranks_of(args: argparse.Namespace, knobs: dict) -> None:
    """--tp and --ep into `knobs` (a program on more than one rank is launched by the runtime)."""
    from strata.errors import StrataError

    if args.ep not in (1, args.tp):
        raise StrataError(f"--ep is 1 or the ranks of --tp ({args.tp}), got {args.ep}")
    if args.ep > 1:
        knobs["ep"] = args.ep
    if args.tp > 1:
        knobs["tp"] = args.tp


def add_threads(p: argparse.ArgumentParser) -> None:
    """-t/--threads: the cpu target's native kernels' thread pool (one for the life of the program)."""
    p.add_argument("-t", "--threads", type=bounded_int(1, 1024), default=None,
                   help="threads of the cpu target's native kernels (default: the cores this process may use)")


def apply_threads(args: argparse.Namespace) -> None:
    """Put -t/--threads where every program this process (and the ranks it starts) loads reads it."""
    import os

    if getattr(args, "threads", None) is not None:
        os.environ["STRATA_THREADS"] = str(args.threads)


def add_target(p: argparse.ArgumentParser, run: bool) -> None:
    """--target and the knobs of the targets (their flags refuse a target they do not apply to)."""
    from strata.passes.blueprint_assign_precision import recipe_names
    from strata.targets import TARGETS

    p.add_argument("--target", choices=sorted(TARGETS), default="cpu", help="what to compile for (default cpu)")
    p.add_argument("--ctx", type=bounded_int(1), default=None,
                   help="context size in tokens: the KV cache holds this many "
                        "(default: min(max_position_embeddings, 4096); epu: 256)")
    p.add_argument("--no-flash-attn", action="store_true", help="--target cpu: unfused MUL_MAT/SOFT_MAX attention")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="a knob of the target (cpu: kv_pad, kv_type (f16: llama.cpp's KV cache), kernels (native or "
                        "numpy), host (native: decode in one C++ call, or python), entries "
                        "(comma-separated or all) and the module level's generics Batch, MaxSeq, PageSize, Rows, Pages, M, "
                        "S, P, Steps, MaxNew; cuda: kv, sample (device or host), tp, ep; epu: alpha, headroom, block, "
                        "calib_prompts, calib_len, calib_seed; all: ctx)")
    p.add_argument("--recipe", choices=recipe_names(), default=None,
                   help="--target cuda: the precision recipe (default bf16; f32 with --interpret; gguf: a GGUF's "
                        "block types kept packed)")
    if run:
        add_threads(p)
        p.add_argument("--interpret", action="store_true",
                       help="--target cuda: run the generated kernels in Triton's interpreter on the CPU "
                            "(TRITON_INTERPRET=1), every edge in f32")
    else:
        p.add_argument("--aot", metavar="ARCH", choices=["sm_90a"], default=None,
                       help="--target cuda: also compile every kernel of the model for ARCH (sm_90a) into OUT/aot "
                            "and report registers, shared memory and spills")
        p.add_argument("--allow-spills", action="store_true", help="with --aot: report spills without failing")


def knobs_of(args: argparse.Namespace) -> dict:
    """The target's knobs from its flags and --set (each flag refused where it does not apply)."""
    from strata.errors import StrataError
    from strata.pipeline.compile import parse_settings
    from strata.targets import TARGETS, target

    name = args.target
    tgt = target(name)
    # Each target-specific flag, and what a target that takes it can do (never its name).
    takes = {"--recipe": lambda t: "recipe" in t.knobs, "--interpret": lambda t: t.interprets,
             "--aot": lambda t: bool(t.aot_archs), "--allow-spills": lambda t: bool(t.aot_archs),
             "--no-flash-attn": lambda t: "flash_attn" in t.knobs}
    for flag, given in (("--recipe", args.recipe), ("--interpret", getattr(args, "interpret", False)),
                        ("--aot", getattr(args, "aot", None)), ("--allow-spills", getattr(args, "allow_spills", False)),
                        ("--no-flash-attn", args.no_flash_attn)):
        if given and not takes[flag](tgt):
            owners = " or ".join(f"--target {n}" for n in TARGETS if takes[flag](target(n)))
            raise StrataError(f"{flag} applies to {owners}, not --target {name}")
    knobs = parse_settings(args.set, {k: v for k, v in tgt.knobs.items() if k not in ("recipe", "flash_attn")},
                           f"target '{name}'")
    if args.ctx is not None or "ctx" not in knobs:
        knobs["ctx"] = args.ctx if args.ctx is not None else knobs.get("ctx")
    if "flash_attn" in tgt.knobs:
        knobs["flash_attn"] = not args.no_flash_attn
    if "recipe" in tgt.knobs:  # under an interpreter, exact f32 unless a recipe is given
        knobs["recipe"] = args.recipe or ("f32" if getattr(args, "interpret", False) else None)
    return knobs


def add_prompt(p: argparse.ArgumentParser) -> None:
    """--prompt TEXT or --prompt-ids IDS (one of them)."""
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--prompt", metavar="TEXT", help="the prompt, encoded by the model's tokenizer")
    g.add_argument("--prompt-ids", metavar="IDS", help="the prompt as comma-separated token ids, e.g. 1,2,3")


def add_chat_prompt(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chat", action="store_true", help="send the prompt as a user message through the chat template")
    p.add_argument("--system", metavar="TEXT", default=None, help="with --chat: a system message before it")
    add_chat_template(p)


def add_chat_template(p: argparse.ArgumentParser) -> None:
    """--chat-template FILE (vLLM's spelling; llama-server's --chat-template-file too)."""
    p.add_argument("--chat-template", "--chat-template-file", metavar="FILE", default=None, dest="chat_template",
                   help="a Jinja chat template used in place of the model's own, e.g. "
                        "examples/templates/chatml-tools.jinja (tool calls for a ChatML model)")


def prompt_of(args: argparse.Namespace):
    """The prompt the flags give: a `TextPrompt` (--prompt, --chat, --system) or a list of ids."""
    from strata.errors import StrataError
    from strata.runtime.request import parse_prompt_ids
    from strata.runtime.commands.textgen import TextPrompt

    chat, system = getattr(args, "chat", False), getattr(args, "system", None)
    template_file = getattr(args, "chat_template", None)
    if args.prompt_ids is not None:
        if chat or system is not None or template_file is not None:
            raise StrataError("--chat, --system and --chat-template apply to a text --prompt, not to --prompt-ids")
        return parse_prompt_ids(args.prompt_ids)
    if system is not None and not chat:
        raise StrataError("--system needs --chat (the system message goes through the chat template)")
    if template_file is not None and not chat:
        raise StrataError("--chat-template needs --chat (the prompt goes through the template as a user message)")
    return TextPrompt(args.prompt, chat=chat, system=system, template_file=template_file)


def add_sampling(p: argparse.ArgumentParser) -> None:
    """The sampling flags (the program's compiled sampler draws with them; default greedy)."""
    g = p.add_argument_group("sampling (default: greedy, the argmax)")
    g.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="divide the logits by T before drawing; 0 (default): greedy")
    g.add_argument("--top-k", type=int, default=0, metavar="K", help="keep the K most likely tokens (0: all)")
    g.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help="keep the most likely tokens whose mass reaches P (1: all)")
    g.add_argument("--min-p", type=float, default=0.0, metavar="M",
                   help="drop tokens less likely than M times the most likely (0: none)")
    g.add_argument("--repeat-penalty", type=float, default=1.0, metavar="R",
                   help="HF's repetition penalty on the prompt's and the output's tokens (1: none)")
    g.add_argument("--presence-penalty", type=float, default=0.0, metavar="X",
                   help="subtract X from tokens already in the output (0: none)")
    g.add_argument("--frequency-penalty", type=float, default=0.0, metavar="X",
                   help="subtract X per occurrence in the output (0: none)")
    g.add_argument("--seed", type=int, default=None, metavar="S",
                   help="the sampler's seed: the same seed draws the same tokens on every target (default: random)")


def sampling_of(args: argparse.Namespace):
    """The `SamplingParams` of the sampling flags (a filter or a seed given at temperature 0 is warned about)."""
    from strata.errors import warn
    from strata.runtime.sampling import SamplingParams

    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                            repetition_penalty=args.repeat_penalty, presence_penalty=args.presence_penalty,
                            frequency_penalty=args.frequency_penalty, seed=args.seed)
    if params.temperature == 0:
        unused = [flag for flag, on in (("--top-k", params.top_k > 0), ("--top-p", params.top_p < 1),
                                        ("--min-p", params.min_p > 0), ("--seed", args.seed is not None)) if on]
        if unused:
            warn(f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} nothing at temperature 0 (greedy); "
                 "give --temperature to sample")
    return params


def add_entries_target(p: argparse.ArgumentParser) -> None:
    """--target, --interpret and --recipe of a command that runs batched entries (bench,
    perplexity): any target that compiles them."""
    from strata.passes.blueprint_assign_precision import recipe_names
    from strata.targets import TARGETS

    p.add_argument("--target", choices=sorted(TARGETS), default="cpu",
                   help="what to compile for: a target that compiles the batched entries (default cpu)")
    p.add_argument("--interpret", action="store_true",
                   help="--target cuda: run the generated kernels in Triton's interpreter on the CPU, every edge in f32")
    p.add_argument("--recipe", choices=recipe_names(), default=None,
                   help="--target cuda: the precision recipe (default bf16; f32 with --interpret)")


def entries_target_knobs(args: argparse.Namespace, owned: tuple[str, ...], whose: str) -> dict:
    """The knobs of --set for `args.target` but the command's own (`owned`), with its recipe;
    the target must compile the batched entries, and take --interpret / --recipe if given."""
    from strata.errors import StrataError
    from strata.pipeline.compile import parse_settings
    from strata.targets import target

    tgt = target(args.target)
    if not tgt.compiles_entries:
        raise StrataError(f"--target {args.target} does not compile the batched entries {whose} runs")
    if args.interpret and not tgt.interprets:
        raise StrataError(f"--interpret does not apply to --target {args.target}")
    if args.recipe and "recipe" not in tgt.knobs:
        raise StrataError(f"--recipe does not apply to --target {args.target}")
    names = ", ".join(owned[:-1]) + " and " + owned[-1] if len(owned) > 1 else owned[0]
    knobs = parse_settings(args.set, {k: v for k, v in tgt.knobs.items() if k not in owned + ("recipe",)},
                           f"target '{args.target}' ({names} {'are' if len(owned) > 1 else 'is'} {whose}'s own)")
    if "recipe" in tgt.knobs:  # under an interpreter, exact f32 unless a recipe is given
        knobs["recipe"] = args.recipe or ("f32" if args.interpret else None)
    return knobs
