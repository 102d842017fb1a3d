"""The numba decorators of the plant's kernels: every kernel is compiled before the loop starts (``cache=True``)
and releases the GIL (``nogil=True``).

``kernel`` compiles without numba's reference-counting runtime (NRT, the private but stable ``_nrt`` flag):

- A kernel then cannot allocate: ``np.empty`` and friends are a compile error, so the real-time rule
  "no allocation in the step" is checked by the compiler, not only by a test.
- A call between kernels costs no reference counting. With the NRT, a callee increments and decrements,
  atomically, the count of every array it receives, including every member of a NamedTuple of arrays
  (the model has about fifty); inside per-muscle and per-frame loops that bookkeeping costs more than the
  arithmetic (``hil bench plant --json`` reports the phases).

``entry`` keeps the NRT for the few functions Python calls with a numba StructRef (the plant's bundle, the
tick's arrays); they only pass it on to a kernel, which reads it with ``sim.jit.bundle.borrowed_items``.

Both use ``error_model="numpy"``: a division by zero gives inf or NaN, which the step's finiteness
checks turn into a refused step (``sim.das3.kernels.step``), instead of a Python exception raised from inside a kernel,
and the compiler need not guard every division (the arithmetic, and so every result, is the same). Neither uses
``fastmath``: a reassociated sum would follow the CPU's vector width, and results must not depend on the CPU.
"""
from __future__ import annotations

import numpy as np
from numba import njit

kernel = njit(cache=True, nogil=True, boundscheck=False, _nrt=False, error_model="numpy")
entry = njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")


def writable(values) -> np.ndarray:
    """``values`` as the array type the kernels are compiled for from Python: float64, C-contiguous and
    writable; the array itself when it already is one, else a copy. numba compiles a function once per
    argument type, and read-only is part of the type: a read-only state (a model's published equilibrium)
    passed to an entry point would compile a second copy of every kernel below it (tens of seconds), and
    cache it beside the first."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.flags.c_contiguous and arr.flags.writeable:
        return arr
    return np.array(arr, dtype=np.float64, order="C")
