"""Engin's directional passive shoulder moments (sim/das3/engin.py, model option shoulder_passive = "das3+engin")
against the thesis "Human Joint Modelling" (its equations and tables written out again here, not taken
from the module), finite differences of the plant residual, an arm released beyond the sinus, the config
key, ``hil model info``, the figure command and a recording's header."""
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import hil as _hil
from test_model_fidelity import assert_columns_close, away_from_kinks, central_difference, random_state

from sim.das3 import engin as en
from sim.das3.config import ConfigError, ModelConfig, load_model_config
from sim.das3.dynamics import jacobians, residual
from sim.das3.equilibrium import contraction_states
from sim.das3.model import N_LOADS, N_MUS, N_STATES, load_model
from sim.das3.plant import Plant

REPO = Path(__file__).resolve().parents[2]
ENGIN = ModelConfig(shoulder_passive="das3+engin")

# ---- the thesis, written out independently of sim/das3/engin.py -------------------------------------------
# Listing App. G (= Table D.1 and Table E.1 subject-based sample means).
CF = (1.49936, -0.09257, -0.24640, -0.29356, 0.18743, 0.58589, 0.45557, 0.00899, -0.42918, -0.47066)
C = (-21.49310, -2.03660, 2.21320, 19.60600, 5.15610, 15.78320, -1.36790, -4.13520, 0.21110, -0.60590)
PHI_N, THETA_N = math.radians(59.29), math.radians(79.08)     # Table 3.2 sample means
ONSET = math.radians(3.0)                                     # the module's documented onset width


def sinus(phi):
    """RHS of subroutine MOMENTSA (eq. 3.1 expanded), rad."""
    s, c = math.sin(phi), math.cos(phi)
    return (CF[0] + CF[1] * s + CF[2] * c + CF[3] * s * c + CF[4] * c * c + CF[5] * s * c * c + CF[6] * c ** 3
            + CF[7] * s * c ** 3 + CF[8] * c ** 4 + CF[9] * s * c ** 4)


def resistance(p, q):
    """Eq. 3.3: Engin's expansion in the modified joint axes p = theta cos phi, q = theta sin phi, Nm."""
    return (C[0] * math.hypot(p, q) + C[1] * p + C[2] * q + C[3] * p * p + C[4] * p * q + C[5] * q * q
            + C[6] * p ** 3 + C[7] * p * p * q + C[8] * p * q * q + C[9] * q ** 3)


