"""cpu-native-host{host=python}: which host runs a natively computed module's entries.

`native` (the default, and the module without the attribute): each entry that the C++ entry
printer (strata.targets.cpu.emit_native_entry) can print runs as one native call per step;
`python`: every entry stays a Python method calling the kernels op by op (the reference the
native entry is compared with). The pass only records the choice on the module.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from strata.errors import StrataError

#: The module's attribute, and its values.
HOST_ATTR = "cpu.host"
HOSTS = ("native", "python")


class CpuNativeHostError(StrataError):
    """A host that is not one of HOSTS."""


def module_host(module: ModuleOp) -> str:
    attr = module.attributes.get(HOST_ATTR)
    return attr.data if isinstance(attr, StringAttr) else "native"


@dataclass(frozen=True)
class CpuNativeHostPass(ModulePass):
    """Record the host of the module's entries (`host`: native or python)."""

    name = "cpu-native-host"

    host: str = "native"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.host not in HOSTS:
            raise CpuNativeHostError(f"cpu-native-host: host must be one of {', '.join(HOSTS)}, got {self.host[:40]!r}")
        op.attributes[HOST_ATTR] = StringAttr(self.host)
