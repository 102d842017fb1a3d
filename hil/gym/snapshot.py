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

OWN_PACKAGES = ("hil.", "sim.", "drivers.")
"""Objects of these packages are walked into; others (numba dispatchers, numpy generators) are not."""
SCALARS = (bool, int, float, str, type(None))


class EngineSnapshot:
    """The writable arrays and scalar attributes reachable from ``roots`` (copied now, :meth:`restore`)."""

    def __init__(self, *roots) -> None:
        self.arrays: list[tuple[np.ndarray, np.ndarray]] = []
        self.scalars: list[tuple[object, str, object]] = []
        self._seen: set[int] = set()
        for root in roots:
            self._walk(root)
        del self._seen

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
                self.scalars.append((obj, name, attr))
            elif isinstance(attr, dict) and not attr and name != "__dict__":
                self.scalars.append((obj, name, {}))
            else:
                self._walk(attr)

    def restore(self) -> None:
        """Every array and scalar back to its snapshot value (in place; empty dicts emptied)."""
        for array, saved in self.arrays:
            np.copyto(array, saved)
        for obj, name, saved in self.scalars:
            current = vars(obj).get(name)
            if isinstance(saved, dict):
                if current:
                    current.clear()
            elif current is not saved and current != saved:
                object.__setattr__(obj, name, saved)
