"""Opening a model, the one way every command and the server do it, each step once and in order:
the process prepared for the target, the model loaded, its weights checked for NaN and infinity,
the knobs resolved, then (when asked) the tokenizer and the program.

    opened = open_model("model.gguf", "cpu", {"ctx": 256})    # prepared, loaded, checked, knobs resolved
    opened.model, opened.target, opened.knobs
    tokenizer = opened.tokenizer()                             # fits the model's vocabulary
    program = opened.program()                                 # compiled (or reused from its cache), loaded

    program = open_program(model, "cpu", {"ctx": 64})          # a loaded model's program, in one call
    program = open_program(model, "cpu", via="onnxruntime", prompt_len=3)

A command checks what it can between the steps (the prompt against the tokenizer and the
context, a chat template, an output path) so that a bad request is refused before a compile.
The target is asked what it can do (`strata.targets.target.Target`), never named. A compiled
program is kept in a cache directory, one rule for every target: `MODEL/.strata-cache/VARIANT`
(a GGUF file: a folder of its own under it), VARIANT being the target's name (`cuda-interpret`
under an interpreter, `cpu-tp2` on two ranks), or `--cache-dir`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from strata.artifacts.stage import StageError
from strata.errors import StrataError, say
from strata.runtime.program import Program
from strata.runtime.request import RequestError, check_finite

NO_TOKENIZER_HINT = "--prompt-ids still works"


class OpenError(StrataError):
    """A model that cannot be opened as asked (a flag the target does not take)."""


def target_of(name: str, via: str | None = None, interpret: bool = False):
    """The `Target` a command runs on: `name`, or the runtime `via` names (onnxruntime: the
    model exported and run there), checked against `interpret`."""
    from strata.targets import EXPORTED, target

    if via is not None:
        if via not in EXPORTED:
            raise OpenError(f"unknown runtime {via!r} for --via (known: {', '.join(EXPORTED)})")
        name = via
    tgt = target(name)
    if interpret and not tgt.interprets:
        raise OpenError(f"--interpret applies to a target that runs an interpreter, not --target {name}")
    return tgt


def cache_dir_of(model: Any, target_name: str, interpret: bool = False, tp: int = 1, ep: int = 1) -> Path:
    """The default cache of `model`'s compiled program for a target (see the module docstring);
    a tensor-parallel one's is `TARGET-tpN` (`TARGET-tpN-epN` with whole experts per rank)."""
    variant = f"{target_name}-interpret" if interpret else target_name
    if tp > 1:
        variant += f"-tp{tp}" + (f"-ep{ep}" if ep > 1 else "")
    return model.cache_root / variant


