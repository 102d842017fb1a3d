"""The reduced MTG arm (sim.mtg.plant, sim.mtg.arm, sim.mtg.step): mass matrix, gravity and velocity terms against energy,
the stiff partial derivatives against finite differences, stability at 1-10 ms, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.das3.config import ModelConfig
from sim.das3.model import N_LOADS, load_model
from sim.das3.plant import InvalidInputError, PlantDivergedError
from sim.mtg.arm import bias_and_mass, generalized_forces, kinematics, mtg_torques, new_mtg_work
from sim.mtg.model import FORMAT, MtgModel, MtgParameterError, load_mtg_parameters, parse_mtg_parameters
from sim.mtg.plant import MtgPlant

DEG = math.pi / 180.0


def _entry(name, coord, direction, tau_max, pe0, pe1, opt=60.0):
    return {"name": name, "coordinate": coord, "direction": direction, "tau_max_nm": tau_max,
            "theta_opt_deg": opt, "theta_width_deg": 60.0, "omega_max_deg_s": 1000.0, "tv_eccentric": 1.2,
            "tv_half_concentric": 0.25, "theta_pe0_deg": pe0, "theta_pe1_deg": pe1, "beta": 0.1,
            "tact_s": 0.01, "tdeact_s": 0.04}


TEST_MTGS = [
    _entry("hf", "plane_of_elevation", 1, 60.0, -10.0, -50.0), _entry("he", "plane_of_elevation", -1, 60.0, 90.0, 130.0),
    _entry("el", "elevation", 1, 70.0, 40.0, 10.0), _entry("de", "elevation", -1, 120.0, 120.0, 160.0),
    _entry("ir", "axial_rotation", 1, 100.0, -60.0, -90.0), _entry("er", "axial_rotation", -1, 60.0, 60.0, 90.0),
    _entry("ef", "elbow_flexion", 1, 80.0, 30.0, 10.0), _entry("ee", "elbow_flexion", -1, 60.0, 130.0, 150.0),
    _entry("pr", "pronation", 1, 6.0, 60.0, 30.0), _entry("su", "pronation", -1, 10.0, 120.0, 150.0)]
"""A test arm with passive curves whose limits lie inside the test postures, so every term is exercised."""


@pytest.fixture(scope="module")
def das3():
    return load_model(ModelConfig())


@pytest.fixture(scope="module")
def model(das3):
    return MtgModel(das3, parse_mtg_parameters({"format": FORMAT, "mtgs": TEST_MTGS}))


POSTURE = np.array([40.0, 60.0, -20.0, 70.0, 60.0]) * DEG
VELOCITY = np.array([0.7, -0.5, 1.1, 1.3, -0.9])


def _work(model):
    return new_mtg_work(model.arrays.body_mass.shape[0], model.n_muscles)


def _energy(model, q, qd):
    """(kinetic energy from the bodies' velocities, potential energy) at (q, qd); the COM velocity by central
    differences of its position along qd, independently of the mass matrix."""
    A, w0 = model.arrays, _work(model)
    kinematics(A, q, qd, w0)
    bias_and_mass(A, q, qd, np.zeros(N_LOADS), w0)
    eps = 1e-6
    wp, wm = _work(model), _work(model)
    bias_and_mass(A, q + eps * qd, qd, np.zeros(N_LOADS), wp)
    bias_and_mass(A, q - eps * qd, qd, np.zeros(N_LOADS), wm)
    kinetic = potential = 0.0
    for b in range(A.body_mass.shape[0]):
        s = A.body_seg[b]
        v = (wp.com[b] - wm.com[b]) / (2 * eps)
        R = w0.R[s]
        w_local = R.T @ w0.omega[s]
        kinetic += 0.5 * A.body_mass[b] * v @ v + 0.5 * w_local @ A.body_inertia[b] @ w_local
        potential -= A.body_mass[b] * A.body_weight[b] * A.gravity @ w0.com[b]
    return kinetic, potential, w0


def test_mass_matrix_gives_the_bodies_kinetic_energy(model):
    kinetic, _, work = _energy(model, POSTURE, VELOCITY)
    assert 0.5 * VELOCITY @ work.M @ VELOCITY == pytest.approx(kinetic, rel=1e-7)
    assert np.allclose(work.M, work.M.T) and np.all(np.linalg.eigvalsh(work.M) > 0.0)


def test_gravity_is_minus_the_potential_gradient(model):
    work = _work(model)
    bias_and_mass(model.arrays, POSTURE, np.zeros(5), np.zeros(N_LOADS), work)
    eps = 1e-6
    for j in range(5):
        dq = np.zeros(5)
        dq[j] = eps
        grad = (_energy(model, POSTURE + dq, np.zeros(5))[1] - _energy(model, POSTURE - dq, np.zeros(5))[1]) / (2 * eps)
        assert work.Q[j] == pytest.approx(-grad, abs=1e-6)


def _free_arm_energy_drift(model, h=2e-4, duration=0.5):
    """Relative change of T + V of the arm without MTGs or damping (RK4 on M qdd = Q_bias)."""
    A = model.arrays

    def accel(q, qd):
        w = _work(model)
        bias_and_mass(A, q, qd, np.zeros(N_LOADS), w)
        return np.linalg.solve(w.M, w.Q)

    q, qd = POSTURE.copy(), VELOCITY.copy()
    e0 = sum(_energy(model, q, qd)[:2])
    for _ in range(int(round(duration / h))):
        k1q, k1v = qd, accel(q, qd)
        k2q, k2v = qd + 0.5 * h * k1v, accel(q + 0.5 * h * k1q, qd + 0.5 * h * k1v)
        k3q, k3v = qd + 0.5 * h * k2v, accel(q + 0.5 * h * k2q, qd + 0.5 * h * k2v)
        k4q, k4v = qd + h * k3v, accel(q + h * k3q, qd + h * k3v)
        q = q + h / 6 * (k1q + 2 * k2q + 2 * k3q + k4q)
        qd = qd + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
    kinetic0 = _energy(model, POSTURE, VELOCITY)[0]
    return (sum(_energy(model, q, qd)[:2]) - e0) / kinetic0


def test_velocity_terms_conserve_the_free_arms_energy(model):
    """Coriolis and centrifugal terms (qdd = 0 accelerations) consistent with M: T + V constant without MTGs."""
    assert abs(_free_arm_energy_drift(model)) < 1e-6


def test_stiff_derivatives_match_finite_differences(model):
    A, w = model.arrays, _work(model)
    a = np.linspace(0.1, 0.9, model.n_muscles)
    mtg_torques(A, POSTURE, VELOCITY, a, w)
    exact = w.coord_torque.copy()
    eps = 1e-6
    for c in range(5):
        for col, vec in ((1, "q"), (2, "qd")):
            step = np.zeros(5)
            step[c] = eps
            q_p, q_m = (POSTURE + step, POSTURE - step) if vec == "q" else (POSTURE, POSTURE)
            v_p, v_m = (VELOCITY, VELOCITY) if vec == "q" else (VELOCITY + step, VELOCITY - step)
            mtg_torques(A, q_p, v_p, a, w)
            tp = w.coord_torque[c, 0]
            mtg_torques(A, q_m, v_m, a, w)
            assert exact[c, col] == pytest.approx((tp - w.coord_torque[c, 0]) / (2 * eps), rel=1e-5, abs=1e-6)
    generalized_forces(A, POSTURE, VELOCITY, a, np.zeros(N_LOADS), w)
    axes = w.axis[:3]
    assert np.allclose(w.K[:3, :3], (axes @ axes.T) * exact[:3, 1])
    assert w.D[3, 3] == pytest.approx(exact[3, 2] - A.damping[3])


def test_rest_state_is_an_equilibrium(model):
    plant = MtgPlant(model, 0.004)
    rest = plant.x.copy()
    for _ in range(250):
        plant.step(np.zeros(model.n_muscles))
    assert np.max(np.abs(plant.x[:5] - rest[:5])) < 1e-6


def test_a_rest_solve_that_stalls_lets_the_arm_fall_to_rest(model):
    """From a plane of elevation where no MTG's passive moment acts, least squares cannot move it (its row holds the
    moment the axial rotation couples in): the arm falls to rest and is balanced there."""
    start = model.das3_posture.copy()
    start[0] = math.radians(-0.7)
    x = model._rest_state(start)
    assert np.max(np.abs(model.generalized_forces(x[:5]))) <= 1e-9
    assert x[0] < math.radians(-10.0)                 # in the horizontal flexor's passive range (theta_0^PE -10 deg)


def _switching_run(model, h, duration=1.0, level=0.5):
    """Each MTG excited in turn for 0.1 s; the coordinates at the end."""
    plant = MtgPlant(model, h)
    u = np.zeros(model.n_muscles)
    for n in range(int(round(duration / h))):
        u[:] = 0.0
        u[int(n * h / 0.1) % model.n_muscles] = level
        plant.step(u)
    return plant.x[:5].copy()


@pytest.fixture(scope="module")
def switching_reference(model):
    return _switching_run(model, 6.25e-5)


@pytest.mark.parametrize("step_s", [0.001, 0.004, 0.01])
def test_stable_at_1_to_10_ms(model, switching_reference, step_s):
    """Finite, and within a few degrees of a 62.5 us solution even at 10 ms."""
    result = _switching_run(model, step_s)
    assert np.all(np.isfinite(result))
    assert np.max(np.abs(result - switching_reference)) < 30.0 * DEG


def test_first_order_convergence(model, switching_reference):
    """The linearly implicit Euler step is first order: halving the step halves the error."""
    err = [np.max(np.abs(_switching_run(model, h) - switching_reference)) for h in (0.004, 0.002, 0.001)]
    assert 1.6 < err[0] / err[1] < 2.6 and 1.6 < err[1] / err[2] < 2.6
    assert err[2] < 3.0 * DEG


def test_elbow_flexor_flexes_the_elbow(model):
    plant = MtgPlant(model, 0.004)
    start = plant.outputs.q[9]
    u = np.zeros(model.n_muscles)
    u[model.params.index("ef")] = 0.6
    for _ in range(250):
        plant.step(u)
    assert plant.outputs.q[9] > start + 20 * DEG
    assert plant.x[10 + model.params.index("ef")] > 0.5


def test_outputs_follow_the_das3_conventions(model, das3):
    """Frozen girdle, GH angles that rebuild the thoracohumeral rotation, elbow and forearm as coordinates."""
    plant = MtgPlant(model, 0.004, initial_state=np.concatenate([POSTURE, VELOCITY, np.zeros(model.n_muscles)]))
    out = plant.outputs
    assert np.array_equal(out.q[:6], das3.equilibrium_state[:6])
    assert np.allclose(out.th_angles, POSTURE[:3])
    gh = out.q[6:9]
    ry = lambda t: np.array([[math.cos(t), 0, math.sin(t)], [0, 1, 0], [-math.sin(t), 0, math.cos(t)]])  # noqa: E731
    rz = lambda t: np.array([[math.cos(t), -math.sin(t), 0], [math.sin(t), math.cos(t), 0], [0, 0, 1]])  # noqa: E731
    humerus = model.arrays.scapula_R @ ry(gh[0]) @ rz(gh[1]) @ ry(gh[2])
    assert np.allclose(humerus, ry(POSTURE[0]) @ rz(POSTURE[1]) @ ry(POSTURE[2]), atol=1e-12)
    assert out.q[9] == POSTURE[3] and out.q[10] == POSTURE[4]
    assert math.isnan(out.gh_stability) and np.all(np.isnan(out.gh_force))


def test_bad_excitation_is_rejected_without_touching_the_state(model):
    plant = MtgPlant(model, 0.004)
    before = plant.x.copy()
    u = np.zeros(model.n_muscles)
    u[3] = math.nan
    with pytest.raises(InvalidInputError, match="de"):
        plant.step(u)
    with pytest.raises(InvalidInputError):
        plant.step(np.zeros(3))
    assert np.array_equal(plant.x, before)
    plant.step(np.full(model.n_muscles, 2.0))
    assert plant.clipped_total == model.n_muscles


def test_the_yzy_singularity_stops_the_plant_at_the_last_good_state(model):
    x0 = np.zeros(model.n_states)
    x0[:5] = [0.0, 2.0 * DEG, 0.0, 1.2, 1.0]
    plant = MtgPlant(model, 0.004, initial_state=x0)
    plant.set_loads(moments=[0.0, -3000.0, 0.0, 0.0, 0.0])     # drives the elevation through 0
    with pytest.raises(PlantDivergedError, match="singularity"):
        for _ in range(10):
            plant.step(np.zeros(model.n_muscles))
    assert math.sin(plant.x[1]) > 0.0
    with pytest.raises(PlantDivergedError, match="reset"):
        plant.step(np.zeros(model.n_muscles))


def test_bad_initial_state_and_parameter_files_are_rejected(model, tmp_path):
    with pytest.raises(InvalidInputError):
        MtgPlant(model, 0.004, initial_state=np.zeros(3))
    with pytest.raises(InvalidInputError, match="elevation"):
        MtgPlant(model, 0.004, initial_state=np.zeros(model.n_states))
    bad = [dict(e) for e in TEST_MTGS]
    bad[0]["tau_max_nm"] = -1.0
    with pytest.raises(MtgParameterError, match="hf"):
        parse_mtg_parameters({"format": FORMAT, "mtgs": bad})
    swapped = [dict(e) for e in TEST_MTGS]
    swapped[6]["theta_pe0_deg"], swapped[6]["theta_pe1_deg"] = 0.0, 10.0
    with pytest.raises(MtgParameterError, match="rise against"):
        parse_mtg_parameters({"format": FORMAT, "mtgs": swapped})
    with pytest.raises(MtgParameterError, match="exactly one"):
        parse_mtg_parameters({"format": FORMAT, "mtgs": TEST_MTGS[:-1]})
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(MtgParameterError, match="JSON"):
        load_mtg_parameters(tmp_path / "x.json")
