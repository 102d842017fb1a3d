"""The shoulder rhythm (sim.analysis.rhythm): the de Groot & Brand (2001) regression as published, its exact
conversion from thorax-based angles to the DAS3 girdle angles, and its fit to the model's closed chain."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.analysis import rhythm as rh
from sim.das3.kinematics import frames
from sim.das3.model import CLAVICLE_FRAME, SCAPULA_FRAME

DEG = math.pi / 180


@pytest.fixture(scope="module")
def delft(model):
    return rh.load_rhythm("degroot2001", model)


def test_yzx_angles_invert_the_matrix():
    rng = np.random.default_rng(36)
    for _ in range(50):
        a = rng.uniform([-math.pi, -1.5, -math.pi], [math.pi, 1.5, math.pi])
        assert np.allclose(rh.yzx_angles(rh.yzx_matrix(a)), a, atol=1e-12)


def test_the_girdle_chain_is_the_models_own(model):
    """R_clavicle = YZX(SC) and R_scapula = YZX(SC) YZX(AC) are the plant's frames (release joints sc1..ac3)."""
    rng = np.random.default_rng(1)
    lo, hi = np.asarray(model.dof_ranges)[:6].T
    for _ in range(10):
        q = np.array(model.equilibrium_state[:11])
        q[:6] = rng.uniform(lo, hi)
        R, _ = frames(model.arrays, q)
        clav, scap = rh.thorax_from_girdle(q[:6])
        assert np.allclose(rh.yzx_matrix(clav), R[0, CLAVICLE_FRAME], atol=1e-12)
        assert np.allclose(rh.yzx_matrix(scap), R[0, SCAPULA_FRAME], atol=1e-12)


def test_thorax_angles_to_girdle_and_back_round_trip():
    rng = np.random.default_rng(2)
    for _ in range(50):
        clav = rng.uniform([-1.2, -0.3, -0.5], [0.2, 0.8, 1.5])
        scap = rng.uniform([-0.5, -0.8, -0.8], [1.2, 0.8, 0.8])
        back_clav, back_scap = rh.thorax_from_girdle(rh.girdle_from_thorax(clav, scap))
        assert np.allclose(back_clav, clav, atol=1e-12) and np.allclose(back_scap, scap, atol=1e-12)


@pytest.mark.parametrize("plane, elevation, expected", [
    (0.0, 30.0, (-36.5589, 13.3651, 26.2017, 19.3920, -2.9647)),
    (40.0, 90.0, (-46.2789, 18.9051, 28.8617, 39.9920, 6.9553)),
    (90.0, 120.0, (-47.5389, 20.2951, 34.3917, 47.9220, 11.0753)),
])
def test_the_regression_reproduces_its_equations(delft, plane, elevation, expected):
    """Clavicle y, z and scapula y, z, x (deg) worked by hand from the coefficients and the Delft rest posture."""
    clav, scap = delft.thorax_angles(plane * DEG, elevation * DEG)
    assert np.allclose(np.degrees(np.concatenate([clav, scap])), expected, atol=1e-4)


@pytest.mark.parametrize("elevation", [30.0, 90.0, 150.0])
def test_the_girdle_keeps_the_regressed_orientations(delft, elevation):
    clav, scap = delft.thorax_angles(0.0, elevation * DEG)
    back_clav, back_scap = rh.thorax_from_girdle(delft.girdle(0.0, elevation * DEG))
    assert np.allclose(back_clav[:2], clav, atol=1e-12) and np.allclose(back_scap, scap, atol=1e-12)


def test_the_clavicle_axial_rotation_turns_the_ac_joint_least(delft):
    """The closed-form SCx maximises trace(R_ac^T R_ac,rest): any other SCx turns the AC joint further."""
    g = delft.girdle(0.0, 60 * DEG)
    _, scap = rh.thorax_from_girdle(g)
    R_scap = rh.yzx_matrix(scap)
    R_rest = rh.yzx_matrix(delft.clavicle_rest).T @ rh.yzx_matrix(delft.scapula_rest)

    def agreement(x):
        Rc = rh.yzx_matrix([g[0], g[1], x])
        return np.trace((Rc.T @ R_scap).T @ R_rest)

    for dx in (-0.1, -1e-3, 1e-3, 0.1):
        assert agreement(g[2] + dx) < agreement(g[2])


def test_the_fit_meets_the_models_closed_chain(model, delft):
    """Scapula on the thorax and conoid as at rest, within the girdle ranges."""
    g = rh.fit_to_model(model, delft.girdle(0.0, 40 * DEG))
    rest = rh.chain_conditions(model, np.asarray(model.equilibrium_state[:6]))
    assert np.allclose(rh.chain_conditions(model, g), rest, atol=1e-8)
    assert not np.allclose(rh.chain_conditions(model, delft.girdle(0.0, 40 * DEG)), rest, atol=1e-3)
    lo, hi = np.asarray(model.dof_ranges)[:6].T
    eq = np.asarray(model.equilibrium_state[:6])
    assert np.all(g >= np.minimum(lo, eq) - 1e-9) and np.all(g <= np.maximum(hi, eq) + 1e-9)


def test_an_unknown_rhythm_is_refused(model):
    with pytest.raises(ValueError, match="rhythm must be one of"):
        rh.load_rhythm("inman1944", model)


def test_short_paths_names_the_paths_outside_the_path_model(model):
    q = np.array(model.equilibrium_state[:11])
    assert rh.short_paths(model, q) == []
    margins = rh.path_margins(model, q[:6], q)
    i = int(np.argmin(margins))
    q_bad = q.copy()
    q_bad[:6] = np.radians([-25.78, 16.04, 18.78, 35.28, -23.89, -17.95])
    names = [n for n, _ in rh.short_paths(model, q_bad)]
    assert names and all(mm > 0 for _, mm in rh.short_paths(model, q_bad))
    assert margins[i] >= 0