def joint_axes_thorax():
    """Rows x_jt, y_jt, z_jt: App. C's N (torso axes x anterior, y right, z down), then in DAS3 thorax
    coordinates (X lateral, Y superior, Z posterior): x_fb = -Z, y_fb = X, z_fb = -Y."""
    cp, sp, ct, st = math.cos(PHI_N), math.sin(PHI_N), math.cos(THETA_N), math.sin(THETA_N)
    n = np.array([[ct * cp, ct * sp, -st], [-sp, cp, 0.0], [st * cp, st * sp, ct]])
    fb_in_thorax = np.array([[0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    return n @ fb_in_thorax


AXES = joint_axes_thorax()
U0 = np.array([0.0, 0.0, -1.0])                                # arm along +x_fb (App. F, Fig. F.20)
A0 = np.array([math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0])  # flexion axis: lateral, turned 45 deg internally


def arm(phi, theta):
    """Humerus direction (thorax frame) at Engin's spherical angles."""
    return np.array([math.sin(theta) * math.cos(phi), math.sin(theta) * math.sin(phi), math.cos(theta)]) @ AXES


def turned(v, axis, angle):
    """v rotated by angle about the unit axis (Rodrigues)."""
    return v * math.cos(angle) + np.cross(axis, v) * math.sin(angle) + axis * (axis @ v) * (1 - math.cos(angle))


def flexion_axis(u, psi):
    """The elbow flexion axis at torsion angle psi: A0 carried from U0 to u by the smallest rotation, then
    turned by psi about the proximal axis -u (internal rotation > 0)."""
    k = np.cross(U0, u)
    carried = A0 if np.linalg.norm(k) < 1e-15 else turned(A0, k / np.linalg.norm(k), math.acos(U0 @ u))
    return turned(carried, -u, psi)


def smooth_step(depth):
    t = min(max(depth / ONSET, 0.0), 1.0)
    return t * t * (3 - 2 * t)


@pytest.fixture(scope="module")
def engin_model():
    return load_model(ENGIN)


def moment(model, u, a):
    J = np.zeros((3, 7))
    en.engin_moment(model.arrays.engin, u, a, J)
    return J[:, 0]


# ---- (1) values from the thesis ----------------------------------------------------------------------

# Table H.4: (p1, q1) as printed and the analytic moment of eq. 3.2 (Nm). The last row is printed with
# phi = 5.5 rad; its q1 and value belong to phi = 2 pi - 5.5 (a sign lost in the thesis).
TABLE_H4 = [((1.560, 0.0), 5.814), ((2.000, 0.0), 20.42), ((2.500, 0.0), 42.34), ((1.056, 1.056), 6.357),
            ((1.429, 1.442), 22.77), ((1.936, 1.953), 51.30), ((0.002, 2.090), 23.13), ((0.002, 2.500), 41.00),
            ((-1.221, 1.212), 6.537), ((-1.640, 1.627), 22.46), ((-2.151, 2.134), 47.73), ((-1.160, 0.002), 5.930),
            ((-1.560, 0.002), 22.51), ((-2.500, 0.004), 95.12), ((-1.121, -1.128), 25.20),
            ((-1.650, -1.660), 87.02), ((-0.004, -1.660), 6.951), ((-0.005, -2.030), 22.04),
            ((-0.006, -2.500), 48.93), ((1.417, -1.411), 21.61), ((1.701, 1.693), 36.62)]


def test_written_out_equations_reproduce_the_thesis_tables():
    """The transcription above reproduces Table H.4's analytic column and the boundary of Table H.2; and,
    as the module's docstring says, f is positive and rising beyond the sinus up to theta = pi."""
    for (p, q), value in TABLE_H4:
        assert resistance(p, q) == pytest.approx(value, abs=0.02)
    for phi, theta in [(0.0, 1.4668), (1.571, 1.4069), (3.142, 1.0483), (4.712, 1.5919)]:
        assert sinus(phi) == pytest.approx(theta, abs=1e-4)
    for phi in np.linspace(0, 2 * math.pi, 73):
        th = np.linspace(sinus(phi), math.pi, 60)
        f = [resistance(t * math.cos(phi), t * math.sin(phi)) for t in th]
        assert min(f) > 1.0 and np.all(np.diff(f) > 0)


# Table H.2: (phi, theta, the program's moment > 0) on eight constant-phi lines across the boundary.
TABLE_H2 = [(0.0, t, o) for t, o in [(1.25, 0), (1.344, 0), (1.563, 1), (1.45, 0), (1.475, 1), (1.46, 0), (1.47, 1)]] \
    + [(0.785, t, o) for t, o in [(1.25, 0), (1.35, 0), (1.45, 1), (1.4, 1), (1.38, 0)]] \
    + [(1.571, t, o) for t, o in [(1.3, 0), (1.35, 0), (1.45, 1), (1.41, 1), (1.4, 0)]] \
    + [(2.347, t, o) for t, o in [(1.6, 0), (1.7, 0), (1.75, 1), (1.71, 1)]] \
    + [(3.142, t, o) for t, o in [(1.04, 0), (1.05, 1), (1.045, 0)]] \
    + [(3.927, t, o) for t, o in [(1.25, 0), (1.28, 0), (1.3, 1), (1.29, 0)]] \
    + [(4.712, t, o) for t, o in [(1.55, 0), (1.58, 0), (1.6, 1), (1.59, 0)]] \
    + [(5.498, t, o) for t, o in [(1.53, 0), (1.54, 0), (1.55, 0), (1.56, 1), (1.555, 0)]]


@pytest.mark.parametrize("phi, theta, outside", TABLE_H2)
def test_no_moment_inside_the_sinus_and_the_onset_of_engins_moment_beyond_it(engin_model, phi, theta, outside):
    """At psi = 0.156 rad (the table's zero torsion moment) only the bending part acts: zero inside the
    sinus, f(phi, theta) times the onset step beyond it, about the axis u x z_jt (back to the pole)."""
    u = arm(phi, theta)
    M = moment(engin_model, u, flexion_axis(u, 0.156))
    depth = theta - sinus(phi)
    assert (depth > 0) == bool(outside)
    expected = resistance(theta * math.cos(phi), theta * math.sin(phi)) * smooth_step(depth)
    axis = np.cross(u, AXES[2]) / np.linalg.norm(np.cross(u, AXES[2]))
    np.testing.assert_allclose(M, expected * axis, rtol=1e-9, atol=1e-12)
    assert (np.linalg.norm(M) > 1e-6) == bool(outside)    # inside: rounding of the zero torsion only


@pytest.mark.parametrize("row", range(len(TABLE_H4)))
def test_beyond_the_sinus_the_moment_is_engins_and_turns_the_arm_back_to_the_pole(engin_model, row):
    """The thesis's analytic values of Table H.4 (one point, 1.2 deg beyond the sinus, within the onset)."""
    (p, q), value = TABLE_H4[row]
    phi, theta = math.atan2(q, p), math.hypot(p, q)
    depth = theta - sinus(phi)
    assert depth > ONSET or row == 8
    u = arm(phi, theta)
    M = moment(engin_model, u, flexion_axis(u, 0.156))
    assert np.linalg.norm(M) == pytest.approx(value * smooth_step(depth), abs=0.02)   # the thesis's number
    assert M @ u == pytest.approx(0.0, abs=1e-9)                     # no axial part (Sec. 3.3.2)
    axis = np.cross(u, AXES[2]) / np.linalg.norm(np.cross(u, AXES[2]))   # normal of the meridian plane
    np.testing.assert_allclose(M / np.linalg.norm(M), axis, atol=1e-12)
    # a small turn of the arm by this moment brings it nearer the pole (back towards the sinus)
    nudged = turned(u, M / np.linalg.norm(M), 1e-3)
    assert nudged @ AXES[2] > u @ AXES[2]


# Table H.1: torsion angle (rad) and the program's torsion moment (Nm), all inside the measured range.
TABLE_H1 = [(-1.760, 12.26), (-0.389, 2.780), (0.0, 2.700), (0.130, 0.450), (1.080, -35.72)]


@pytest.mark.parametrize("psi, value", TABLE_H1)
def test_torsion_moment_of_table_h1_in_the_test_posture(engin_model, psi, value):
    """Arm straight forwards (inside the sinus, so no bending): the moment is the table's, about the
    internal-rotation axis -u (positive restores internal rotation for psi below 0.156 rad)."""
    u = U0
    M = moment(engin_model, u, flexion_axis(u, psi))
    np.testing.assert_allclose(M, value * -u, atol=0.006)


@pytest.mark.parametrize("psi", [-2.2, -1.0, 0.3, 0.9, 1.2])
def test_torsion_in_other_postures_uses_the_carried_reference(engin_model, psi):
    """With the arm hanging, raised sideways or forwards-medial (all inside the sinus), the torsion
    moment is the interpolated table (its end segments extended) at the angle from the carried axis."""
    angles, moments = np.array(en.TORSION_ANGLE), np.array(en.TORSION_MOMENT)
    assert np.all(np.diff(angles) > 0) and angles[0] == -2.094 and moments[-1] == -82.6 and len(angles) == 38
    if psi < angles[0]:
        expected = 78.9 + (psi + 2.094) * (40.0 - 78.9) / (-2.064 + 2.094)
    elif psi > angles[-1]:
        expected = -82.6 + (psi - 1.167) * (-82.6 + 50.0) / (1.167 - 1.137)
    else:
        expected = np.interp(psi, angles, moments)
    for phi, theta in [(math.pi, 0.9), (0.0, 1.0), (1.5 * math.pi, 1.2)]:
        assert theta < sinus(phi)
        u = arm(phi, theta)
        np.testing.assert_allclose(moment(engin_model, u, flexion_axis(u, psi)), expected * -u, atol=1e-9)


def test_default_model_has_the_option_off(model, engin_model):
    assert model.config.shoulder_passive == "das3" and model.arrays.engin[en.ON] == 0.0
    assert engin_model.arrays.engin[en.ON] == 1.0


# ---- (2) exact derivatives ---------------------------------------------------------------------------

JACOBIAN_POSTURES = {   # (seed, q of SC, AC, GH in rad): the arm beyond the sinus at phi ~ 75, 133, 251 deg
    "back_up": (0, [-0.288, 0.251, 0.103, 0.817, -0.273, -0.442, -1.331, 1.276, -1.307]),
    "back": (0, [-0.191, 0.159, 0.189, 0.451, -0.545, -0.506, 1.209, -0.492, -1.113]),
    "front": (0, [-0.254, -0.013, 0.134, 0.667, -0.363, -0.272, 2.108, 1.318, 0.106]),
    "onset": (1, None),     # near the published equilibrium, within the onset band
}


@pytest.mark.parametrize("case", list(JACOBIAN_POSTURES))
def test_exact_jacobians_with_the_option_match_finite_differences(model, engin_model, case):
    m = engin_model
    E = m.arrays.engin
    seed, q = JACOBIAN_POSTURES[case]
    rng = np.random.default_rng(seed)
    x = random_state(m, rng)
    if q is not None:
        x[:9] = q
    else:       # about the published rest (the variant's own rest lies inside the sinus)
        x[:11] += model.equilibrium_state[:11] - m.equilibrium_state[:11]
    xdot, u = rng.normal(0.0, 1.0, N_STATES), rng.uniform(0.0, 1.0, N_MUS)
    away_from_kinks(m, x, xdot)
    loads = np.zeros(N_LOADS)
    plant = Plant(m, initial_state=x)
    hum, axis = plant.workspace.mb.engin_dir
    phi, theta = en.spherical_angles(E, hum)
    depth = theta - en.sinus_boundary(E, math.cos(phi), math.sin(phi))[0]
    psi = en.torsion_angle(E, hum, axis)
    # the stencil must not straddle the onset's ends or a corner of the torsion table
    assert (0.01 < depth < ONSET - 0.01) if case == "onset" else depth > ONSET + 0.01
    assert np.min(np.abs(np.array(en.TORSION_ANGLE) - psi)) > 0.01
    assert np.linalg.norm(plant.workspace.mb.engin_jac[:, 0]) > 1.0

    f, dfdx, dfdxd, _ = jacobians(m, x, xdot, u, loads)
    h = 3e-4
    assert_columns_close(dfdx, central_difference(lambda v: residual(m, v, xdot, u, loads), x, h), "df/dx")
    assert_columns_close(dfdxd, central_difference(lambda v: residual(m, x, v, u, loads), xdot, h), "df/dxdot")
    # and the Engin part alone, where it is not swamped by the muscles
    off = load_model()
    engin_part = (jacobians(m, x, xdot, u, loads)[1] - jacobians(off, x, xdot, u, loads)[1])[:, :22]
    fd = central_difference(lambda v: residual(m, v, xdot, u, loads) - residual(off, v, xdot, u, loads), x, h)
    assert_columns_close(engin_part, fd[:, :22], "Engin's df/dq", tol=2e-6)


# ---- (3) the plant with the option ---------------------------------------------------------------------

def _depth(model, plant):
    E = model.arrays.engin
    R = plant.workspace.mb.R[9, :, :, 0]
    hum = R @ E[en.E_BODY:en.E_BODY + 3]
    phi, theta = en.spherical_angles(E, hum)
    return theta - en.sinus_boundary(E, math.cos(phi), math.sin(phi))[0]


def _released(model, q):
    x = np.array(model.equilibrium_state)
    x[:9] = q
    x[11:22] = 0.0
    contraction_states(model.arrays, Plant(model).workspace, x, np.zeros(N_STATES), x[-N_MUS:], np.zeros(N_LOADS))
    return Plant(model, initial_state=x)


def test_arm_released_beyond_the_sinus_is_pushed_back_and_settles(model, engin_model):
    """Adducted 21 deg into the torso (phi ~ 180 deg), muscles relaxed: without the option gravity keeps
    the arm there; with it the arm is back inside the sinus within 0.25 s and comes to rest on it."""
    q = [-0.491, 0.218, 0.399, 0.75, -0.398, -0.492, -1.363, -0.389, 0.745]
    runs = {}
    for m in (model, engin_model):
        plant = _released(m, q)
        depths = [_depth(m, plant)]
        for k in range(750):
            plant.step(np.zeros(N_MUS))
            depths.append(_depth(m, plant))
        runs[m.config.shoulder_passive] = (np.array(depths), plant)
    d0, _ = runs["das3"]
    d1, plant = runs["das3+engin"]
    assert d0[0] == d1[0] and d0[0] > math.radians(20)
    assert np.min(d0[:63]) > math.radians(10)                   # without: still 10 deg beyond at 0.25 s
    assert np.min(d1[:63]) < 0.0                                # with: inside the sinus by 0.25 s
    assert np.all(np.isfinite(plant.x)) and not plant.failed
    assert abs(d1[-1]) < math.radians(2) and np.max(np.abs(plant.x[11:22])) < 0.1   # at rest on the boundary


# ---- (4) configuration, hil model info, the figure --------------------------------------------------------

def test_config_key_is_read_and_checked(tmp_path):
    assert ModelConfig().shoulder_passive == "das3"
    path = tmp_path / "m.toml"
    path.write_text('[model]\nshoulder_passive = "das3+engin"\n')
    assert load_model_config(path) == ENGIN
    assert load_model_config(REPO / "configs" / "model-engin.toml") == ENGIN
    for bad in ('"engin"', '"DAS3+ENGIN"', "1", "true"):
        path.write_text(f"[model]\nshoulder_passive = {bad}\n")
        with pytest.raises(ConfigError, match="must be one of das3, das3\\+engin") as info:
            load_model_config(path)
        assert info.value.key == "shoulder_passive" and info.value.file == str(path)
    with pytest.raises(ConfigError):
        ModelConfig(shoulder_passive="engin")


def test_model_info_shows_the_option():
    from typer.testing import CliRunner

    from hil.cli import app

    res = CliRunner().invoke(app, ["model", "info", "--model-config", str(REPO / "configs/model-engin.toml"),
                                   "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model_options"]["shoulder_passive"] == "das3+engin"
    table = CliRunner().invoke(app, ["model", "info", "--model-config", str(REPO / "configs/model-engin.toml")])
    assert "shoulder_passive" in table.output and "das3+engin" in table.output
    default = CliRunner().invoke(app, ["model", "info", "--json"])
    assert json.loads(default.stdout)["model_options"]["shoulder_passive"] == "das3"


def test_cli_engin_sinus_writes_the_boundary_and_the_figure(tmp_path):
    from typer.testing import CliRunner

    from hil.cli import app

    res = CliRunner().invoke(app, ["model", "engin-sinus", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = np.genfromtxt(tmp_path / "engin_sinus.csv", delimiter=",", names=True)
    for r in rows:
        phi = math.radians(r["phi_deg"])
        assert math.radians(r["sinus_theta_deg"]) == pytest.approx(sinus(phi), abs=1e-8)
        for level in (6.0, 26.0):       # the moment (Engin's f times the onset step) is the level there
            th = math.radians(r[f"theta_{level:g}Nm_deg"])
            assert th > sinus(phi)
            assert resistance(th * math.cos(phi), th * math.sin(phi)) * smooth_step(th - sinus(phi)) == \
                pytest.approx(level, abs=1e-5)
    assert (tmp_path / "engin_sinus.png").stat().st_size > 50_000


# ---- (5) recording header and replay -------------------------------------------------------------------

def test_option_is_recorded_and_replayed_as_that_variant(tmp_path):
    """The [model] table with the option travels in the recording's header and the replay rebuilds the
    variant; the same run without it differs (the option acts at the published rest posture)."""
    from hil.recording.hilrec import RecordingReader

    frames = {}
    for name, extra in (("engin", '[model]\nshoulder_passive = "das3+engin"\n'), ("das3", "")):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f'include = ["{REPO / "configs/elbow-hold.toml"}"]\n{extra}')
        rec = tmp_path / f"{name}.hilrec"
        out = _hil("run", "--config", cfg, "--duration", "0.5", "--record", rec)
        assert out.returncode == 0, out.stderr
        reader = RecordingReader(rec)
        frames[name] = reader.read("ticks")["frame"]
        if name == "engin":
            assert reader.header["config"]["model"]["shoulder_passive"] == "das3+engin"
            rep = _hil("replay", rec, "--json")
            assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr
    n = min(len(frames["engin"]), len(frames["das3"]))
    assert np.max(np.abs(frames["engin"]["q"][:n, 8] - frames["das3"]["q"][:n, 8])) > 1e-3     # GHyy


def test_the_variant_starts_from_its_own_passive_equilibrium(model, engin_model):
    """With Engin's moments the published rest turns the humerus; the variant's initial state is its own
    equilibrium (the arm does not move when released unexcited), 18 deg less internally rotated."""
    from sim.das3.plant import Plant

    x0 = np.array(engin_model.equilibrium_state)
    plant = Plant(engin_model, step_s=0.004, initial_state=x0)
    for _ in range(250):
        plant.step(np.zeros(N_MUS))
    assert np.max(np.abs(plant.outputs.q - x0[:11])) < 1e-5
    assert math.degrees(x0[8] - model.equilibrium_state[8]) == pytest.approx(-18.25, abs=0.05)
