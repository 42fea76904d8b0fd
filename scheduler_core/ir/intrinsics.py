"""The one table of math intrinsics: every backend, the JSON format and its docs read it.

    INTRINSIC_TABLE --expr.call / te.<name>--> Call nodes (arity, argument dtypes checked)
                    --dag.reference--> numpy            --codegen (LLVM)--> llvm.* / libm / libmvec
                    --CUDA printer--> expf / __expf      --access analysis--> cost class
                    --dag_json, api.dag_schema, docs/dag_json_schema.md--> the names of ``call``

Adding an intrinsic is adding one :class:`Intrinsic` row (plus tests).  Two rows are
composites that a backend lowers by hand where their columns are empty: ``sigmoid`` as
``1/(1+exp(-x))`` (CPU and CUDA) and ``rsqrt`` as ``1/sqrt(x)`` (CPU; CUDA has ``rsqrtf``),
TVM's lowering of these intrinsics (``src/target/intrin_rule.cc``); every other row needs
no backend code.  ``pow`` is a row too, though the IR spells it as ``BinaryOp("pow")``
(``operator=True``): the CUDA printer and the access analysis take its columns from here.

The idea of one declarative row per intrinsic, read by every lowering, is TVM's
``TVM_REGISTER_OP("tir.exp")`` with its per-target ``FLowerIntrinsic`` attributes.
Run ``python -m scheduler_core.ir.intrinsics`` to rewrite the intrinsic section of
docs/dag_json_schema.md from this table (a test checks that the two agree).
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

CHEAP = "cheap"
EXPENSIVE = "expensive"
COST_CLASSES = (CHEAP, EXPENSIVE)


@dataclass(frozen=True)
class Intrinsic:
    """One math intrinsic, elementwise, with its spelling in every backend.

    name: the name of the ``Call`` node (``te.<name>``, JSON ``{"kind": "call", "name"}``).
    arity: the number of arguments; they share one float dtype, the result's.
    doc: one line for te's docstring and the JSON docs.
    numpy: the reference: float numpy arrays in (broadcasting), an array out
        (the evaluator casts it to the node's dtype).
    llvm: the LLVM intrinsic ``llvm.<llvm>.<f32|f64|vNfM>`` (LangRef), or None.
    libm: the C function of double (the float one appends ``f``) the CPU calls once per
        lane where there is no LLVM intrinsic, or None.
    mvec: glibc's libmvec (2.35+) has ``_ZGV<isa>N<lanes><v per argument>_<libm>[f]``
        (the x86-64 vector function ABI), used for float32/float64 vectors.
    cuda: the CUDA math function of double (the float one appends ``f``), or None.
    cuda_fast: the float32 hardware approximation used under ``attrs["fast_math"]``
        (CUDA C Programming Guide, "Intrinsic Functions"), or None.
    cost_class: ``"expensive"`` (a transcendental call: an op using it is not strictly
        inlineable, as Ansor's ``exp`` check) or ``"cheap"``.
    int_args: integer arguments keep their dtype (``abs``); else they are cast to float32.
    operator: the IR spells it as ``BinaryOp(name)``, not as a ``Call`` (``pow``).
    te_function: ``te.<name>`` is generated from this row (False where te has its own).
    """

    name: str
    arity: int
    doc: str
    numpy: Callable[..., np.ndarray]
    llvm: str | None = None
    libm: str | None = None
    mvec: bool = False
    cuda: str | None = None
    cuda_fast: str | None = None
    cost_class: str = CHEAP
    int_args: bool = False
    operator: bool = False
    te_function: bool = True

    def __post_init__(self) -> None:
        if self.arity < 1 or self.cost_class not in COST_CLASSES or (self.mvec and self.libm is None):
            raise ValueError(f"malformed intrinsic row {self.name!r}")


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(1 + np.exp(-x))


_erf = np.vectorize(math.erf, otypes=[np.float64])

_X = EXPENSIVE
INTRINSIC_TABLE: tuple[Intrinsic, ...] = (
    Intrinsic("exp", 1, "e to the x", np.exp, llvm="exp", libm="exp", mvec=True, cuda="exp",
              cuda_fast="__expf", cost_class=_X),
    Intrinsic("log", 1, "natural logarithm", np.log, llvm="log", libm="log", mvec=True, cuda="log",
              cuda_fast="__logf", cost_class=_X),
    Intrinsic("sqrt", 1, "square root", np.sqrt, llvm="sqrt", libm="sqrt", cuda="sqrt", cost_class=_X),
    Intrinsic("rsqrt", 1, "1 / sqrt(x)", _rsqrt, cuda="rsqrt", cost_class=_X),
    Intrinsic("tanh", 1, "hyperbolic tangent", np.tanh, libm="tanh", mvec=True, cuda="tanh", cost_class=_X),
    Intrinsic("sigmoid", 1, "1 / (1 + exp(-x))", _sigmoid, cost_class=_X),
    Intrinsic("fabs", 1, "absolute value of a float", np.abs, llvm="fabs", libm="fabs", cuda="fabs"),
    Intrinsic("erf", 1, "error function", _erf, libm="erf", mvec=True, cuda="erf", cost_class=_X),
    Intrinsic("floor", 1, "round toward minus infinity", np.floor, llvm="floor", libm="floor", cuda="floor"),
    Intrinsic("ceil", 1, "round toward plus infinity", np.ceil, llvm="ceil", libm="ceil", cuda="ceil"),
    Intrinsic("round", 1, "round half to even", np.rint, llvm="roundeven", libm="rint", cuda="rint"),
    Intrinsic("sin", 1, "sine (radians)", np.sin, llvm="sin", libm="sin", mvec=True, cuda="sin",
              cuda_fast="__sinf", cost_class=_X),
    Intrinsic("cos", 1, "cosine (radians)", np.cos, llvm="cos", libm="cos", mvec=True, cuda="cos",
              cuda_fast="__cosf", cost_class=_X),
    Intrinsic("exp2", 1, "2 to the x", np.exp2, llvm="exp2", libm="exp2", mvec=True, cuda="exp2",
              cost_class=_X),
    Intrinsic("log2", 1, "base-2 logarithm", np.log2, llvm="log2", libm="log2", mvec=True, cuda="log2",
              cuda_fast="__log2f", cost_class=_X),
    Intrinsic("log10", 1, "base-10 logarithm", np.log10, llvm="log10", libm="log10", mvec=True,
              cuda="log10", cuda_fast="__log10f", cost_class=_X),
    Intrinsic("trunc", 1, "round toward zero", np.trunc, llvm="trunc", libm="trunc", cuda="trunc"),
    Intrinsic("abs", 1, "absolute value", np.abs, llvm="fabs", libm="fabs",
              cuda="fabs", int_args=True, te_function=False),
    Intrinsic("atan", 1, "arc tangent, in (-pi/2, pi/2)", np.arctan, libm="atan", mvec=True, cuda="atan",
              cost_class=_X),
    Intrinsic("atan2", 2, "atan2(y, x): the angle of the point (x, y), in [-pi, pi]", np.arctan2,
              libm="atan2", mvec=True, cuda="atan2", cost_class=_X),
    # The CPU emits BinaryOp pow as llvm.pow directly (no libmvec: mvec stays False).
    Intrinsic("pow", 2, "x to the y (the binary op pow)", np.power, llvm="pow", libm="pow",
              cuda="pow", cuda_fast="__powf", cost_class=_X, operator=True, te_function=False),
)

INTRINSIC_BY_NAME: dict[str, Intrinsic] = {row.name: row for row in INTRINSIC_TABLE}
# The names a Call node may carry (pow is a BinaryOp), in table order.
CALL_INTRINSICS: tuple[str, ...] = tuple(row.name for row in INTRINSIC_TABLE if not row.operator)
MAX_CALL_ARITY = max(INTRINSIC_BY_NAME[name].arity for name in CALL_INTRINSICS)
EXPENSIVE_CALLS: frozenset[str] = frozenset(
    row.name for row in INTRINSIC_TABLE if row.cost_class == EXPENSIVE and not row.operator)
EXPENSIVE_OPERATORS: frozenset[str] = frozenset(
    row.name for row in INTRINSIC_TABLE if row.cost_class == EXPENSIVE and row.operator)


# -- the JSON docs ---------------------------------------------------------------------

DOC_BEGIN = "<!-- intrinsics: generated from scheduler_core/ir/intrinsics.py; do not edit -->"
DOC_END = "<!-- intrinsics: end -->"


def schema_doc_section() -> str:
    """The intrinsic section of docs/dag_json_schema.md (markdown, markers included)."""
    lines = [DOC_BEGIN, "", "| `name` | `args` | meaning |", "|---|---|---|"]
    for row in INTRINSIC_TABLE:
        if not row.operator:
            kind = "float or integer" if row.int_args else "float"
            lines.append(f"| `{row.name}` | {row.arity}, {kind} | {row.doc} |")
    return "\n".join(lines + ["", DOC_END])


def doc_section_of(text: str) -> str:
    """The generated section of a document's ``text`` (markers included); ValueError if absent."""
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError("no generated intrinsic section in the document")
    return text[start:end + len(DOC_END)]


def rewrite_doc(path: pathlib.Path) -> None:
    """Replace the intrinsic section of the markdown file ``path`` by :func:`schema_doc_section`."""
    text = path.read_text()
    path.write_text(text.replace(doc_section_of(text), schema_doc_section()))


if __name__ == "__main__":
    rewrite_doc(pathlib.Path(__file__).resolve().parents[2] / "docs" / "dag_json_schema.md")
