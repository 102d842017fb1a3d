"""Fidelity of the DAS3 plant to the published release and to the plant spec (das3-model.md).

Check values: the published passive equilibrium is an equilibrium of the implemented residual; the GH
joint force, its glenoid angles and stability, and the scapulothoracic contact forces match the spec;
the exact structured Jacobians agree with finite differences of the residual (also with loads, with joints
beyond their range and with the hand's weight switched on); the thoracohumeral angles and the hand
position agree with an independent forward kinematics written from the spec.
"""
import json
import math
from importlib import resources

import numpy as np
import pytest
from helpers import rms

from sim.das3.dynamics import jacobians, residual
from sim.das3.equilibrium import solve_equilibrium
from sim.das3.model import N_DOF, N_LOADS, N_MUS, N_STATES
from sim.das3.plant import Plant

G = 9.80665
IQ, IQD, IS, IA = 0, N_DOF, 2 * N_DOF, 2 * N_DOF + N_MUS


def static_residual(model, x):
    """f(x, 0, 0) without loads."""
    return residual(model, x, np.zeros(N_STATES), np.zeros(N_MUS))


# ---------------------------------------------------------------------------------------------------
# Published equilibrium and the spec's check values
# ---------------------------------------------------------------------------------------------------

def test_published_equilibrium_is_an_equilibrium(model):
    x = model.equilibrium_state
    assert x.shape == (N_STATES,)
    assert np.max(np.abs(x[IQD:IS])) < 1e-12  # at rest
    f = static_residual(model, x)
    assert f.shape == (N_STATES,)
    assert rms(f) < 1e-8, f"residual RMS at the published equilibrium: {rms(f):.3g}"


def test_hand_weight_breaks_the_published_equilibrium(model_hw):
    # the release's equilibrium was computed without the hand's weight (spec "Multibody")
    f = static_residual(model_hw, model_hw.equilibrium_state)
    assert rms(f) > 1e-3


def _gh_from_plant(model):
    out = Plant(model).outputs
    return (out.gh_force.copy(), float(out.gh_angles[0]), float(out.gh_angles[1]), out.gh_stability,
            out.st_contact_force.copy())


def _gh_from_solver(model):
    r = solve_equilibrium(model)
    return r.gh_force, r.gh_theta, r.gh_phi, r.gh_stability, r.st_contact_force


@pytest.mark.parametrize("source", [_gh_from_plant, _gh_from_solver], ids=["plant", "solve_equilibrium"])
def test_gh_check_values_at_the_published_equilibrium(model, source):
    force, theta, phi, stability, contact = source(model)
    assert stability == pytest.approx(-0.62, abs=0.01)
    np.testing.assert_allclose(force, [-47.8, 30.4, 0.5], atol=0.5)
    assert math.degrees(theta) == pytest.approx(26.0, abs=0.5)  # superior in the glenoid
    assert math.degrees(phi) == pytest.approx(7.6, abs=0.5)
    # stability is eq. 9 of the angles with the published rim half-angles
    rim_t, rim_p = model.config.gh_rim_theta, model.config.gh_rim_phi
    assert stability == pytest.approx((theta / rim_t) ** 2 + (phi / rim_p) ** 2 - 1.0, abs=1e-12)
    # both scapulothoracic contact points are in contact (about 250 N each)
    assert contact.shape == (2, 3)
    norms = np.linalg.norm(contact, axis=1)
    assert np.all((norms > 150.0) & (norms < 350.0)), norms


def test_arm_weight(model):
    segs = {s["name"]: s for s in _model_json()["segments"]}
    arm = sum(segs[name]["mass"] for name in ("humerusr", "ulnar", "radiusr"))
    assert arm * G == pytest.approx(30.8, abs=0.1)
    # the kernels use the same masses
    assert model.arrays.body_mass[2:5].sum() == pytest.approx(arm, rel=1e-15)


def test_hand_weight_switch_adds_exactly_the_hand_weight_to_the_gh_force(model, model_hw):
    # Same state, so the same muscle forces: the GH force differs only by the hand's weight, which the
    # humerus passes on to the scapula (spec "Outputs": hand weight consistent with the model setting).
    assert list(model.arrays.body_weight) == [1, 1, 1, 1, 1, 0]
    assert list(model_hw.arrays.body_weight) == [1, 1, 1, 1, 1, 1]
    hand_mass = {s["name"]: s for s in _model_json()["segments"]}["handr"]["mass"]
    x = model.equilibrium_state
    f0 = Plant(model).outputs.gh_force.copy()
    f1 = Plant(model_hw).outputs.gh_force.copy()
    R_scapula = forward_kinematics(x[IQ:IQD])["R"][6]  # scapula -> thorax
    expected = R_scapula.T @ np.array([0.0, -hand_mass * G, 0.0])
    np.testing.assert_allclose(f1 - f0, expected, atol=1e-9)


# ---------------------------------------------------------------------------------------------------
# Exact Jacobians vs finite differences
# ---------------------------------------------------------------------------------------------------

