"""The cpu target's entry methods, as text for `emit.py` to print: each entry's arguments (the
module level's, from `op.args` and `op.arg_types`), the generated Model's tables of them (`OUTPUTS`,
`RESULTS`, `ARGS`, `LAYOUTS`), and the head of each method: a one-sequence `prefill(tokens,
start)` / `decode(token, pos)` computes its inputs with `host_input`; every other entry takes its
arguments by name and turns them into its inputs with `entry_call` (strata.semantics.host_inputs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Attribute

from strata.ir import dtypes
from strata.targets.codegen import CodegenError, Namer, literal_name, sanitize_label

#: The names an entry's arguments may have (the module level's are of this form).
ARG_NAME = re.compile(r"[a-z][a-z0-9_]{0,40}")


def entry_layout(fn: func.FuncOp) -> dict | None:
    """The entry's `op.call` (how its arguments become its inputs) as plain values, or None for a
    one-sequence prefill or decode."""
    attr = fn.attributes.get("op.call")
    if attr is None:
        return None
    out = {}
    for k, v in attr.data.items():  # type: ignore[attr-defined]
        value = v.data if isinstance(getattr(v, "data", None), str) else int(v.value.data)
        literal_name(k, "entry layout key")
        if isinstance(value, str):
            literal_name(value, "entry layout value")
        out[k] = value
    return out


def numpy_name(elem: Attribute) -> str:
    found = dtypes.lookup(elem)
    if found is None:
        raise CodegenError(f"cpu target: element type {elem} is not supported")
    return found.numpy.name


def shape_literal(typ: TensorType) -> str:
    """A shape as a Python tuple, None for a dynamic dim."""
    dims = ", ".join("None" if d == DYNAMIC_INDEX else str(d) for d in typ.get_shape())
    return f"({dims}{',' if len(typ.get_shape()) == 1 else ''})"


#: Parameters and fixed locals of the entry methods.
METHOD_NAMES = frozenset({"self", "tokens", "start", "token", "pos", "n_tokens", "call"})


def argument_names(fn: func.FuncOp, reserved: set[str]) -> list[str]:
    """The parameter names of an entry that takes function arguments (after their IR names)."""
    namer = Namer(reserved | METHOD_NAMES)
    return [namer.fresh(a.name_hint or f"arg{i}") for i, a in enumerate(fn.body.block.args)]


def arg_spec(fn: func.FuncOp, reserved: set[str]) -> tuple:
    """The entry's arguments as (name, shape (-1: the call's size) or None for a scalar, numpy
    dtype name); a one-sequence prefill or decode has the module level's (its method takes them flat);
    an entry with function arguments (the sampler) takes them, of static shapes."""
    if fn.function_type.inputs.data:
        return tuple((name, tuple(int(d) for d in a.type.get_shape()), numpy_name(a.type.get_element_type()))
                     for name, a in zip(argument_names(fn, reserved), fn.body.block.args))
    if entry_layout(fn) is None:
        first = ("token", (1, 1), "int32") if fn.sym_name.data == "decode" else ("tokens", (1, -1), "int32")
        return (first, ("pos", None, "int32"))
    names, types = fn.attributes.get("op.args"), fn.attributes.get("op.arg_types")
    if names is None or types is None or len(names.data) != len(types.data):  # type: ignore[attr-defined]
        raise CodegenError(f"cpu target: entry @{fn.sym_name.data} has op.call but no op.args / op.arg_types")
    out = []
    for name, typ in zip(names.data, types.data):  # type: ignore[attr-defined]
        if not ARG_NAME.fullmatch(name.data) or name.data in reserved | {"self", "call", "n_tokens"}:
            raise CodegenError(f"cpu target: entry @{fn.sym_name.data}: argument name "
                               f"{sanitize_label(name.data)!r} cannot be a parameter name")
        if isinstance(typ, TensorType):
            shape = tuple(-1 if d == DYNAMIC_INDEX else int(d) for d in typ.get_shape())
            out.append((name.data, shape, numpy_name(typ.get_element_type())))
        else:
            out.append((name.data, None, numpy_name(typ)))
    return tuple(out)


def signature(fn: func.FuncOp, reserved: set[str]) -> str:
    """How the entry's method is called, for the module's docstring."""
    name = fn.sym_name.data
    if entry_layout(fn) is not None or fn.function_type.inputs.data:
        return f"{name}({', '.join(n for n, _, _ in arg_spec(fn, reserved))})"
    return f"{name}(token, pos)" if name == "decode" else f"{name}(tokens, start)"


def entry_tables(entries: Sequence[func.FuncOp], reserved: set[str],
                 dtype_expr: Callable[[Attribute], str]) -> list[tuple[int, str]]:
    """The Model's tables of its entries: (indent, line) pairs."""
    rows: list[tuple[int, str]] = []

    def table(head: str, items: list[str]) -> None:
        rows.append((0, head))
        rows.extend((1, item) for item in items)
        rows.append((0, "}"))

    def result(t) -> str:
        return f"({shape_literal(t)}, {dtype_expr(t.get_element_type())})"

    table("OUTPUTS = {  # entry -> (shape, dtype) of its (first) result; None: the call's size",
          [f"{fn.sym_name.data!r}: {result(fn.function_type.outputs.data[0])}," for fn in entries])
    table("RESULTS = {  # entry -> the (shape, dtype) of each result",
          [f"{fn.sym_name.data!r}: ({', '.join(result(t) for t in fn.function_type.outputs.data)},),"
           for fn in entries])
    table("ARGS = {  # entry -> its arguments: (name, shape (None: a scalar; -1: the call's size), dtype)",
          [f"{fn.sym_name.data!r}: {arg_spec(fn, reserved)!r}," for fn in entries])
    table("LAYOUTS = {  # entry -> how its arguments become its inputs (host_inputs.entry_call)",
          [f"{fn.sym_name.data!r}: {entry_layout(fn)!r}," for fn in entries if entry_layout(fn) is not None])
    return rows


