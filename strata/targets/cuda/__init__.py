"""The CUDA target: Triton kernels (`kernels/`), the table from blueprint group rules to the
launchers that implement them (`kernel_table`), and ahead-of-time compilation for Hopper (`aot`).

Only `kernel_table` is importable without Triton; the kernel modules import `triton` and `torch`.
"""
