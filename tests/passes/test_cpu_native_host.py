"""cpu-native-host records the host of a module's entries; strata-opt refuses another in one line."""

from __future__ import annotations

from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from strata.cli.opt import main as opt_main
from strata.passes.cpu_native_host import CpuNativeHostPass, module_host

MODULE_LEVEL = Path(__file__).resolve().parents[1] / "lit" / "passes" / "Inputs" / "llama2l.mlir"


def test_the_host_is_recorded_on_the_module() -> None:
    module = ModuleOp([])
    assert module_host(module) == "native"
    CpuNativeHostPass(host="python").apply(Context(), module)
    assert module_host(module) == "python"


def test_another_host_is_one_line(capsys) -> None:
    assert opt_main([str(MODULE_LEVEL), "-p", "cpu-native-host{host=gpu}"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "strata-opt: error: cpu-native-host: host must be one of native, python, got 'gpu'", err