def method_head(fn: func.FuncOp, reserved: set[str], n_ctx: int | None) -> tuple[str, list[str], str]:
    """(the `def` line, the lines that open the body, the kernel they call) of the entry's method."""
    name = fn.sym_name.data
    if entry_layout(fn) is not None:
        spec = arg_spec(fn, reserved)
        kind = "step function" if fn.sym_visibility is not None else "entry"
        given = ", ".join(f"{n!r}: {n}" for n, _, _ in spec)
        return (f"def {name}(self, {', '.join(n for n, _, _ in spec)}):",
                [f'"""The {kind} @{name}: its arguments checked and turned into its inputs, then its ops."""',
                 f"call = entry_call(self.LAYOUTS[{name!r}], self.ARGS[{name!r}], {{{given}}})",
                 "n_tokens = call['tokens'].shape[0]"], "entry_call")
    if name == "decode":
        head = "def decode(self, token, pos):"
        body = ['"""Entry @decode: one token at position `pos`; writes its cache rows, returns its logits."""',
                "tokens = np.asarray([token], dtype=np.int32)", "start = int(pos)"]
    else:
        head = f"def {name}(self, tokens, start):"
        body = [f'"""Entry @{name}: `tokens` from position `start`; writes their cache rows, returns the logits '
                'of the rows the graph outputs."""',
                "tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)", "start = int(start)"]
    body.append("n_tokens = tokens.shape[0]")
    if n_ctx is not None:
        body += [f"if n_tokens < 1 or start < 0 or start + n_tokens > {n_ctx}:",
                 f"    raise ValueError(f'{name}: {{n_tokens}} tokens at position {{start}} do not fit "
                 f"the context of {n_ctx}')"]
    return head, body, "host_input"
