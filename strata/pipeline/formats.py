"""The frontends that build a module level, with the families wired in: a PyTorch module
captured with `torch.export` (`strata.frontends.torch`) and a tensorviz.graph document
(`strata.frontends.tensorviz`). The readers produce an HF config's fields; the family that
their `architectures` names reads them and builds the module.

    out = capture_to_dir(model, (ids,), "build/captured")    # config.json + model.safetensors
    cfg, module = import_tensorviz("tinyllama.tensorviz.json")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from strata.errors import StrataError
from strata.models import build_module, read_config_dict


def _build(data: dict[str, Any], name: str, file: str | None = None) -> tuple[Any, ModuleOp]:
    config = read_config_dict(data, file or f"the torch capture of {name}", name)
    return config, build_module(config)


def _build_torch(data: dict[str, Any], name: str) -> tuple[Any, ModuleOp]:
    return _build(data, name)


def capture(module: Any, example_inputs: tuple, *, max_seq: int | None = None, check: bool = True,
            level: str = "module") -> ModuleOp:
    """The module level of a PyTorch causal LM (see `strata.frontends.torch.capture`)."""
    from strata.frontends import torch as T

    return T.capture(module, example_inputs, build=_build_torch, max_seq=max_seq, check=check, level=level)


def capture_model(module: Any, example_inputs: tuple, *, max_seq: int | None = None, check: bool = True):
    """The config, module level and HF-named weights of a PyTorch causal LM."""
    from strata.frontends import torch as T

    return T.capture_model(module, example_inputs, build=_build_torch, max_seq=max_seq, check=check)


def capture_to_dir(module: Any, example_inputs: tuple, out_dir: str | Path, *, max_seq: int | None = None,
                   check: bool = True) -> Path:
    """A PyTorch causal LM captured into a new checkpoint directory that `load_model` reads."""
    from strata.frontends import torch as T

    return T.capture_to_dir(module, example_inputs, out_dir, build=_build_torch, max_seq=max_seq, check=check)


def import_tensorviz(path: str | Path) -> tuple[Any, ModuleOp]:
    """(the family's config, the module level) of a tensorviz.graph document."""
    from strata.frontends.tensorviz import import_tensorviz as read

    return read(path, lambda data, file, name: _build(data, name, file))


def module_of(path: str) -> ModuleOp:
    """The module level of MODEL_OR_MLIR: a model directory (or config.json, or GGUF), or a
    module-level .mlir file."""
    if path.endswith(".mlir") and Path(path).exists() and not Path(path).is_dir():
        from strata.dialects import strata_context
        from strata.ir.text import read_ir

        return read_ir(path, strata_context())
    from strata.pipeline.model import load_model

    return load_model(path).module


def input_files_of(path: str) -> dict[Path, str]:
    """The files MODEL_OR_MLIR is read from (what no output of the command may replace)."""
    if path.endswith(".mlir") and Path(path).exists() and not Path(path).is_dir():
        return {Path(path): "the input IR"}
    from strata.pipeline.model import model_files

    return model_files(path)


def tensorviz_text(path: str) -> str:
    """The module level of MODEL_OR_MLIR as a tensorviz.graph v3 document."""
    from strata.exporters.tensorviz import export_tensorviz, tensorviz_json

    return tensorviz_json(export_tensorviz(module_of(path)))


#: The manifest's kind (its `target`) for a checkpoint that `import --random-weights` wrote.
RANDOM_CHECKPOINT = "random-checkpoint"
CACHE = ".strata-cache"


def _is_strata_cache(d: Path) -> bool:
    """Whether `d` holds only compiled outputs strata wrote (stages, EPU outputs): `strata run`'s cache."""
    from strata.artifacts.stage import is_stage
    from strata.targets.epu.stages import epu_output_problem

    return all(e.is_dir() and not e.is_symlink() and (is_stage(e) or epu_output_problem(e) is None)
               for e in d.iterdir())


def own_checkpoint_problem(d: Path) -> str | None:
    """None when the directory `d` holds nothing but a checkpoint that `strata import` wrote and
    nobody changed since (its manifest's digests match every file) and strata's compiled cache of
    it; else what there is not strata's (so it must not be replaced)."""
    from strata.artifacts.stage import MANIFEST, read_manifest, sha256_file

    manifest, problem = read_manifest(d)
    if manifest is None:
        return problem
    outputs = manifest.get("outputs")
    if manifest.get("target") != RANDOM_CHECKPOINT or not isinstance(outputs, dict):
        return f"its {MANIFEST} is not that of a checkpoint strata import wrote"
    for entry in sorted(d.iterdir()):
        if entry.name == MANIFEST:
            continue
        if entry.name == CACHE and entry.is_dir() and not entry.is_symlink():
            if not _is_strata_cache(entry):
                return f"{entry} holds more than strata's compiled models"
            continue
        if entry.name not in outputs or not entry.is_file() or entry.is_symlink():
            return f"it holds {entry.name!r}, which strata import did not write"
        if sha256_file(entry) != outputs[entry.name]:
            return f"{entry.name} was changed after strata import wrote it"
    return None


def check_weights_dir(d: Path, inputs: dict[Path, str] | None = None) -> None:
    """Refuse a directory holding anything but a checkpoint strata import wrote (nothing of the
    user's is overwritten, whatever its files are called), or one that holds an input."""
    from strata.artifacts.files import input_hit

    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise StrataError(f"{d}: exists and is not a directory; give --weights-dir DIR")
    for given, what in (inputs or {}).items():  # an input inside the directory would be replaced with it
        if input_hit(given, {d: "it"}) is not None:
            raise StrataError(f"{d}: holds {what} {given}, which writing the checkpoint there would replace; "
                              "give another --weights-dir")
    if d.is_dir():
        problem = own_checkpoint_problem(d) if any(d.iterdir()) else None
        if problem is not None:
            raise StrataError(f"{d}: not a checkpoint that strata import wrote ({problem}); refusing to replace "
                              "it: give an empty or new --weights-dir")
    elif not d.parent.is_dir():
        raise StrataError(f"{d}: the directory {d.parent} does not exist")


def write_random_weights(cfg: Any, d: Path, seed: int, document: Path) -> None:
    """A checkpoint of `cfg` with seeded random weights at `d`, with a manifest whose digests
    mark it as strata's own (a later import may replace it; nothing else may be replaced)."""
    from strata.artifacts.directory import locked, new_directory
    from strata.artifacts.stage import MANIFEST, manifest_bytes, sha256_file
    from strata.frontends.tensorviz import random_weights_std
    from strata.models import save_random_checkpoint

    std = random_weights_std(cfg.hidden_size)
    with locked(d):
        with new_directory(d, check=lambda: check_weights_dir(d)) as tmp:
            save_random_checkpoint(cfg, tmp, seed=seed, std=std)
            files = {p.name: p.read_bytes() for p in sorted(tmp.iterdir())}
            inputs = {"document_sha256": sha256_file(document), "seed": seed, "std": std}
            (tmp / MANIFEST).write_bytes(manifest_bytes(RANDOM_CHECKPOINT, inputs, files))


def import_tensorviz_with_weights(path: str | Path, weights_dir: Path | None, seed: int | None,
                                  output: str | Path | None = None) -> str:
    """The module level of a tensorviz document as IR text; with `seed`, also a checkpoint of
    seeded random weights written to `weights_dir` (so that compile and run work on it).
    `output`: where the caller writes the text (checked not to lie in `weights_dir`)."""
    from strata.artifacts.files import check_not_an_input
    from strata.errors import say
    from strata.ir.text import print_ir

    if weights_dir is not None:
        check_weights_dir(weights_dir, {Path(path): "the imported document"})
        if output is not None:
            check_not_an_input(output, {weights_dir: f"the weights directory {weights_dir}"})
    cfg, module = import_tensorviz(path)
    text = print_ir(module)
    if weights_dir is not None and seed is not None:
        write_random_weights(cfg, weights_dir, seed, Path(path))
        say(f"wrote a checkpoint with random weights (seed {seed}) to {weights_dir}")
    return text


#: The precision recipes the ONNX export writes: None (the model's own weights, f32 compute)
#: and w4a16 (int4 weights as MatMulNBits, f32 activations).
ONNX_RECIPES = ("w4a16",)


def check_onnx_recipe(recipe: str | None, w4a16_dir: str | Path | None) -> None:
    """Refuse, before any work, a recipe the ONNX export cannot write, or a stage without w4a16."""
    if recipe is not None and recipe not in ONNX_RECIPES:
        raise StrataError(f"export: --recipe {recipe} has no ONNX export (ONNX Runtime runs int4 weights as "
                          "MatMulNBits: --recipe w4a16; without --recipe the model's own weights)")
    if w4a16_dir is not None and recipe != "w4a16":
        raise StrataError("export: --w4a16 DIR (a w4a16 stage's int4 weights) goes with --recipe w4a16")


def export_onnx_file(model: Any, entry: str, tokens: int, knobs: dict[str, Any], output: str | Path,
                     recipe: str | None = None, w4a16_dir: str | Path | None = None) -> str:
    """One entry of `model` written as an ONNX file (beside it FILE.data holds the weights of a
    model over 1 GiB); returns a one-line summary. `recipe` w4a16: the int4 weights of
    `strata.quant.w4a16` (the model's own, quantized here without SmoothQuant, or those of the
    stage `w4a16_dir`: a `strata quantize --w4a16` output, or OUT/w4a16/q of an EPU compile) as
    com.microsoft.MatMulNBits, every other param as that stage holds it."""
    import sys
    import tempfile
    import time

    from strata.artifacts.files import check_not_an_input, check_output_path, write_output
    from strata.exporters.onnx import check_onnx_file
    from strata.exporters.onnx_file import serialize_onnx
    from strata.targets.onnxruntime.program import export_entry

    check_onnx_recipe(recipe, w4a16_dir)
    data_path = Path(output).with_name(Path(output).name + ".data")
    inputs = model.input_files()
    if w4a16_dir is not None:
        inputs = {**inputs, Path(w4a16_dir): f"the w4a16 stage {w4a16_dir}"}
    check_output_path(output, inputs)
    check_not_an_input(data_path, inputs, "the weights beside the output")
    if tokens > knobs["ctx"]:
        raise StrataError(f"--tokens {tokens} exceeds the context of {knobs['ctx']} (--ctx)")
    t0 = time.perf_counter()
    quiet = not sys.stderr.isatty()
    with tempfile.TemporaryDirectory(prefix="strata-w4a16-") as tmp:
        int4 = None if recipe is None else _w4a16_stage(model, w4a16_dir, Path(tmp) / "q", quiet)
        store = int4 if int4 is not None else model.open_weights(quiet=quiet)
        proto = export_entry(model, store, entry, tokens, knobs, int4=int4)
    nbits = sum(n.op_type == "MatMulNBits" for n in proto.graph.node)
    content, data = serialize_onnx(proto, data_path.name)
    if data is not None:
        check_output_path(data_path)
        write_output(data_path, data)
    write_output(output, content)
    if data is not None:  # too large to check in memory: checked as saved
        check_onnx_file(output)
    # a weight read another way too (a tied embedding) is written dequantized, f32
    how = "" if int4 is None else (f", {nbits} int4 weights as MatMulNBits (block {int4.block})"
                                   + (f", {len(int4.weights) - nbits} dequantized" if nbits < len(int4.weights) else ""))
    return (f"exported the {entry} of {model.source} ({tokens} token{'s' * (tokens != 1)}, ctx {knobs['ctx']}{how}) "
            f"to {output}{f' and {data_path.name}' if data is not None else ''} in {time.perf_counter() - t0:.2f} s")


def _w4a16_stage(model: Any, given: str | Path | None, scratch: Path, quiet: bool) -> Any:
    """The w4a16 stage `given` (checked to be this model's), or the model's weights quantized into `scratch`."""
    from strata.quant.w4a16 import W4A16Weights, plan_model, write_w4a16

    if given is None:
        write_w4a16(model, plan_model(model), scratch, store=model.open_weights(quiet=quiet))
        return W4A16Weights.open(scratch)
    stage = W4A16Weights.open(given)
    if stage.info.get("model") != model.name:
        raise StrataError(f"{given}: a w4a16 stage of model '{stage.info.get('model')}', not of {model.source} "
                          f"('{model.name}')")
    return stage
