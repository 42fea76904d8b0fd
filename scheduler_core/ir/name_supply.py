"""Fresh names: a name not yet taken in one scope (TVM's ``NameSupply::FreshName``,
``include/tvm/ir/name_supply.h``).

Every pass that invents names (the schedule printer's Python variables, the graph
builder's values, the GPU lowering's buffers, the CUDA printer's identifiers) keeps the
names it has given in a set and asks :func:`fresh_name` for the next one.
"""

from __future__ import annotations


def fresh_name(base: str, taken: set, sep: str = "_") -> str:
    """``base`` if it is not in ``taken``, else the first of ``base{sep}1``, ``base{sep}2``, ...
    that is not; the name returned is added to ``taken``.

    Example: with ``taken = {"x", "x_1"}``, ``fresh_name("x", taken)`` is ``"x_2"``.
    """
    name, n = base, 1
    while name in taken:
        name, n = f"{base}{sep}{n}", n + 1
    taken.add(name)
    return name
