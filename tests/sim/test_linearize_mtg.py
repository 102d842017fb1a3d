"""The reduced MTG arm's linear model (sim.linear.mtg): against a small-step simulation of the plant, its static
gain against the arm's own rest solution, its output rows against the frame's kinematics, and its refusals."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.das3.model import load_model
from sim.linear.mtg import IA, IQD, MtgLinear
from sim.linear.operating import (
    LinearizeError,
    dof_states,
    excitation_inputs,
    hold_posture,
    linearize,
    output_matrices,
    parse_posture,
    reduced_states,
)
from sim.linear.reduce import step_response
from sim.mtg.arm import new_mtg_work
from sim.mtg.model import load_mtg_model
from sim.mtg.plant import MtgPlant
from sim.mtg.step import refresh_outputs

ELBOW = 3
STEP = 0.001
STEP_REL_ERROR = 0.02
"""Stated bound: the linear model's coordinate trajectories vs the plant's over 0.3 s after a 0.001 excitation step
of the elbow flexor at the flexor-held 90 deg posture, relative to the elbow's largest change (0.58 deg;
docs/analyses/linearize.md)."""


@pytest.fixture(scope="module")
def model():
    return load_mtg_model(load_model())


@pytest.fixture(scope="module")
def flexor(model):
    return excitation_inputs(model, ["elbow_flexor"])


@pytest.fixture(scope="module")
def held(model, flexor):
    """The rest state with the elbow at 90 deg, held by the elbow flexor."""
    return hold_posture(model, flexor, parse_posture(model, "ELx=90"))


def test_held_posture_is_a_rest_state_at_the_target(model, held):
    x0, v0 = held
    assert x0[ELBOW] == pytest.approx(math.radians(90.0), abs=1e-8) and 0.0 < v0[0] < 0.1
    plant = MtgPlant(model, step_s=0.002, initial_state=x0)
    u = np.zeros(model.n_muscles)
    u[model.muscle_names.index("elbow_flexor")] = v0[0]
    for _ in range(250):
        plant.step(u)
    assert np.max(np.abs(plant.x - x0)) < 1e-9                  # the plant stays there


def test_linear_model_predicts_a_small_step_of_the_plant(model, flexor, held):
    x0, v0 = held
    lm = linearize(model, x0, flexor, v0)
    assert lm.residual_max < 1e-10 and lm.A.shape == (20, 20) and np.max(np.linalg.eigvals(lm.A).real) < 0.0
    dt = 0.0005
    plant = MtgPlant(model, step_s=dt, initial_state=x0)
    u1 = flexor.excitation(v0 + STEP)[0]
    moved = []
    for _ in range(round(0.3 / dt)):
        plant.step(u1)
        moved.append(plant.x[:IQD] - x0[:IQD])
    moved = np.array(moved)
    lin = step_response(lm.A, lm.B, np.eye(20)[:IQD], np.zeros((IQD, 1)), dt, moved.shape[0], [STEP])[1:]
    peak = np.max(np.abs(moved[:, ELBOW]))
    assert math.degrees(peak) > 0.3
    assert np.max(np.abs(moved - lin)) / peak < STEP_REL_ERROR


def test_static_gain_matches_the_arms_rest_solution(model, held):
    """-A^-1 B du against the difference of two rest postures the arm's own solver finds (least squares on Q)."""
    x0, _ = held
    inputs = excitation_inputs(model)
    u0 = x0[IA:].copy()
    lm = linearize(model, x0, inputs, u0)
    view = MtgLinear(model)
    for name in ("elbow_flexor", "elbow_extensor", "elevator"):
        du = np.zeros(model.n_muscles)
        du[model.muscle_names.index(name)] = 1e-4
        moved = view.rest_state(u0 + du, x_guess=x0) - view.rest_state(u0 - du, x_guess=x0)
        predicted = -np.linalg.solve(lm.A, lm.B @ (2 * du))
        np.testing.assert_allclose(predicted[:IQD], moved[:IQD], rtol=1e-4, atol=1e-4 * np.max(np.abs(moved)))


