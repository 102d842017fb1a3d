"""A one-field numba StructRef used to pass (model arrays, workspace) to kernels as a single object.

Numba types and unboxes every argument of a call from Python, which for a named tuple of about a hundred
arrays costs far more per call than one StructRef holding the same tuple. Kernels read ``bundle.items``.
"""
from __future__ import annotations

from numba import njit, types
from numba.experimental import structref


@structref.register
class BundleType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Bundle(structref.StructRefProxy):
    """``Bundle(items)``: holds any numba-typable value, here ``(ModelArrays, PlantWork)``."""


structref.define_proxy(Bundle, BundleType, ["items"])


@njit(cache=True)
def new_bundle(items):
    """``Bundle(items)`` built in a cached kernel: the proxy's own constructor is compiled afresh in every
    process (numba does not cache it), which costs seconds per worker of a sweep."""
    return Bundle(items)
