"""The plant's bits do not depend on the CPU it was compiled for: a recording made on the lab PC replays bit for
bit on a laptop or a cluster node. numba compiles for the host CPU, so a sum whose order the compiler may
choose (a reassociated, vectorised reduction) would follow the CPU's vector width; the kernels fix every order
in the source instead. Checked here by compiling the plant for the generic x86-64 target (SSE2, two-wide
vectors, no FMA) in a child process and comparing its trajectory with the host-compiled one (the generic kernels
in a cache of their own, which the suite's warm-up fills while the host's kernels compile:
``helpers.plant_trajectory``)."""
from __future__ import annotations

import os
import subprocess
import sys
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


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (numba not yet imported) with ``env`` over this one's environment, less any
    NUMBA_DISABLE_INTEL_SVML of ours."""
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_INTEL_SVML"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**base, **env})


def test_importing_sim_keeps_intel_svml_out_of_the_kernels():
    """SVML's vector exp/log/pow differ from the C library's in the last bits, and a loop uses them only where it
    vectorises: sim switches them off before numba is imported, for this process and the processes it starts."""
    out = _child("import sim, os, numba; print(os.environ['NUMBA_DISABLE_INTEL_SVML'], numba.config.DISABLE_INTEL_SVML,"
                 " numba.config.USING_SVML)")
    assert out.returncode == 0 and out.stdout.split() == ["1", "1", "False"], out.stderr
    chosen = _child("import sim, os; print(os.environ['NUMBA_DISABLE_INTEL_SVML'])", NUMBA_DISABLE_INTEL_SVML="0")
    assert chosen.stdout.split() == ["0"], chosen.stderr          # the user's own setting wins


def test_numba_imported_first_with_svml_is_warned_about():
    """Too late to switch SVML off once numba has loaded it: importing sim says so (SVML simulated: pip's llvmlite
    has none)."""
    out = _child("import numba; numba.config.USING_SVML = True; import sim")
    assert out.returncode == 0 and "RuntimeWarning" in out.stderr and "SVML" in out.stderr, out.stderr
    quiet = _child("import numba; import sim")
    assert quiet.returncode == 0 and "SVML" not in quiet.stderr, quiet.stderr