LOADS = np.array([
    [1.5, -0.8, 0.6, 2.0, -0.7, 0.12, 15.0, 4.0, -12.0, 3.0],
    [-0.9, 1.2, -1.1, -1.5, 0.9, 0.20, -8.0, -6.0, 9.0, -5.0],
])


def random_state(model, rng):
    """Near the published equilibrium: q +- 0.1 rad, qdot ~ 1 rad/s, s x U(0.9, 1.1), a ~ U(0, 1)."""
    x = np.array(model.equilibrium_state)
    x[IQ:IQD] += rng.uniform(-0.1, 0.1, N_DOF)
    x[IQD:IS] = rng.uniform(-1.0, 1.0, N_DOF)
    x[IS:IA] *= rng.uniform(0.9, 1.1, N_MUS)
    x[IA:] = rng.uniform(0.0, 1.0, N_MUS)
    return x


def away_from_kinks(model, x, xdot, margin=2e-3):
    """Move s and sdot (in place) so that no muscle is within ``margin`` of a kink of its force curves.

    The series and parallel elastic elements and the force-velocity curve are C1 but have a jump in the
    second derivative (SEE at zero elongation, PEE at its slack length, F2 at zero velocity). A
    finite-difference stencil straddling one of these kinks is inaccurate; the Jacobian is not.
    """
    mus = _model_json()["muscles"]
    lceopt = np.array([m["lceopt"] for m in mus])
    slack = np.array([m["lslack"] for m in mus])
    pee_slack = np.array([m["PEEslack"] for m in mus])
    b = np.sin([m["pennopt"] for m in mus])
    L = Plant(model, initial_state=x).outputs.muscle_length.copy()
    s = x[IS:IA]
    e = (L - s * lceopt - slack) / lceopt  # SEE elongation / Lceopt
    near = np.abs(e) < margin
    s[near] = (L[near] - slack[near]) / lceopt[near] - np.where(e[near] < 0.0, -2.0, 2.0) * margin
    xp = np.sqrt(s ** 2 + b ** 2) - pee_slack  # PEE elongation
    near = np.abs(xp) < margin
    s[near] = np.sqrt((pee_slack[near] + np.where(xp[near] < 0.0, -2.0, 2.0) * margin) ** 2 - b[near] ** 2)
    e = (L - s * lceopt - slack) / lceopt
    assert np.min(np.abs(e)) > margin and np.min(np.abs(np.sqrt(s ** 2 + b ** 2) - pee_slack)) > margin
    sd = xdot[IS:IA]
    sd[np.abs(sd) < margin] = 2.0 * margin


def central_difference(fun, v, h):
    """Fourth-order central differences of fun (R^n -> R^298) at v, relative step h."""
    J = np.empty((N_STATES, v.size))
    w = v.copy()
    for k in range(v.size):
        hk = h * max(1.0, abs(v[k]))

        def at(d):
            w[k] = v[k] + d
            return fun(w)

        J[:, k] = (8.0 * (at(hk) - at(-hk)) - (at(2 * hk) - at(-2 * hk))) / (12.0 * hk)
        w[k] = v[k]
    return J


def assert_columns_close(J, J_fd, what, tol=1e-5):
    scale = np.max(np.abs(J_fd), axis=0) + 1.0
    err = np.max(np.abs(J - J_fd), axis=0) / scale
    k = int(np.argmax(err))
    assert err[k] < tol, f"{what}: column {k}, scaled error {err[k]:.3g}"


JACOBIAN_CASES = {
    # name: (seed, load row, joints beyond their range, hand weight)
    "near_equilibrium_a": (11, 0, False, False),
    "near_equilibrium_b": (12, 1, False, False),
    "joint_stops": (13, 0, True, False),
    "hand_weight": (14, 1, False, True),
}


@pytest.mark.parametrize("case", list(JACOBIAN_CASES))
def test_exact_jacobians_match_finite_differences(model, model_hw, case):
    seed, load_row, stops, hand_weight = JACOBIAN_CASES[case]
    m = model_hw if hand_weight else model
    rng = np.random.default_rng(seed)
    x = random_state(m, rng)
    lo, hi = m.dof_ranges[:, 0], m.dof_ranges[:, 1]
    if stops:
        # SCz and ELx below, ACx and PSy above their range (quadratic joint stops active)
        x[IQ + 1] = lo[1] - 0.05
        x[IQ + 9] = lo[9] - 0.04
        x[IQ + 5] = hi[5] + 0.03
        x[IQ + 10] = hi[10] + 0.02
    q = x[IQ:IQD]
    outside = (q < lo) | (q > hi)
    assert outside.sum() >= (4 if stops else 0)
    # the finite-difference stencil must not straddle a joint stop (piecewise quadratic)
    assert np.min(np.minimum(np.abs(q - lo), np.abs(q - hi))) > 2e-3
    xdot = rng.normal(0.0, 1.0, N_STATES)
    u = rng.uniform(0.0, 1.0, N_MUS)
    away_from_kinks(m, x, xdot)
    loads = LOADS[load_row]
    assert loads.shape == (N_LOADS,) and np.all(loads != 0.0) and loads[5] > 0.0

    f, dfdx, dfdxd, dfdu = jacobians(m, x, xdot, u, loads)
    assert dfdx.shape == dfdxd.shape == (N_STATES, N_STATES) and dfdu.shape == (N_STATES, N_MUS)
    np.testing.assert_array_equal(f, residual(m, x, xdot, u, loads))
    h = 3e-4
    assert_columns_close(dfdx, central_difference(lambda v: residual(m, v, xdot, u, loads), x, h), "df/dx")
    assert_columns_close(dfdxd, central_difference(lambda v: residual(m, x, v, u, loads), xdot, h), "df/dxdot")
    assert_columns_close(dfdu, central_difference(lambda v: residual(m, x, xdot, v, loads), u, h), "df/du")


