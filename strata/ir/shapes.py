"""The type notation of the module level (`Tensor[B, S; i32]`), parsed without `eval`.

    Tensor[B, S, Vocab; T]          a tensor whose dims are expressions over generics
    Tensor[*S, H; T]                `*S` is a variadic leading shape
    Linear<H, (Heads / Shards) * HeadDim, T>      a block instance
    [DecoderLayer<H, Heads>; Layers]              an array of block instances
    [LinearLayer<H> | AttnLayer<H>; Layers]       an array of blocks of several kinds
    <B: Dim, S: Dim>(tokens: Tensor[B, S; i32], pos: i32) -> Tensor[B, Vocab; T]

Dim expressions are integers, names, `+ - * /` (integer division) and parentheses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Mapping, Sequence

from strata.errors import StrataError
from strata.ir.dtypes import names as dtype_names


class ShapeSyntaxError(StrataError):
    """A member type in the module level's notation that does not parse or names an unknown dim."""


_TOKEN = re.compile(r"\s*(->|[A-Za-z_][A-Za-z0-9_]*|\d+|[\[\]<>(),;:*/+\-=?|])")


def _tokenize(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ShapeSyntaxError(f"unexpected character {text[pos:].strip()[:1]!r} in '{text}'")
        out.append(m.group(1))
        pos = m.end()
    return out


@dataclass(frozen=True)
class Expr:
    """A dim expression: an int, a name, or (op, lhs, rhs)."""

    op: str
    args: tuple

    def names(self) -> set[str]:
        if self.op == "name":
            return {self.args[0]}
        if self.op == "int":
            return set()
        return self.args[0].names() | self.args[1].names()

    def evaluate(self, env: Mapping[str, int]) -> int:
        if self.op == "int":
            return self.args[0]
        if self.op == "name":
            if self.args[0] not in env:
                raise ShapeSyntaxError(f"unbound dim '{self.args[0]}'")
            return env[self.args[0]]
        a, b = self.args[0].evaluate(env), self.args[1].evaluate(env)
        if self.op == "/":
            if b == 0:
                raise ShapeSyntaxError(f"division by zero in '{self}'")
            return a // b
        return {"+": a + b, "-": a - b, "*": a * b}[self.op]

    def __str__(self) -> str:
        if self.op in ("int", "name"):
            return str(self.args[0])
        return f"{_wrap(self.args[0], self.op, False)} {self.op} {_wrap(self.args[1], self.op, True)}"


_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _wrap(e: Expr, parent: str, right: bool) -> str:
    if e.op in _PREC and (_PREC[e.op] < _PREC[parent] or (right and _PREC[e.op] == _PREC[parent])):
        return f"({e})"
    return str(e)


@dataclass(frozen=True)
class Generic:
    name: str
    kind: str  # Dim, Float, Shape
    default: str | None
    variadic: bool = False


@dataclass(frozen=True)
class TensorT:
    dims: tuple[Expr | str, ...]  # str = a variadic `*S`
    dtype: str

    def names(self) -> set[str]:
        out = {self.dtype}
        for d in self.dims:
            out |= {d} if isinstance(d, str) else d.names()
        return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self, k: int = 0) -> str | None:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else None

    def take(self, expect: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expect is not None and tok != expect):
            raise ShapeSyntaxError(f"expected {expect or 'more'} in '{self.text}', got {tok or 'end'}")
        self.i += 1
        return tok

    def ident(self) -> str:
        tok = self.take()
        if not re.fullmatch(r"[A-Za-z_]\w*", tok):
            raise ShapeSyntaxError(f"expected a name in '{self.text}', got '{tok}'")
        return tok

    def done(self) -> None:
        if self.peek() is not None:
            raise ShapeSyntaxError(f"unexpected '{self.peek()}' in '{self.text}'")

    def expr(self) -> Expr:
        lhs = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            lhs = Expr(op, (lhs, self.term()))
        return lhs

    def term(self) -> Expr:
        lhs = self.atom()
        while self.peek() in ("*", "/"):
            op = self.take()
            lhs = Expr(op, (lhs, self.atom()))
        return lhs

    def atom(self) -> Expr:
        tok = self.take()
        if tok == "(":
            e = self.expr()
            self.take(")")
            return e
        if tok.isdigit():
            return Expr("int", (int(tok),))
        if re.fullmatch(r"[A-Za-z_]\w*", tok):
            return Expr("name", (tok,))
        raise ShapeSyntaxError(f"unexpected '{tok}' in dim expression of '{self.text}'")

    def tensor(self) -> TensorT:
        if self.peek() != "Tensor":
            return TensorT((), self.ident())  # a scalar such as i32
        self.take("Tensor")
        self.take("[")
        dims: list[Expr | str] = []
        while self.peek() != ";":
            if self.peek() == "*":
                self.take("*")
                dims.append("*" + self.ident())
            else:
                dims.append(self.expr())
            if self.peek() == ",":
                self.take(",")
        self.take(";")
        dtype = self.ident()
        self.take("]")
        return TensorT(tuple(dims), dtype)

    def generic(self) -> Generic:
        variadic = self.peek() == "*"
        if variadic:
            self.take("*")
        name = self.ident()
        self.take(":")
        kind = self.ident()
        default = None
        if self.peek() == "=":
            self.take("=")
            default = self.take()
        if kind not in ("Dim", "Float", "Shape"):
            raise ShapeSyntaxError(f"generic '{name}' has unknown kind '{kind}' (Dim, Float or Shape)")
        return Generic(name, kind, default, variadic)


