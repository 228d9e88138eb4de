"""ggml's tensor types, as GGUF stores them: each block format's size and the type ggml-cpu
quantizes an activation row to before it takes the row's dot products with a weight of it.

    t = ggml_type("q4_K")                 # ggml's own spelling (ggml_type_name)
    t.block, t.nbytes, t.activation       # 256 values in 144 bytes; activations go to q8_K
    gguf_type_name("Q4_K")                # -> "q4_K" (the gguf package's enum names)

`activation` is ggml-cpu's `vec_dot_type` (ggml-cpu.c's type_traits_cpu). For a MUL_MAT whose
weight has a block type, the CPU backend quantizes each row of the activations to that type
(`from_float`: quantize_row_q8_0 or quantize_row_q8_K) and takes integer dot products of the
blocks, then scales: for Q8_0 and Q8_K activations the result is exactly the dot product of the
dequantized weight with the dequantized activation row, up to float32 rounding of the block
sums (checked against libggml-cpu's vec_dot for every type below that llama-quantize makes
without an importance matrix). The Q8_1 activations of Q4_1 and Q5_1 carry a float16 block
sum that the dot product uses in place of the exact one; they are not emulated (`emulated`).
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.errors import StrataError

QK_K = 256


class GgmlTypeError(StrataError):
    """A ggml type name that is not known."""


@dataclass(frozen=True)
class GgmlType:
    name: str  # ggml's spelling (ggml_type_name): q4_K, iq4_xs, q8_0
    block: int  # values per block, along a row (a tensor's innermost dim)
    nbytes: int  # bytes per block
    activation: str | None  # ggml-cpu's vec_dot_type: what an activation row becomes (None: a float type)

    @property
    def quantized(self) -> bool:
        return self.block > 1

    @property
    def emulated(self) -> bool:
        """Whether ggml-cpu's activation quantization for this weight type is emulated."""
        return self.activation in ACTIVATION_TYPES

    def row_bytes(self, n: int) -> int:
        """The bytes of a row of `n` values (a multiple of the block)."""
        return n // self.block * self.nbytes


def _t(name: str, block: int, nbytes: int, activation: str | None) -> GgmlType:
    return GgmlType(name, block, nbytes, activation)


#: Every ggml type a GGUF may store, by ggml's name (ggml.c's type_traits, ggml-cpu.c's vec_dot_type).
TYPES: dict[str, GgmlType] = {t.name: t for t in (
    _t("f32", 1, 4, None), _t("f16", 1, 2, None), _t("bf16", 1, 2, None), _t("f64", 1, 8, None),
    _t("i8", 1, 1, None), _t("i16", 1, 2, None), _t("i32", 1, 4, None), _t("i64", 1, 8, None),
    _t("q4_0", 32, 18, "q8_0"), _t("q4_1", 32, 20, "q8_1"), _t("q5_0", 32, 22, "q8_0"),
    _t("q5_1", 32, 24, "q8_1"), _t("q8_0", 32, 34, "q8_0"), _t("q8_1", 32, 36, "q8_1"),
    _t("q2_K", QK_K, 84, "q8_K"), _t("q3_K", QK_K, 110, "q8_K"), _t("q4_K", QK_K, 144, "q8_K"),
    _t("q5_K", QK_K, 176, "q8_K"), _t("q6_K", QK_K, 210, "q8_K"), _t("q8_K", QK_K, 292, "q8_K"),
    _t("iq2_xxs", QK_K, 66, "q8_K"), _t("iq2_xs", QK_K, 74, "q8_K"), _t("iq2_s", QK_K, 82, "q8_K"),
    _t("iq3_xxs", QK_K, 98, "q8_K"), _t("iq3_s", QK_K, 110, "q8_K"), _t("iq1_s", QK_K, 50, "q8_K"),
    _t("iq1_m", QK_K, 56, "q8_K"), _t("iq4_nl", 32, 18, "q8_0"), _t("iq4_xs", QK_K, 136, "q8_K"),
    _t("tq1_0", QK_K, 54, "q8_K"), _t("tq2_0", QK_K, 66, "q8_K"), _t("mxfp4", 32, 17, "q8_0"),
    _t("nvfp4", 64, 36, "q8_0"), _t("q1_0", 128, 18, "q8_0"),
)}
#: ggml's `enum ggml_type` values (ggml.h; GGUF stores them in each tensor info).
GGML_TYPE_IDS: dict[str, int] = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q8_1": 9, "q2_K": 10, "q3_K": 11,
    "q4_K": 12, "q5_K": 13, "q6_K": 14, "q8_K": 15, "iq2_xxs": 16, "iq2_xs": 17, "iq3_xxs": 18, "iq1_s": 19,
    "iq4_nl": 20, "iq3_s": 21, "iq2_s": 22, "iq4_xs": 23, "i8": 24, "i16": 25, "i32": 26, "i64": 27, "f64": 28,
    "iq1_m": 29, "bf16": 30, "tq1_0": 34, "tq2_0": 35, "mxfp4": 39, "nvfp4": 40, "q1_0": 41,
}
#: The weight types the cpu target's native kernels compute on in place (packed, memory-mapped).
NATIVE_WEIGHT_TYPES = ("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K",
                       "q6_K", "iq4_nl", "iq4_xs")
#: The activation types whose quantization is emulated (`strata.semantics.kernels_ggml`).
ACTIVATION_TYPES = ("q8_0", "q8_K")


def ggml_type(name: str) -> GgmlType:
    """The type named `name` (ggml's spelling); a one-line GgmlTypeError if unknown."""
    found = TYPES.get(name)
    if found is None:
        raise GgmlTypeError(f"unknown ggml type '{name}' (known: {', '.join(t for t in TYPES if TYPES[t].quantized)})")
    return found


def gguf_type_name(enum_name: str) -> str:
    """ggml's spelling of a gguf package enum name (`Q4_K` -> `q4_K`, `IQ4_XS` -> `iq4_xs`)."""
    for name in TYPES:
        if name.lower() == enum_name.lower():
            return name
    raise GgmlTypeError(f"unknown ggml type '{enum_name}'")


def block_types() -> list[str]:
    """The quantized (block) types, in table order."""
    return [n for n, t in TYPES.items() if t.quantized]
