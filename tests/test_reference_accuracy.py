"""Accuracy of the fixed-step Rosenbrock plant against a tightly toleranced variable-step reference.

The fidelity bar of the plant (spec "Integration"): the ramp test of the DAS3 release, all 138 excitations
u(t) = min(t / 0.5, 1) from the published equilibrium, simulated at h = 3 ms for 0.5 s, matches the
reference solution of the same implicit equations to < 0.2 deg RMS over the 11 joint angles.
"""
import math

import numpy as np
import pytest

from sim.model import N_DOF, N_MUS
from sim.plant import Plant
from sim.reference import simulate_reference

H = 0.003
T_RAMP = 0.5


def ramp(t: float) -> np.ndarray:
    return np.full(N_MUS, min(t / T_RAMP, 1.0))


@pytest.mark.slow
def test_ramp_matches_the_reference_solution(model):
    n_steps = math.ceil(T_RAMP / H - 1e-9)  # 167 steps: t = 0 ... 0.501 s
    t = H * np.arange(n_steps + 1)

    plant = Plant(model, step_s=H)
    q = np.empty((n_steps + 1, N_DOF))
    q[0] = plant.x[:N_DOF]
    for n in range(1, n_steps + 1):
        plant.step(ramp(t[n]))  # u_{n+1} = u(t_{n+1})
        q[n] = plant.x[:N_DOF]
    assert plant.clipped_total == 0

    x0 = np.array(model.equilibrium_state)
    t_ref, x_ref, info = simulate_reference(model, x0, ramp, t, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(t_ref, t, rtol=0, atol=1e-12)
    q_ref = x_ref[:, :N_DOF]
    assert np.all(np.isfinite(q_ref))

    err_deg = np.degrees(q - q_ref)
    rms_deg = float(np.sqrt(np.mean(err_deg ** 2)))
    per_dof = np.sqrt(np.mean(err_deg ** 2, axis=0))
    # the arm really moves over the test, so the comparison is not trivial
    motion_deg = float(np.max(np.abs(np.degrees(q_ref[-1] - q_ref[0]))))
    message = (f"RMS error {rms_deg:.4f} deg over {N_DOF} joint angles x {n_steps + 1} samples "
               f"(per DOF: {np.array2string(per_dof, precision=3)}; largest joint motion {motion_deg:.1f} deg; "
               f"reference: {info})")
    print(message)
    assert motion_deg > 5.0, message
    assert rms_deg < 0.2, message