def test_outputs_follow_the_frame(model, held):
    x0, _ = held
    C, y0, names, notes = output_matrices(model, x0, "q:ELx,q:GHz,qdot:GHz,th_angles,hand_position")
    assert names[:3] == ("q_ELx", "q_GHz", "qdot_GHz") and notes
    np.testing.assert_array_equal(C[0], np.eye(1, 20, ELBOW)[0])               # a coordinate: exact
    np.testing.assert_array_equal(C[2, IQD:IA], C[1, :IQD])                    # GH rate = J(q) qdot
    np.testing.assert_array_equal(C[3:6, :IQD], np.eye(5)[:3])                 # thoracohumeral angles
    W = new_mtg_work(model.arrays.body_mass.shape[0], model.n_muscles)
    dx = np.zeros(20)
    dx[:IQD] = [1e-4, -2e-4, 1.5e-4, 3e-4, -1e-4]
    refresh_outputs(model.arrays, W, x0 + dx)
    hand, gh = W.hand_position.copy(), W.q11[7]
    refresh_outputs(model.arrays, W, x0)
    assert np.max(np.abs(C[6:9] @ dx - (hand - W.hand_position))) < 1e-7        # to second order in dx
    assert abs(C[1] @ dx - (gh - W.q11[7])) < 1e-7


def test_a_crushing_hand_load_rests_the_arm_on_its_range_stops(model):
    """10 kN on the hand: least squares stalls, the arm falls onto its stops and is balanced there."""
    loads = np.zeros(len(model.load_names))
    loads[model.load_names.index("hand_force_y")] = -1e4
    x = MtgLinear(model).rest_state(np.zeros(model.n_muscles), loads)
    assert np.max(np.abs(model.generalized_forces(x[:IQD], None, None, loads))) <= 1e-9
    A = model.arrays
    assert x[1] < A.stop_lo[1] and x[ELBOW] < A.stop_lo[ELBOW]   # elevation and elbow pressed past their stops


def test_reduction_keeps_the_elbow_and_the_driven_activations(model, flexor, held):
    x0, v0 = held
    lm = linearize(model, x0, flexor, v0, "q:ELx")
    keep = reduced_states(model, ["ELx"], lm.B)
    assert keep == [ELBOW, IQD + ELBOW, IA + model.muscle_names.index("elbow_flexor")]
    assert dof_states(model, ["elbow_flexion"]) == keep[:2]


def test_bad_requests_are_refused(model, flexor, held, monkeypatch):
    x = np.array(model.equilibrium_state)
    x[ELBOW] += 0.2                                            # not at rest
    with pytest.raises(LinearizeError, match="no equilibrium") as refused:
        linearize(model, x, flexor, np.zeros(1))
    assert "--posture" in str(refused.value) and "equilibrium --out" not in str(refused.value)  # DAS3's only
    with pytest.raises(LinearizeError, match="elbow_flexor, a row"):   # excitation above the activation
        linearize(model, held[0], flexor, held[1] + 0.01)
    with monkeypatch.context() as patch:                       # the arm's rest solution finds no posture
        patch.setattr(model, "rest_posture", lambda *args, **kwargs: None)
        with pytest.raises(LinearizeError, match="no rest posture under the operating inputs"):
            MtgLinear(model).rest_state(np.zeros(model.n_muscles))
    with pytest.raises(LinearizeError, match="20 values"):
        linearize(model, x[:12], flexor, np.zeros(1))
    with pytest.raises(LinearizeError, match="no muscle groups"):
        excitation_inputs(model, ["elbow_flexor"], grouped=True)
    with pytest.raises(LinearizeError, match="unknown MTG 'biceps'"):
        excitation_inputs(model, ["biceps"])
    with pytest.raises(LinearizeError, match="not DOF=deg"):
        parse_posture(model, "GHz=20")                        # a derived GH angle is no coordinate of this arm
    with pytest.raises(LinearizeError, match="cannot hold"):
        hold_posture(model, flexor, parse_posture(model, "ELx=150"))
