"""The passive-load history of a run (sim.analysis.passive_limits.passive_load_history): contact depth and conoid
elongation from the kinematics alone, checked against the plant's own multibody evaluation."""
from __future__ import annotations

import numpy as np

from sim.analysis.passive_limits import passive_load_history, rest_reference
from sim.analysis.rest_model import contact_function
from sim.das3.kernels.step import IA, evaluate, new_plant_work
from sim.das3.model import N_DOF, N_LOADS, N_STATES


def _plant_values(model, q):
    """E of TS, AI and the conoid length from the plant's evaluation (sim.das3.kernels) at the posture q."""
    W = new_plant_work(model.arrays)
    x = np.array(model.equilibrium_state)
    x[:N_DOF] = q
    evaluate(model.arrays, x, np.zeros(N_STATES), x[IA:], np.zeros(N_LOADS), W)
    return contact_function(model.arrays, W), float(np.linalg.norm(W.mb.conoid_PI[:, 0] - W.mb.conoid_PO[:, 0]))


def test_history_matches_the_plants_own_contact_and_conoid(model):
    rng = np.random.default_rng(3)
    q0 = np.array(model.equilibrium_state[:N_DOF])
    q = q0 + rng.normal(0.0, 0.15, size=(5, N_DOF))
    history = passive_load_history(model, q)
    rest_length = rest_reference(model).conoid_length_m
    for k in range(len(q)):
        e, length = _plant_values(model, q[k])
        np.testing.assert_allclose(history.contact_e[k], e, rtol=0, atol=1e-12)
        assert abs(history.conoid_elongation_m[k] - (length - rest_length)) < 1e-12


def test_the_published_equilibrium_sits_at_the_rest_depth_with_no_elongation(model):
    history = passive_load_history(model, np.array(model.equilibrium_state[:N_DOF])[None, :])
    assert abs(history.contact_e[0].min() - history.contact_e_min) < 1e-12
    assert abs(history.conoid_elongation_m[0]) < 1e-12
    assert history.conoid_elongation_max_m == 7.7e-3
