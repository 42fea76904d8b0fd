"""The lowered loop program: what lowering produces and code generation consumes.

    State --lower--> PrimFunc(params, body: Stmt) --codegen--> machine code

Statements: ``For`` (with a loop kind), ``Store`` (flat index into a
``Buffer``), ``IfThenElse``, ``SeqStmt``, ``Allocate`` (a scratch buffer that
lives for its body), ``LetStmt``, ``Evaluate`` and ``Barrier`` (a GPU block's
``__syncthreads()``, only in the kernel form of a cuda target:
docs/gpu_kernel_form.md).  Expressions are those of ``expr`` with ``BufferLoad``
(flat index) in place of ``TensorLoad``; after the vectorize pass,
``Ramp``/``Broadcast`` give vector values of ``lanes`` elements.

Indices are flat element offsets (row-major over the buffer's shape).  Index
arithmetic is int32 in the IR; code generation may widen it to int64.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_core.base.gpu_spec import GPU_TAGS, VTHREAD

from .expr import Expr, Var, dtype_bits, expr_str
from .simplify import const_value

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", VTHREAD) + GPU_TAGS


def dtype_bytes(dtype: str, lanes: int = 1) -> int:
    """Bytes of one value of ``dtype`` with ``lanes`` lanes: ``(bits * lanes + 7) // 8`` (a
    ``bool`` takes one byte), the one rounding rule of every buffer size."""
    return (dtype_bits(dtype) * lanes + 7) // 8


@dataclass(frozen=True, eq=False)
class Buffer:
    """A region of memory holding elements of ``dtype``.

    shape: extents (Exprs; may contain symbolic ``Var``s that are function
    parameters).  scope: ``"global"`` for function arguments and root
    intermediates, ``"local"`` for scratch allocated inside a loop nest.
    """

    name: str
    dtype: str
    shape: tuple
    scope: str = "global"

    __hash__ = object.__hash__

    @property
    def num_elements(self) -> int | None:
        """The product of the shape's extents; None when one of them is not a constant."""
        n = 1
        for d in self.shape:
            v = const_value(d)
            if not isinstance(v, int):
                return None
            n *= v
        return n

    @property
    def nbytes(self) -> int | None:
        """Bytes of the whole buffer (:func:`dtype_bytes` per element); None when the shape is
        not constant."""
        n = self.num_elements
        return None if n is None else n * dtype_bytes(self.dtype)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.dtype}, {[str(s) for s in self.shape]}, {self.scope})"


class Stmt:
    __hash__ = object.__hash__

    def __str__(self) -> str:
        return stmt_str(self)


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    """``buffer[index] = value``; with ``predicate`` (vector of bool) only where it holds."""

    buffer: Buffer
    index: Expr
    value: Expr
    predicate: Expr | None = None


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for loop_var in [min, min + extent)`` with ``kind`` in LOOP_KINDS.

    annotations: pragmas such as ``{"auto_unroll_max_step": 16}``.
    """

    loop_var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    annotations: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    """``if cond: then_case else: else_case``; ``likely`` marks guards of split tails."""

    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None
    likely: bool = False


@dataclass(frozen=True, eq=False)
class SeqStmt(Stmt):
    seq: tuple


@dataclass(frozen=True, eq=False)
class Allocate(Stmt):
    """Scratch memory for ``buffer`` (its shape gives the size) during ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, eq=False)
class Evaluate(Stmt):
    value: Expr


@dataclass(frozen=True, eq=False)
class Barrier(Stmt):
    """CUDA's ``__syncthreads()``: every thread of the block waits here until all have
    arrived, and their earlier shared (and global) memory writes are visible to all.

    A leaf statement (no children, no expressions); the GPU lowering places it only under
    control flow that is the same for every thread of a block.
    """


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A lowered function.

    params: the argument ``Buffer``s in call order.  ``scalar_params``: the
    symbolic shape ``Var``s, passed after the buffers (int32 in the IR).
    """

    name: str
    params: tuple  # tuple[Buffer]
    scalar_params: tuple  # tuple[Var]
    body: Stmt
    attrs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return func_str(self)

    __hash__ = object.__hash__


def seq(*stmts: Stmt | None) -> Stmt:
    """A SeqStmt of the non-None ``stmts``, flattened; a single statement as itself."""
    flat: list = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.seq)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


def stmt_children(s: Stmt) -> tuple:
    """The statements directly inside ``s`` (``()`` for the leaves Store, Evaluate, Barrier)."""
    if isinstance(s, For):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then_case,) if s.else_case is None else (s.then_case, s.else_case)
    if isinstance(s, SeqStmt):
        return s.seq
    if isinstance(s, (Allocate, LetStmt)):
        return (s.body,)
    return ()


def walk_stmts(s: Stmt):
    """Pre-order iteration over statements."""
    stack = [s]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(stmt_children(node)))


# ---------------------------------------------------------------------------
# Text form (in the spirit of tvm.lower(..., simple_mode=True))
# ---------------------------------------------------------------------------

def _lines(s: Stmt, ind: int, out: list) -> None:
    pad = "  " * ind
    if isinstance(s, SeqStmt):
        for c in s.seq:
            _lines(c, ind, out)
    elif isinstance(s, For):
        kind = "" if s.kind == "serial" else f' "{s.kind}"'
        ann = "".join(f' {k}={v}' for k, v in s.annotations.items())
        out.append(f"{pad}for ({s.loop_var.name}, {expr_str(s.min)}, {expr_str(s.extent)}){kind}{ann} {{")
        _lines(s.body, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, Store):
        pred = "" if s.predicate is None else f" if {expr_str(s.predicate)}"
        out.append(f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}{pred}")
    elif isinstance(s, IfThenElse):
        cond = f"@likely({expr_str(s.cond)})" if s.likely else expr_str(s.cond)
        out.append(f"{pad}if ({cond}) {{")
        _lines(s.then_case, ind + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}}} else {{")
            _lines(s.else_case, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, Allocate):
        b = s.buffer
        shape = ", ".join(expr_str(x) for x in b.shape)
        out.append(f"{pad}allocate({b.name}, {b.dtype}, [{shape}]), storage_scope = {b.scope} {{")
        _lines(s.body, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, LetStmt):
        out.append(f"{pad}let {s.var.name} = {expr_str(s.value)}")
        _lines(s.body, ind, out)
    elif isinstance(s, Evaluate):
        out.append(f"{pad}{expr_str(s.value)}")
    elif isinstance(s, Barrier):
        out.append(f"{pad}__syncthreads()")
    else:
        out.append(f"{pad}{s!r}")


def stmt_str(s: Stmt, indent: int = 0) -> str:
    out: list = []
    _lines(s, indent, out)
    return "\n".join(out)


def func_str(f: PrimFunc) -> str:
    """The whole function: signature with buffer shapes, then the loop nest."""
    params = []
    for b in f.params:
        shape = ", ".join(expr_str(x) for x in b.shape)
        params.append(f"{b.name}: Buffer({b.dtype}, [{shape}])")
    params += [f"{v.name}: {v.dtype}" for v in f.scalar_params]
    head = f"@{f.name} = primfn({', '.join(params)}) {{"
    return "\n".join([head, stmt_str(f.body, 1), "}"])
