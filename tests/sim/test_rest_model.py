"""RestModel's output rows (GH stability, contact E, contact and conoid force magnitudes) against central
differences of the whole rest state at z."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import arm_posture

from sim.analysis import static_opt as so
from sim.analysis.rest_model import OutputJacobians
from sim.das3.model import LOAD_NAMES


@pytest.fixture(scope="module")
def rest_and_z(model):
    posture = arm_posture(model, 60.0)
    layout = so.layout_for(posture, so.N_MOMENTS)
    q0 = so.start_posture(model, posture, None)
    rest = so.RestModel(model, np.zeros(len(LOAD_NAMES)), q0, layout)
    alpha = np.random.default_rng(7).uniform(0.05, 0.4, so.N_MUS)
    z = np.concatenate([q0[list(layout.free_dofs)], alpha, [1.0, -2.0, 0.5, 3.0, 0.2]])
    return rest, z


def _values(r) -> dict:
    return {"stability": np.array([r.stability]), "contact_e": r.contact_e.copy(),
            "contact_force": np.array(r.contact_force_n, float), "conoid_force": np.array([r.conoid_force_n])}


def test_output_rows_match_central_differences_of_the_rest_state(rest_and_z):
    rest, z = rest_and_z
    rows = rest.output_jacobians(z)
    assert isinstance(rows, OutputJacobians)
    exact = {name: np.atleast_2d(getattr(rows, name)).copy() for name in ("stability", "contact_e", "contact_force",
                                                                          "conoid_force")}
    layout, h = rest.layout, 1e-6
    columns = list(range(layout.n_q)) + [layout.alpha.start + 4, layout.alpha.start + 60, layout.moments.start + 1]
    for k in columns:
        zp, zm = z.copy(), z.copy()
        zp[k] += h
        zm[k] -= h
        plus = _values(rest.at(zp))
        minus = _values(rest.at(zm))
        for name, J in exact.items():
            fd = (plus[name] - minus[name]) / (2 * h)
            np.testing.assert_allclose(J[:, k], fd, rtol=1e-4, atol=1e-6 * max(1.0, np.abs(fd).max()),
                                       err_msg=f"{name}, column {k}")


def test_contact_and_conoid_forces_are_the_plants_outputs(rest_and_z):
    rest, z = rest_and_z
    r = rest.at(z)
    np.testing.assert_allclose(r.contact_force_n, np.linalg.norm(r.outputs["contact_force"], axis=1), rtol=1e-12)
    assert r.conoid_force_n == pytest.approx(np.linalg.norm(r.outputs["conoid_force"]), rel=1e-12)
    assert r.conoid_force_n > 0.0 and np.all(r.contact_force_n > 0.0)


def test_output_rows_leave_the_workspace_at_z(rest_and_z):
    """The differences perturb the monomials and outputs in the shared workspace; they are restored."""
    rest, z = rest_and_z
    z = z.copy()
    z[rest.layout.alpha.start] += 1e-3          # a z whose rows are not cached yet
    r = rest.at(z)
    loa, mono = np.array(r.W.out.loa), np.array(r.W.mu.mono)
    rest.output_jacobians(z)
    np.testing.assert_array_equal(r.W.out.loa, loa)
    np.testing.assert_array_equal(r.W.mu.mono, mono)
