"""Passive holding moments of the DAS3 arm (sim/fitting/das3_passive.py): the moments are checked by playing the solved
rest state in the plant, not by the optimiser's numbers."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from sim.analysis import static_opt as so
from sim.das3.model import N_LOADS, N_MUS
from sim.fitting import das3_passive as dp

DEG = math.pi / 180
HOLD_S, STEP_S = 0.2, 0.001


@pytest.fixture(scope="module")
def arm_horizontal(model):
    """The base posture raised to 90 deg elevation: gravity pulls the arm down with the longest lever."""
    return dp.holding_moments(model, dataclasses.replace(dp.base_posture(model), elevation=90 * DEG))


def _drift(model, hold: dp.Holding, moments) -> float:
    """Largest joint-angle change (rad) after HOLD_S in the plant from the rest state, u = 0, these moments."""
    from sim.das3.plant import Plant

    loads = np.zeros(N_LOADS)
    loads[:so.N_MOMENTS] = moments
    plant = Plant(model, step_s=STEP_S, initial_state=hold.x)
    plant.set_load_vector(loads)
    u = np.zeros(N_MUS)
    for _ in range(round(HOLD_S / STEP_S)):
        plant.step(u)
    return float(np.max(np.abs(plant.x[:11] - hold.x[:11])))


def test_holding_moments_keep_the_arm_still_in_the_plant(model, arm_horizontal):
    """At the published equilibrium nothing is needed; at 90 deg elevation the solved moments hold the passive
    arm (and the girdle) still for HOLD_S in the plant with zero excitation, and without them it falls."""
    rest = dp.holding_moments(model, dp.base_posture(model))
    assert rest.checks.passed and np.max(np.abs(rest.moments)) < 1e-6
    h = arm_horizontal
    assert h.checks.passed and h.checks.eom_max_nm < 1e-6 and np.all(h.x[so.IA:] == 0.0)
    assert _drift(model, h, h.moments) < 1e-6
    assert _drift(model, h, np.zeros(so.N_MOMENTS)) > 1 * DEG


def test_holding_moment_lifts_the_horizontal_arm(arm_horizontal):
    """Gravity lowers the arm, so the moment that holds it at 90 deg works towards elevation: M_th_z > 0, and
    the generalised force on the elevation is that moment."""
    h = arm_horizontal
    assert h.moments[1] > 1.0
    assert h.generalized_forces[1] == h.moments[1]


def test_generalised_forces_are_the_virtual_work_of_the_moments(model):
    """Each unit moment's generalised forces on the GH angles, mapped to the thoracohumeral angles (girdle
    held), are those of dp.generalized_forces: the two Y moments couple through cos(elevation)."""
    posture = so.Posture(45 * DEG, 60 * DEG, 20 * DEG, 60 * DEG, 90 * DEG)
    rest, z, _ = so.rest_problem(model, posture, None, None, None, so.N_MOMENTS)
    r = rest.at(z)
    B = rest._moment_matrix(r.x, rest.loads_of(z))            # d f_eom / dM, exact
    gh = list(so.GH_DOFS)
    on_th = np.linalg.solve(r.J_th[:, gh].T, B[gh, :3])
    expected = np.array([dp.generalized_forces(np.eye(5)[k], 60 * DEG)[:3] for k in range(3)]).T
    np.testing.assert_allclose(on_th, expected, atol=1e-9)
