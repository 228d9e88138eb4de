"""The cpu target's native kernels: C++ sources (ggml-cpu's x86 numerics on GGUF's packed weight
blocks, a persistent thread pool, float16 flash attention), `build` to compile them into a
content-addressed shared library, and `loader`, the ctypes binding copied into generated modules."""
