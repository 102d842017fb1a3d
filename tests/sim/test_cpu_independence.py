"""The plant's bits do not depend on the CPU it was compiled for: a recording made on the lab PC replays bit for
bit on a laptop or a cluster node. numba compiles for the host CPU, so a sum whose order the compiler may
choose (a reassociated, vectorised reduction) would follow the CPU's vector width; the kernels fix every order
in the source instead. Checked here by compiling the plant for the generic x86-64 target (SSE2, two-wide
vectors, no FMA) in a child process and comparing its trajectory with the host-compiled one (the generic kernels
in a cache of their own, which the suite's warm-up fills while the host's kernels compile:
``helpers.plant_trajectory``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import plant_trajectory


def _trajectory(path: Path, generic: bool = False) -> np.ndarray:
    child = plant_trajectory(path, generic)
    _, err = child.communicate(timeout=600)
    assert child.returncode == 0, err
    return np.load(path)


def test_plant_trajectory_is_bit_identical_for_generic_and_host_code(tmp_path):
    host = _trajectory(tmp_path / "host.npy")
    generic = _trajectory(tmp_path / "generic.npy", generic=True)
    assert host.shape == (120, 298 + 3 + 3 + 3 + 6 + 1) and np.all(np.isfinite(host))
    assert np.any(host[-1] != host[0])          # the arm moved
    differ = np.flatnonzero(np.any(host.view(np.uint64) != generic.view(np.uint64), axis=1))
    assert differ.size == 0, f"first different step {differ[:1]}: max |difference| {np.max(np.abs(host - generic)):.3g}"
