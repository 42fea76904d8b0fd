"""Text forms of expressions and lowered programs (in the spirit of ``tvm.lower``)."""

from __future__ import annotations

from . import expr as E
from . import tir as T

_BIN_SYM = {"add": " + ", "sub": " - ", "mul": "*", "div": "/"}  # TVM spacing: (a + b), (a*b)
_CMP_SYM = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _float_str(v: float, dtype: str) -> str:
    s = repr(float(v))
    if s.endswith(".0"):
        s = s[:-2]
    return s + ("f" if dtype == "float32" else "f64" if dtype == "float64" else "f16")


def expr_str(e) -> str:
    """One-line text of an expression, e.g. ``(A[i, k]*B[k, j])``."""
    if isinstance(e, E.IterVar):
        return e.var.name
    if isinstance(e, E.IntImm):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        return str(e.value) if e.dtype in ("int32",) else f"{e.value}{'i64' if e.dtype == 'int64' else ''}"
    if isinstance(e, E.FloatImm):
        return _float_str(e.value, e.dtype)
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.BinaryOp):
        if e.op in _BIN_SYM:
            return f"({expr_str(e.a)}{_BIN_SYM[e.op]}{expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, E.CmpOp):
        return f"({expr_str(e.a)} {_CMP_SYM[e.op]} {expr_str(e.b)})"
    if isinstance(e, E.LogicalOp):
        return f"({expr_str(e.a)} {'&&' if e.op == 'and' else '||'} {expr_str(e.b)})"
    if isinstance(e, E.Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, E.Select):
        return f"tir.if_then_else({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, E.TensorLoad):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, E.Reduce):
        axes = ", ".join(a.var.name for a in e.axis)
        where = "" if e.condition is None else f", where={expr_str(e.condition)}"
        return f"{e.combiner}({expr_str(e.source)}, axis=[{axes}]{where})"
    if isinstance(e, E.Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, E.Broadcast):
        return f"broadcast({expr_str(e.value)}, {e.lanes})"
    if isinstance(e, E.BufferLoad):
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    return repr(e)


def _lines(s: T.Stmt, ind: int, out: list) -> None:
    pad = "  " * ind
    if isinstance(s, T.SeqStmt):
        for c in s.seq:
            _lines(c, ind, out)
    elif isinstance(s, T.For):
        kind = "" if s.kind == "serial" else f' "{s.kind}"'
        ann = "".join(f' {k}={v}' for k, v in s.annotations.items())
        out.append(f"{pad}for ({s.loop_var.name}, {expr_str(s.min)}, {expr_str(s.extent)}){kind}{ann} {{")
        _lines(s.body, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, T.Store):
        pred = "" if s.predicate is None else f" if {expr_str(s.predicate)}"
        out.append(f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}{pred}")
    elif isinstance(s, T.IfThenElse):
        cond = f"@likely({expr_str(s.cond)})" if s.likely else expr_str(s.cond)
        out.append(f"{pad}if ({cond}) {{")
        _lines(s.then_case, ind + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}}} else {{")
            _lines(s.else_case, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, T.Allocate):
        b = s.buffer
        shape = ", ".join(expr_str(x) for x in b.shape)
        out.append(f"{pad}allocate({b.name}, {b.dtype}, [{shape}]), storage_scope = {b.scope} {{")
        _lines(s.body, ind + 1, out)
        out.append(f"{pad}}}")
    elif isinstance(s, T.LetStmt):
        out.append(f"{pad}let {s.var.name} = {expr_str(s.value)}")
        _lines(s.body, ind, out)
    elif isinstance(s, T.Evaluate):
        out.append(f"{pad}{expr_str(s.value)}")
    else:
        out.append(f"{pad}{s!r}")


def stmt_str(s: T.Stmt, indent: int = 0) -> str:
    out: list = []
    _lines(s, indent, out)
    return "\n".join(out)


def func_str(f: T.PrimFunc) -> str:
    """The whole function: signature with buffer shapes, then the loop nest."""
    params = []
    for b in f.params:
        shape = ", ".join(expr_str(x) for x in b.shape)
        params.append(f"{b.name}: Buffer({b.dtype}, [{shape}])")
    params += [f"{v.name}: {v.dtype}" for v in f.scalar_params]
    head = f"@{f.name} = primfn({', '.join(params)}) {{"
    return "\n".join([head, stmt_str(f.body, 1), "}"])