def test_loads_enter_the_residual(model):
    # every one of the 10 loads changes f_eom (so the Jacobian test above exercises all of them)
    rng = np.random.default_rng(5)
    x = random_state(model, rng)
    xdot, u = np.zeros(N_STATES), np.zeros(N_MUS)
    for k in range(N_LOADS):
        before, after = np.zeros(N_LOADS), np.zeros(N_LOADS)
        after[k] = 1.0
        if k == 5:  # arm support distance: only matters with a support force
            before[6] = after[6] = 10.0
            after[5] = 0.1
        if k == 6:  # arm support force, 10 cm below the elbow
            before[5] = after[5] = 0.1
        changed = residual(model, x, xdot, u, after) - residual(model, x, xdot, u, before)
        assert np.max(np.abs(changed[IQD:IS])) > 1e-3, f"load {k} has no effect"
        assert np.all(changed[:IQD] == 0.0) and np.all(changed[IS:] == 0.0)


# ---------------------------------------------------------------------------------------------------
# Kinematic outputs against an independent forward kinematics (spec "Kinematics", "Outputs")
# ---------------------------------------------------------------------------------------------------

def _model_json():
    return json.loads(resources.files("sim.data").joinpath("das3_model.json").read_text())


def _rot(axis, angle):
    """Rotation matrix about a unit axis (Rodrigues)."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * K + (1.0 - math.cos(angle)) * K @ K


def forward_kinematics(q):
    """Frames after each DOF (index j + 1; 0 = thorax) straight from the release's joint table."""
    joints = {j["name"]: j for j in _model_json()["joints"]}
    chain = [("sc1", "r1_axis"), ("sc2", "r2_axis"), ("sc3", "r3_axis"),
             ("ac1", "r1_axis"), ("ac2", "r2_axis"), ("ac3", "r3_axis"),
             ("gh1", "r2_axis"), ("gh2", "r3_axis"), ("gh3", "r2_axis"),
             ("hu", "r1_axis"), ("ur", "r1_axis")]
    R, P = [np.eye(3)], [np.zeros(3)]
    for j, (name, axis) in enumerate(chain):
        P.append(P[-1] + R[-1] @ np.array(joints[name]["location"], float))
        R.append(R[-1] @ _rot(joints[name][axis], q[j]))
    hand = {s["name"]: s for s in _model_json()["segments"]}["handr"]
    hand_local = np.array(joints["rc"]["location"], float) + np.array(hand["mass_center"], float)
    return {"R": R, "P": P, "hand": P[11] + R[11] @ hand_local}


def _yzy(a, b, c):
    return _rot([0, 1, 0], a) @ _rot([0, 0, 1], b) @ _rot([0, 1, 0], c)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_thoracohumeral_angles_and_hand_position(model, seed):
    x = np.array(model.equilibrium_state)
    if seed is not None:  # another posture inside the DOF ranges
        rng = np.random.default_rng(seed)
        lo, hi = model.dof_ranges[:, 0], model.dof_ranges[:, 1]
        x[IQ:IQD] = lo + (hi - lo) * rng.uniform(0.3, 0.7, N_DOF)
    plant = Plant(model, initial_state=x)
    out = plant.outputs
    angles = np.array(out.th_angles)
    assert np.all(np.isfinite(angles))
    assert 0.0 <= angles[1] <= math.pi
    fk = forward_kinematics(x[IQ:IQD])
    R = fk["R"][9]  # humerus orientation in the thorax frame
    # spec formulas ...
    expected = [math.atan2(R[2, 1], -R[0, 1]), math.acos(R[1, 1]), math.atan2(R[1, 2], R[1, 0])]
    np.testing.assert_allclose(angles, expected, atol=1e-10)
    # ... are the YZY decomposition R = Ry(plane) Rz(elevation) Ry(axial rotation)
    np.testing.assert_allclose(_yzy(*angles), R, atol=1e-10)
    np.testing.assert_allclose(out.hand_position, fk["hand"], atol=1e-12)


def test_thoracohumeral_angles_at_the_published_equilibrium_are_plausible(model):
    plane, elevation, axial = np.degrees(Plant(model).outputs.th_angles)
    # the passive arm hangs beside the trunk: low elevation
    assert 0.0 < elevation < 30.0
    assert -180.0 <= plane <= 180.0 and -180.0 <= axial <= 180.0