def resolved_knobs(model: Any, target_name: str, knobs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The target's knobs with their defaults, checked against the model."""
    from strata.pipeline import resolve_knobs
    from strata.targets import target

    return resolve_knobs(target(target_name), model, dict(knobs or {}))


def model_tokenizer(model: Any):
    """The tokenizer of a loaded model: its GGUF's vocabulary, or the HF tokenizer files of its
    directory; a one-line `TokenizerError` when it has none (saying that ids still work)."""
    from strata.runtime.text import TokenizerError, load_tokenizer

    if model.gguf is not None:
        return load_tokenizer(model.gguf.path)
    root = Path(model.root)
    if not (root / "tokenizer.json").is_file():
        raise TokenizerError(f"{root}: the model has no tokenizer (no tokenizer.json, and it is not a GGUF file); "
                             f"{NO_TOKENIZER_HINT}: give token ids with --prompt-ids")
    return load_tokenizer(root)


def check_tokenizer_fits(tokenizer: Any, vocab: int) -> None:
    """Refuse a tokenizer with ids the model's vocabulary has no row for."""
    if tokenizer.vocab_size > vocab:
        raise RequestError(f"{tokenizer.source}: the tokenizer has {tokenizer.vocab_size} tokens, more than the "
                           f"model's vocabulary of {vocab}")


@dataclass
class OpenedModel:
    """A model loaded and checked for a target, its knobs resolved; the tokenizer and the
    program on demand (`open_model` makes it)."""

    model: Any
    target: Any
    knobs: dict[str, Any]
    store: Any
    interpret: bool = False
    #: Where the compiled program is kept (None: its default cache, `cache_dir_of`).
    cache_dir: Path | None = None
    _tokenizer: Any = field(default=None, repr=False)

    @property
    def vocab(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def ranks(self) -> int:
        return int(self.knobs.get("tp", 1))

    def tokenizer(self, required: bool = True) -> Any:
        """The model's tokenizer, checked against its vocabulary (loaded once); `required=False`:
        None when the model has none."""
        from strata.runtime.text import TokenizerError

        if self._tokenizer is None:
            try:
                tokenizer = model_tokenizer(self.model)
            except TokenizerError:
                if required:
                    raise
                return None
            check_tokenizer_fits(tokenizer, self.vocab)
            self._tokenizer = tokenizer
        return self._tokenizer

    def check_sampling(self, params: Any) -> None:
        """Refuse parameters that need a sampler on a target that decodes greedily, before a compile."""
        from strata.targets.target import TargetError

        if params is not None and not params.greedy and self.target.greedy_only is not None:
            raise TargetError(self.target.greedy_only)

    def cache(self) -> Path | None:
        """The directory the program is compiled into (None: the target compiles nothing)."""
        if self.target.opens is not None:
            return None
        if self.cache_dir is not None:
            return Path(self.cache_dir)
        return cache_dir_of(self.model, self.target.name, self.interpret, self.ranks, self.knobs.get("ep", 1))

    def for_program(self, knobs: Mapping[str, Any], cache_dir: str | Path | None = None) -> OpenedModel:
        """The same model for another program of it (bench's one per batch size): these knobs
        resolved for it, kept in `cache_dir`."""
        from strata.pipeline import resolve_knobs

        return replace(self, knobs=resolve_knobs(self.target, self.model, dict(knobs)),
                       cache_dir=Path(cache_dir) if cache_dir is not None else self.cache_dir)

    def program(self, *, prompt_len: int | None = None, need_decode: bool = True, group: Any = None,
                quiet: bool = False) -> Program:
        """The program, compiled into its cache (reused while it matches) and loaded; an
        exported target's (onnxruntime) exported for `prompt_len` tokens (`need_decode=False`:
        no decode). `group`: the process group of one rank of a program on `ranks` processes
        (`strata.runtime.tp.launch_opened` starts them and passes it); `quiet`: no messages (a
        follower rank's)."""
        if self.ranks > 1 and group is None:
            raise OpenError(f"a program on {self.ranks} ranks is started by strata.runtime.tp.launch_opened")
        if self.target.opens is not None:
            if prompt_len is None:
                raise OpenError(f"{self.target.name} runs an exported prefill of a fixed length: give prompt_len")
            t0 = time.perf_counter()
            program = self.target.opens(self.model, self.store, self.knobs, prompt_len, decode=need_decode)
            say(f"exported {self.model.source} to ONNX and loaded it in {self.target.name} in "
                f"{time.perf_counter() - t0:.2f} s")
            return program
        return self._compiled(group, quiet)

    def _compiled(self, group: Any, quiet: bool) -> Program:
        from strata.pipeline import cached_compile

        tgt, knobs = self.target, self.knobs
        default_cache = self.cache_dir is None
        cache = self.cache()
        t0 = time.perf_counter()
        try:
            out, rebuilt = cached_compile(self.model, tgt.name, cache, knobs, self.store)
        except StageError as e:
            hint = "; pass --cache-dir DIR to keep the compiled model elsewhere" if default_cache else ""
            raise StageError(f"{e}{hint}") from None
        recipe = f" ({knobs['recipe']})" if knobs.get("recipe") else ""
        if quiet:
            pass
        elif rebuilt is None:
            say(f"reusing the compiled model in {out}")
        else:
            why = f" (rebuilt: {rebuilt})" if rebuilt != "there was none" else ""
            say(f"compiled {self.model.source} for {tgt.name}{recipe} into {out} in "
                f"{time.perf_counter() - t0:.2f} s{why}")
        options: dict[str, Any] = {"interpret": self.interpret} if tgt.interprets else {}
        if group is not None:
            options["group"] = group
        t0 = time.perf_counter()
        program = tgt.load(out, self.store, **options)
        if tgt.prepares_weights and not quiet:
            say(f"weights prepared{recipe} in {time.perf_counter() - t0:.2f} s")
        return program


def open_model(model: str | Path | Any, target_name: str = "cpu",
               knobs: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None, *,
               via: str | None = None, interpret: bool = False, cache_dir: str | Path | None = None,
               allow_nonfinite: bool = False, store: Any = None, check_weights: bool = True,
               quiet: bool = False) -> OpenedModel:
    """Prepare the process for the target, load the model (a path, or a model already loaded),
    check its weights for NaN and infinity (`allow_nonfinite`: warn instead), and resolve the
    knobs once (`knobs`: a mapping, or a function of the loaded model giving one, for a command
    whose knobs depend on it). `via`: the runtime the model is exported to instead (onnxruntime).
    `check_weights=False`: a follower rank, whose rank 0 checked them."""
    from strata.pipeline import load_model, resolve_knobs

    tgt = target_of(target_name, via, interpret)
    if tgt.prepare is not None:
        tgt.prepare(interpret)
    if isinstance(model, (str, Path)):
        model = load_model(model)
    store = store if store is not None else model.open_weights(quiet=quiet)
    if check_weights:
        check_finite(store, list(model.params()), allow_nonfinite)
    given = knobs(model) if callable(knobs) else knobs
    resolved = resolve_knobs(tgt, model, dict(given or {}))
    return OpenedModel(model, tgt, resolved, store, interpret, Path(cache_dir) if cache_dir is not None else None)


def open_program(model: Any, target_name: str = "cpu", knobs: Mapping[str, Any] | None = None, *,
                 store: Any = None, cache_dir: str | Path | None = None, interpret: bool = False,
                 via: str | None = None, prompt_len: int | None = None, need_decode: bool = True,
                 quiet: bool = False) -> Program:
    """A loaded model's program in one call (`open_model(...).program(...)`; the weights are
    not checked for NaN: a caller that wants them checked opens with `open_model`)."""
    opened = open_model(model, target_name, knobs, via=via, interpret=interpret, cache_dir=cache_dir, store=store,
                        check_weights=False, quiet=quiet)
    return opened.program(prompt_len=prompt_len, need_decode=need_decode, quiet=quiet)
