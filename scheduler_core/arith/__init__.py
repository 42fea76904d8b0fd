"""Integer arithmetic over the IR's expressions: the one toolbox every pass uses (TVM's arith).

    const_int_bound   ConstIntBound(min, max) of an integer expression given its variables' ranges
    int_set           symbolic Interval(lo, extent), interval(e, env), union, const_range
    linear_form       sum(coef * atom) + const, with split/fuse pairs joined as an option
    divmod_form       floordiv/floormod by constants: simplified by ranges, or a normal form
    lp                exact bounds of a linear form under linear constraints (LP relaxation)
    enumeration       the exact range by enumerating few points (numpy)

A floor between ``ir`` (the expressions) and ``dag``: it imports only ``ir``.  A range analysis,
a linear form or an LP defined anywhere but here is refused by tests/test_layers.py.
"""

from .const_int_bound import ConstIntBound, const_int_bound, dtype_range, fits
from .int_set import Infeasible, Interval, const_range, interval, point, union
from .linear_form import canonical, from_linear, joined_linear_form, linear_form

__all__ = ["ConstIntBound", "Infeasible", "Interval", "canonical", "const_int_bound", "const_range",
           "dtype_range", "fits", "from_linear", "interval", "joined_linear_form", "linear_form",
           "point", "union"]
