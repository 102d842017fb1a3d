"""A contracture on the reduced MTG arm (sim.mtg.contracture): the contracted DAS3 elements' extra passive moment on
each coordinate they cross, tabulated and stepped, and the rest posture it gives against the DAS3 arm's own."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.das3.config import ModelConfig
from sim.das3.model import element_values, load_model
from sim.fitting.das3_passive import PLANE_SWEEP_ELEVATION_RAD, SWEEPS_DEG
from sim.mtg import contracture as mc
from sim.mtg.arm import generalized_forces, new_mtg_work
from sim.mtg.model import mtg_model_for
from sim.mtg.plant import MtgPlant
from sim.mtg.table import hermite_table
from sim.patient import Patient

ELBOW = 3
DAS3_ELBOW = 9
BICEPS = ("bicl", "bicb")
BRACHIALIS = ("brachialis",)
ABLE = Patient()


def _mtg(groups, shift=0.2):
    return mtg_model_for(ModelConfig(contracture=tuple((g, shift) for g in groups)), ABLE)


def _row(table, c):
    return table.start[c], table.step[c], table.n_knots[c], table.value[c], table.slope[c]


@pytest.fixture(scope="module")
def able():
    return mtg_model_for(ModelConfig(), ABLE)


@pytest.fixture(scope="module")
def tight():
    return _mtg(BRACHIALIS)


def test_the_table_is_the_contracted_elements_passive_moment(able, tight):
    """Between knots the spline gives the moment computed from the elements (their passive equilibrium at the
    path length) and its slope the moment's derivative."""
    das3 = able.das3
    elements = np.flatnonzero(element_values((("brachialis", 0.2),), tuple(das3.muscle_names), 0.0))
    contracted = das3.arrays.mus[elements].copy()
    contracted[:, mc.MUS_PEESLACK] -= 0.2
    base = mc.table_posture(able.equilibrium_state[:5], ELBOW)
    row = _row(tight.contracture, ELBOW)
    for deg in (20.3, 47.9, 75.1, 110.7):
        theta = base.copy()
        theta[ELBOW] = math.radians(deg)
        direct = mc.contracture_moment(das3, able.arrays, theta, ELBOW, elements, contracted)
        value, slope = hermite_table(*row, theta[ELBOW])
        assert value == pytest.approx(direct, rel=2e-3, abs=2e-3), deg
        up, down = (hermite_table(*row, theta[ELBOW] + d)[0] for d in (1e-6, -1e-6))
        assert slope == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-4), deg
    assert hermite_table(*row, math.radians(20.0))[0] > 1.0        # the shortened brachialis pulls the elbow up
    for k in (5, 15, 25):                                           # the knots' slopes: the moment's derivative
        theta = base.copy()
        knot = row[0] + k * row[1]
        moments = []
        for d in (1e-3, -1e-3):
            theta[ELBOW] = knot + d
            moments.append(mc.contracture_moment(das3, able.arrays, theta, ELBOW, elements, contracted))
        assert row[4][k] == pytest.approx((moments[0] - moments[1]) / 2e-3, rel=1e-3, abs=1e-3), k


def _elbow_force_and_stiffness(model, posture, elbow_rad: float) -> tuple[float, float]:
    q = np.array(posture[:5])
    q[ELBOW] = elbow_rad
    work = new_mtg_work(model.arrays.body_mass.shape[0], model.n_muscles)
    generalized_forces(model.arrays, q, np.zeros(5), np.zeros(model.n_muscles), np.zeros(len(model.load_names)), work)
    return work.Q[ELBOW], work.K[ELBOW, ELBOW]


def test_the_step_takes_the_contracture_moment_and_its_stiffness(able, tight):
    """The generalised force gains the table's moment, and the implicit step's stiffness its derivative."""
    row = _row(tight.contracture, ELBOW)
    for deg in (20.0, 35.5, 50.0):
        elbow = math.radians(deg)
        (q_t, k_t), (q_a, k_a) = (_elbow_force_and_stiffness(m, able.equilibrium_state, elbow) for m in (tight, able))
        value, slope = hermite_table(*row, elbow)
        assert q_t - q_a == pytest.approx(value, rel=1e-9, abs=1e-9) and value > 0.1
        assert k_t - k_a == pytest.approx(slope, rel=1e-9, abs=1e-9) and slope < 0.0


def test_an_element_slack_at_rest_adds_nothing_there(able):
    """The biceps' passive elements stay slack about the rest posture even 0.2 Lceopt shorter: the DAS3 arm's rest
    elbow moves by less than a degree, and so does the MTG arm's (a shift of the MTG passive curve moved it 8 deg)."""
    biceps = _mtg(BICEPS)
    rest = able.equilibrium_state[ELBOW]
    assert abs(hermite_table(*_row(biceps.contracture, ELBOW), rest)[0]) < 0.05
    assert abs(math.degrees(biceps.equilibrium_state[ELBOW] - rest)) < 1.0


@pytest.mark.parametrize("groups", [BRACHIALIS, BICEPS + BRACHIALIS])
def test_the_rest_elbow_moves_as_far_as_the_das3_arms(able, groups):
    """The contracted MTG arm's rest elbow moves by the DAS3 arm's re-solved rest elbow's shift, within 4 deg."""
    das3_able = load_model()
    das3 = load_model(ModelConfig(contracture=tuple((g, 0.2) for g in groups)))
    das3_shift = math.degrees(das3.equilibrium_state[DAS3_ELBOW] - das3_able.equilibrium_state[DAS3_ELBOW])
    mtg_shift = math.degrees(_mtg(groups).equilibrium_state[ELBOW] - able.equilibrium_state[ELBOW])
    assert das3_shift > 10.0 and mtg_shift == pytest.approx(das3_shift, abs=4.0), (das3_shift, mtg_shift)


def test_the_plant_settles_at_the_contracted_rest(able, tight):
    """Stepped from the able-bodied rest posture with no excitation, the contracted arm flexes to its own rest."""
    plant = MtgPlant(tight, 0.004, initial_state=able.equilibrium_state)
    for _ in range(750):
        plant.step(np.zeros(tight.n_muscles))
    assert math.degrees(plant.x[ELBOW] - tight.equilibrium_state[ELBOW]) == pytest.approx(0.0, abs=0.2)
    assert plant.x[ELBOW] > able.equilibrium_state[ELBOW] + math.radians(10.0)


def test_a_coordinate_no_contracted_element_crosses_has_no_table(tight):
    assert tight.contracture.n_knots[ELBOW] > 0 and not np.delete(tight.contracture.n_knots, ELBOW).any()


def test_the_tables_span_the_passive_sweeps_of_the_mtg_curves():
    for c, name in enumerate(("plane_of_elevation", "elevation", "axial_rotation")):
        lo, hi, _ = SWEEPS_DEG[name]
        assert np.degrees(mc.TABLE_RANGES_RAD[c]) == pytest.approx((lo, hi))
    assert mc.PLANE_ELEVATION_RAD == PLANE_SWEEP_ELEVATION_RAD


def test_an_unknown_element_name_is_refused_not_applied_to_every_element():
    with pytest.raises(ValueError, match="unknown muscle element or group 'bicps'"):
        element_values((("bicps", 0.2),), tuple(load_model().muscle_names), 0.0)
