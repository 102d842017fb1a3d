"""An engine's state as built, restored in place: an environment's reset without building the engine again.

Building a tick engine (model, plant, stimulation, safety, compiled tick arguments) takes far longer than an
episode's first steps; resetting restores every writable array the engine, its plant, stimulation, sensor and
safety rules hold (the compiled tick's arguments included) and their scalar attributes to the values they had
when the snapshot was taken. Arrays are restored in place, so the compiled tick's arguments stay valid. The
model's parameters are read-only arrays and are neither copied nor restored. A compiled bundle
(:class:`sim.jit.bundle.Bundle`) is not walked into: what it holds is held by the Python objects that built it
(the plant's workspace, the engine's arrays, the safety rules' states).
"""
from __future__ import annotations

import numpy as np
from numba.typed import List

from hil.gym.batch_kernels import copy_bytes
from hil.rt.tick_kernel import direct_call

OWN_PACKAGES = ("hil.", "sim.", "drivers.")
"""Objects of these packages are walked into; others (numba dispatchers, numpy generators) are not."""
SCALARS = (bool, int, float, str, type(None))


class EngineSnapshot:
    """The writable arrays and scalar attributes reachable from ``roots`` (copied now, :meth:`restore`).

    A restore is one compiled byte copy of the contiguous arrays (:func:`hil.gym.batch_kernels.copy_bytes`), a
    ``copyto`` of any other, and one dictionary update of each object's scalar attributes."""

    def __init__(self, *roots) -> None:
        self.arrays: list[tuple[np.ndarray, np.ndarray]] = []
        self.scalars: dict[int, tuple[object, dict, list[str]]] = {}
        """Per object: (the object, its scalar attributes' values, the names of its empty dicts)."""
        self._seen: set[int] = set()
        for root in roots:
            self._walk(root)
        del self._seen
        contiguous = [(a, saved) for a, saved in self.arrays if a.flags.c_contiguous]
        self._strided = [(a, saved) for a, saved in self.arrays if not a.flags.c_contiguous]
        self._targets = _byte_list([a for a, _ in contiguous])
        self._sources = _byte_list([saved for _, saved in contiguous])
        copy_bytes(self._targets, self._sources)
        self._copy = direct_call(copy_bytes, self._targets, self._sources)

    def _walk(self, value) -> None:
        if id(value) in self._seen:
            return
        self._seen.add(id(value))
        if isinstance(value, np.ndarray):
            if value.flags.writeable and value.size:
                self.arrays.append((value, value.copy()))
        elif isinstance(value, (tuple, list)):
            for item in value:
                self._walk(item)
        elif isinstance(value, dict):
            for item in value.values():
                self._walk(item)
        elif type(value).__module__.startswith(OWN_PACKAGES) and hasattr(value, "__dict__"):
            self._walk_object(value)

    def _walk_object(self, obj) -> None:
        for name, attr in vars(obj).items():
            if isinstance(attr, SCALARS):
                self._scalars_of(obj)[1][name] = attr
            elif isinstance(attr, dict) and not attr and name != "__dict__":
                self._scalars_of(obj)[2].append(name)
            else:
                self._walk(attr)

    def _scalars_of(self, obj) -> tuple[object, dict, list[str]]:
        return self.scalars.setdefault(id(obj), (obj, {}, []))

    def restore(self) -> None:
        """Every array and scalar back to its snapshot value (in place; empty dicts emptied)."""
        self._copy(self._targets, self._sources)
        for array, saved in self._strided:
            np.copyto(array, saved)
        for obj, saved, empty in self.scalars.values():
            attributes = vars(obj)
            attributes.update(saved)
            for name in empty:
                current = attributes.get(name)
                if current:
                    current.clear()


def _byte_list(arrays: list[np.ndarray]) -> List:
    """A numba typed list of the bytes of each C-contiguous array (views, so writing them writes the arrays)."""
    typed = List()
    for a in arrays:
        typed.append(a.reshape(-1).view(np.uint8))
    if not arrays:
        typed.append(np.zeros(0, np.uint8))
    return typed
