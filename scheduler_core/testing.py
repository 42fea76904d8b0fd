"""Test helpers with TVM's spellings (``tvm.testing.assert_allclose``)."""

from __future__ import annotations

import numpy as np


def _as_numpy(x) -> np.ndarray:
    """``x`` as a numpy array: NDArrays through ``.numpy()``, anything else via ``np.asanyarray``."""
    if hasattr(x, "numpy") and callable(x.numpy) and not isinstance(x, np.ndarray):
        return x.numpy()
    return np.asanyarray(x)


def assert_allclose(actual, desired, rtol: float = 1e-7, atol: float = 0.0) -> None:
    """Assert ``|actual - desired| <= atol + rtol * |desired|`` elementwise, shapes equal.

    actual, desired: NDArrays, numpy arrays or array-likes.  Unlike numpy's own
    function the shapes must match exactly (no broadcasting), as in TVM.
    Raises ``AssertionError`` with numpy's report of the mismatching elements.
    """
    a, d = _as_numpy(actual), _as_numpy(desired)
    if a.shape != d.shape:
        raise AssertionError(f"shape mismatch: actual {a.shape}, desired {d.shape}")
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, verbose=True)
