"""The CPU target: op-level IR printed as one self-contained numpy module."""

from strata.targets.cpu.emit import CpuTargetError, emit_cpu, sanitize_identifier

__all__ = ["CpuTargetError", "emit_cpu", "sanitize_identifier"]
