"""The bundle's items read without reference counting (sim.jit.bundle.borrowed_items): the same arrays as
``bundle.items``, written through, call after call. A wrong payload layout would read garbage or crash, so
the kernel runs in a child process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json
import numpy as np
from sim.jit.bundle import borrowed_items, new_bundle
from numba import njit

@njit(_nrt=False)   # as sim.jit.kernel.kernel, uncached (the source is a string)
def scale_into(bundle, v):
    (x, pair), k = borrowed_items(bundle)
    for i in range(x.shape[0]):
        pair[1][i] = x[i] * v + k
    return x.shape[0] + pair[0].shape[0]

x, first, second = np.arange(1.0, 6.0), np.zeros(2), np.zeros(5)
bundle = new_bundle(((x, (first, second)), 10))
sizes = [scale_into(bundle, float(n)) for n in range(2000)]
print(json.dumps({"sizes": sorted(set(sizes)), "second": second.tolist(), "x": x.tolist()}))
"""


def test_borrowed_items_are_the_bundles_arrays_call_after_call():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["sizes"] == [7]
    assert doc["x"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert doc["second"] == [1999.0 * v + 10 for v in (1.0, 2.0, 3.0, 4.0, 5.0)]
