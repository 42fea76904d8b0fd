"""Factor lists and factorization schemes of split lengths (Ansor's ``SplitFactorizationMemo``).

    extent, n_lengths, max_innermost --factorization_schemes--> [(l1, ..., ln), ...]

A scheme gives the trip counts of the ``n_lengths`` inner pieces of a split,
outermost first (the ``lengths`` of an inner-to-outer SplitStep); their product
divides ``extent`` and the last one is at most ``max_innermost``.  Results are
memoized: InitFillTileSize and MutateTileSize ask the same questions many times.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4096)
def factors_of(n: int) -> tuple:
    """The divisors of ``n`` (a positive int), ascending.  ``factors_of(12) == (1, 2, 3, 4, 6, 12)``."""
    if n < 1:
        raise ValueError(f"factors_of needs a positive integer, got {n}")
    out = set()
    i = 1
    while i * i <= n:
        if n % i == 0:
            out.add(i)
            out.add(n // i)
        i += 1
    return tuple(sorted(out))


@lru_cache(maxsize=4096)
def factorization_schemes(extent: int, n_lengths: int, max_innermost: int) -> tuple:
    """Every ``n_lengths``-tuple of split lengths whose product divides ``extent`` and whose
    last entry is ``<= max_innermost`` (Ansor's GetFactorizationSchemes, a DFS over divisors).

    Parameters
    ----------
    extent : int, the extent of the split iterator (>= 1)
    n_lengths : int, the number of lengths of the SplitStep (>= 1)
    max_innermost : int, the bound on the innermost length

    Returns a tuple of tuples, never empty (all ones is always a scheme).
    """
    out: list = []
    stack: list = []

    def dfs(remaining: int) -> None:
        if len(stack) == n_lengths:
            if stack[-1] <= max_innermost:
                out.append(tuple(stack))
            return
        for f in factors_of(remaining):
            stack.append(f)
            dfs(remaining // f)
            stack.pop()

    dfs(extent)
    return tuple(out)


__all__ = ["factors_of", "factorization_schemes"]
