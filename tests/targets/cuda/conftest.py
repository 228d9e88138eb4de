"""The CUDA kernel tests run Triton's interpreter on the CPU: TRITON_INTERPRET must be set
before any kernel module is imported (@triton.jit reads it when it decorates), so it is set
here, before the test modules of this folder are collected. test_aot.py compiles in a
subprocess without it."""

import os

os.environ["TRITON_INTERPRET"] = "1"
