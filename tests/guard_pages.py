"""Arrays placed next to an inaccessible page, so that a read one element outside them faults."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np


def next_to_guard_page(a: np.ndarray, keep: list, at_end: bool = True) -> np.ndarray:
    """A copy of ``a`` whose last byte (``at_end``) or first byte touches a PROT_NONE page (there is
    one on each side).  ``keep`` holds the mapping: the copy is valid while ``keep`` lives."""
    page = mmap.PAGESIZE
    span = -(-a.nbytes // page) * page
    m = mmap.mmap(-1, span + 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base, page, 0) == 0 and libc.mprotect(base + page + span, page, 0) == 0
    keep.append(m)
    start = base + page + span - a.nbytes if at_end else base + page
    out = np.ctypeslib.as_array((ctypes.c_char * a.nbytes).from_address(start)).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out