def parse_expr(text: str) -> Expr:
    p = _Parser(text)
    e = p.expr()
    p.done()
    return e


def parse_block_generics(items: Sequence[str]) -> list[Generic]:
    out = []
    for item in items:
        p = _Parser(item)
        out.append(p.generic())
        p.done()
    names = [g.name for g in out]
    if len(set(names)) != len(names):
        raise ShapeSyntaxError(f"a generic is declared twice in {names}")
    return out


def _check_names(names: set[str], known: Sequence[str], text: str) -> None:
    builtin_types = set(dtype_names())
    for n in sorted(names):
        bare = n.lstrip("*")
        if bare not in known and bare not in builtin_types:
            raise ShapeSyntaxError(f"unknown name '{bare}' in '{text}'")


def parse_tensor_type(text: str, known: Sequence[str] | None = None) -> TensorT:
    p = _Parser(text)
    t = p.tensor()
    p.done()
    if known is not None:
        _check_names(t.names(), known, text)
    return t


@dataclass(frozen=True)
class SubType:
    """`Kind<args>`, `[Kind<args>; Count]`, or an array whose elements are of several kinds,
    `[KindA<args> | KindB<args>; Count]` (the sub's `pattern` picks each element's kind)."""

    alternatives: tuple[tuple[str, tuple[Expr | str, ...]], ...]
    count: Expr | None

    @property
    def kind(self) -> str:
        return self.alternatives[0][0]

    @property
    def args(self) -> tuple[Expr | str, ...]:
        return self.alternatives[0][1]


def parse_sub_type(text: str, known: Sequence[str] | None = None) -> SubType:
    """Parse a sub's type; `known` names the generics it may use."""
    p = _Parser(text)
    array = p.peek() == "["
    if array:
        p.take("[")
    alternatives = []
    while True:
        kind = p.ident()
        args: list[Expr | str] = []
        if p.peek() == "<":
            p.take("<")
            while p.peek() != ">":
                args.append(p.expr())
                if p.peek() == ",":
                    p.take(",")
            p.take(">")
        alternatives.append((kind, tuple(args)))
        if not (array and p.peek() == "|"):
            break
        p.take("|")
    count = None
    if array:
        p.take(";")
        count = p.expr()
        p.take("]")
    p.done()
    if known is not None:
        names: set[str] = set()
        for _, args in alternatives:
            for a in args:
                names |= a.names() if isinstance(a, Expr) else {a}
        if count is not None:
            names |= count.names()
        _check_names(names, known, text)
    return SubType(tuple(alternatives), count)


@dataclass(frozen=True)
class Signature:
    generics: tuple[Generic, ...]
    params: tuple[tuple[str, TensorT], ...]
    results: tuple[TensorT, ...]


def parse_fn_signature(text: str, known: Sequence[str] | None = None) -> Signature:
    p = _Parser(text)
    generics: list[Generic] = []
    if p.peek() == "<":
        p.take("<")
        while p.peek() != ">":
            generics.append(p.generic())
            if p.peek() == ",":
                p.take(",")
        p.take(">")
    p.take("(")
    params = []
    while p.peek() != ")":
        name = p.ident()
        p.take(":")
        params.append((name, p.tensor()))
        if p.peek() == ",":
            p.take(",")
    p.take(")")
    p.take("->")
    results = []
    if p.peek() == "(":
        p.take("(")
        while p.peek() != ")":
            results.append(p.tensor())
            if p.peek() == ",":
                p.take(",")
        p.take(")")
    else:
        results.append(p.tensor())
    p.done()
    sig = Signature(tuple(generics), tuple(params), tuple(results))
    if known is not None:
        scope = list(known) + [g.name for g in generics]
        for _, t in params:
            _check_names(t.names(), scope, text)
        for t in results:
            _check_names(t.names(), scope, text)
    return sig
