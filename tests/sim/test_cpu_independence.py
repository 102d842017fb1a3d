"""The plant's bits do not depend on the CPU it was compiled for: a recording made on the lab PC replays bit for
bit on a laptop or a cluster node. numba compiles for the host CPU, so a sum whose order the compiler may
choose (a reassociated, vectorised reduction) would follow the CPU's vector width; the kernels fix every order
in the source instead. Checked here by compiling the plant for the generic x86-64 target (SSE2, two-wide
vectors, no FMA) in a child process and comparing its trajectory with the host-compiled one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TRAJECTORY = """
import sys
import numpy as np
from sim.das3.model import load_model
from sim.das3.plant import Plant

model = load_model()
plant = Plant(model, 0.004)
rng = np.random.default_rng(11)
rows = []
for k in range(120):
    if k % 15 == 0:         # excitation jumps: the activation scheme's fibre correction runs too
        u = rng.uniform(0.0, 0.4, model.n_muscles)
    plant.step(u)
    out = plant.outputs
    rows.append(np.concatenate([plant.x, out.gh_force, out.th_angles, out.hand_position,
                                out.st_contact_force.ravel(), [out.gh_stability]]))
np.save(sys.argv[1], np.array(rows))
"""


def _trajectory(path: Path, **env: str) -> np.ndarray:
    subprocess.run([sys.executable, "-c", TRAJECTORY, str(path)], cwd=ROOT, env={**os.environ, **env}, check=True,
                   timeout=600)
    return np.load(path)


def test_plant_trajectory_is_bit_identical_for_generic_and_host_code(tmp_path):
    host = _trajectory(tmp_path / "host.npy")
    generic = _trajectory(tmp_path / "generic.npy", NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="")
    assert host.shape == (120, 298 + 3 + 3 + 3 + 6 + 1) and np.all(np.isfinite(host))
    assert np.any(host[-1] != host[0])          # the arm moved
    differ = np.flatnonzero(np.any(host.view(np.uint64) != generic.view(np.uint64), axis=1))
    assert differ.size == 0, f"first different step {differ[:1]}: max |difference| {np.max(np.abs(host - generic)):.3g}"
