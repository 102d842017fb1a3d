"""Subject size (issue 37, item 5): the DAS3 arm scaled uniformly to a patient's height and mass
(sim.subject_size): scale 1 is the published model bit for bit; lengths, masses, inertias, moment arms and Fmax
scale as stated; the scaled arm's rest posture is re-solved and holds still; the maximum elbow moment scales as
the strength rule says; bad sizes are one error line."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import arm_posture

from sim.analysis import static_opt as so
from sim.analysis.max_moment import TASKS, solve_max_moment
from sim.das3.config import ConfigError, ModelConfig
from sim.das3.engin import CM, MPSI
from sim.das3.equilibrium import solve_equilibrium
from sim.das3.kernels.step import IA
from sim.das3.kinematics import landmarks
from sim.das3.model import MUS_FMAX, MUS_LCEOPT, MUS_PEESLACK, MUS_SEESLACK, N_DOF, N_LOADS, N_MUS, load_model
from sim.das3.plant import Plant
from sim.das3.release import read_model_data
from sim.patient import Patient, apply_patient
from sim.subject_size import REFERENCE_HEIGHT_M, REFERENCE_MASS_KG, SubjectSize, size_from_values

S_L, S_M = 1.1, 1.3
"""A test subject: 10 % longer, 30 % heavier, Fmax x S_L^2 (geometric)."""
SMALL = (1.60, 60.0)
"""A smaller adult: height (m) and body mass (kg)."""
ELBOW = 9


def _sized(length: float, mass: float, rule: str = "geometric") -> ModelConfig:
    size = SubjectSize(length, mass, rule)
    return apply_patient(ModelConfig(), Patient(size=size))


@pytest.fixture(scope="module")
def scaled():
    return load_model(_sized(S_L, S_M))


def _small(rule: str) -> ModelConfig:
    return _sized(SMALL[0] / REFERENCE_HEIGHT_M, SMALL[1] / REFERENCE_MASS_KG, rule)


def test_scale_one_takes_no_size_path_and_is_the_published_model_bit_for_bit(model):
    """A patient of the reference size (whatever its rule) leaves ModelConfig untouched; a ModelConfig with the
    three factors at 1 builds the published arrays and keeps the published equilibrium (no re-solve), and a short
    run of its plant is identical to the published one."""
    for rule in ("geometric", "mass", "none"):
        assert apply_patient(ModelConfig(), Patient(size=SubjectSize(1.0, 1.0, rule))) == ModelConfig()
    one = load_model(ModelConfig(length_scale=1.0, mass_scale=1.0, force_scale=1.0))
    m, eq, _, _ = read_model_data()
    np.testing.assert_array_equal(one.equilibrium_state, np.asarray(eq["x"]))
    joints = {j["name"]: j["location"] for j in m["joints"]}
    np.testing.assert_array_equal(one.arrays.joint_loc[ELBOW], joints["hu"])
    np.testing.assert_array_equal(one.arrays.mus[:, MUS_FMAX], [mu["fmax"] for mu in m["muscles"]])
    for name, published in model.arrays._asdict().items():
        np.testing.assert_array_equal(getattr(one.arrays, name), published, err_msg=name)
    plants = [Plant(x) for x in (one, model)]
    u = np.full(N_MUS, 0.2)
    for plant in plants:
        for _ in range(25):
            plant.step(u)
    np.testing.assert_array_equal(plants[0].x, plants[1].x)


def test_lengths_masses_inertias_fmax_and_the_passive_structures_scale_as_stated(model, scaled):
    A, B = model.arrays, scaled.arrays
    s_f = S_L ** 2
    rtol = 1e-14
    for name in ("joint_loc", "body_com", "contact_points", "hand_com_radius"):
        np.testing.assert_allclose(getattr(B, name), S_L * np.asarray(getattr(A, name)), rtol=rtol, err_msg=name)
    np.testing.assert_allclose(B.body_mass, S_M * np.asarray(A.body_mass), rtol=rtol)
    np.testing.assert_allclose(B.body_inertia, S_M * S_L ** 2 * np.asarray(A.body_inertia), rtol=rtol)
    np.testing.assert_allclose(B.contact[:6], S_L * np.asarray(A.contact[:6]), rtol=rtol)     # ellipsoid
    np.testing.assert_allclose(B.contact[6], A.contact[6] * s_f / S_L, rtol=rtol)            # stiffness
    assert B.contact[7] == A.contact[7]                                                        # eps: of E, no unit
    np.testing.assert_allclose(B.conoid[:7], S_L * np.asarray(A.conoid[:7]), rtol=rtol)      # attachments, length
    np.testing.assert_allclose(B.conoid[7], A.conoid[7] * s_f / S_L, rtol=rtol)              # stiffness
    np.testing.assert_allclose(B.conoid[8], S_L * A.conoid[8], rtol=rtol)                    # eps, m
    for col, factor in ((MUS_FMAX, s_f), (MUS_LCEOPT, S_L), (MUS_SEESLACK, S_L), (MUS_PEESLACK, 1.0)):
        np.testing.assert_allclose(B.mus[:, col], factor * A.mus[:, col], rtol=rtol, err_msg=str(col))
    np.testing.assert_allclose(B.joint_k, s_f * S_L * np.asarray(A.joint_k), rtol=rtol)
    for name in ("joint_lo", "joint_hi", "joint_axis", "glenoid", "gh_rim", "gravity", "loa_dense_coef"):
        np.testing.assert_array_equal(getattr(B, name), getattr(A, name), err_msg=name)


def test_engins_moments_scale_with_the_moment_scale():
    plain = load_model(ModelConfig(shoulder_passive="das3+engin")).arrays.engin
    big = load_model(ModelConfig(shoulder_passive="das3+engin", length_scale=S_L, mass_scale=S_M,
                                 force_scale=S_L ** 2)).arrays.engin
    moments = np.zeros(plain.size, bool)
    moments[CM:CM + 10] = moments[MPSI:] = True
    np.testing.assert_allclose(big[moments], S_L ** 3 * plain[moments], rtol=1e-14)
    np.testing.assert_allclose(big[~moments], plain[~moments], rtol=1e-14, atol=1e-15)   # angles, directions


def _paths(model, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(138,) path lengths L(q) and (138, 11) dL/dq at posture q (sim.analysis.rest_model)."""
    posture = arm_posture(model, 60.0)
    layout = so.layout_for(posture, 0)
    rest = so.RestModel(model, np.zeros(N_LOADS), q, layout)
    with np.errstate(invalid="ignore", divide="ignore"):
        rest.at(np.concatenate([q[list(layout.free_dofs)], np.zeros(N_MUS)]))
    return np.array(rest.W.mu.L), rest.moment_arms()


def test_path_lengths_and_moment_arms_scale_with_the_length_scale(model, scaled):
    q = np.array(model.equilibrium_state[:N_DOF])
    q[ELBOW] = math.radians(90.0)
    length, arms = _paths(model, q)
    length_big, arms_big = _paths(scaled, q)
    np.testing.assert_allclose(length_big, S_L * length, rtol=1e-12)
    np.testing.assert_allclose(arms_big, S_L * arms, rtol=1e-12, atol=1e-15)
    assert np.abs(arms[:, ELBOW]).max() > 0.02      # the elbow flexors' moment arms are centimetres


def test_a_scaled_arm_rests_in_its_own_solved_posture_and_holds_still(model):
    """1.60 m, 60 kg: the rest posture is re-solved (its residual is tiny and it differs from the published one),
    and 2 s of the plant from it without excitation move no joint by more than 0.01 deg."""
    small = load_model(_small("geometric"))
    x0 = np.asarray(small.equilibrium_state)
    assert np.abs(x0[:N_DOF] - model.equilibrium_state[:N_DOF]).max() > math.radians(0.05)
    assert solve_equilibrium(small).residual_rms < 1e-9
    plant = Plant(small)
    u = np.zeros(N_MUS)
    for _ in range(int(2.0 / plant.step_s)):
        plant.step(u)
    assert np.degrees(np.abs(plant.x[:N_DOF] - x0[:N_DOF])).max() < 0.01
    assert np.abs(plant.x[IA:]).max() < 1e-6


@pytest.fixture(scope="module")
def elbow_flexion():
    """Maximum elbow-flexion moment (N m) at 90 deg (Chadwick Fig. 7's posture) of a ModelConfig."""
    cache = {}

    def solve(config: ModelConfig) -> float:
        if config not in cache:
            cache[config] = solve_max_moment(load_model(config), TASKS["elbow-flexion"], math.radians(90.0)).moment_nm
        return cache[config]
    return solve


def test_the_maximum_elbow_moment_scales_as_s_l_cubed_when_every_force_scales_alike(elbow_flexion):
    """Geometric rule with mass x s_L^2: muscle, passive and gravity forces all x s_L^2 and lengths x s_L, so the
    static max-moment problem is the reference one scaled (the conoid's allowed elongation too) and the moment is
    x s_L^3, to 0.1 % (the 10 N/m linear muscle terms are absolute)."""
    ref = elbow_flexion(ModelConfig())
    similar = elbow_flexion(_sized(S_L, S_L ** 2))
    assert ref > 50.0
    assert similar / ref == pytest.approx(S_L ** 3, rel=1e-3)


@pytest.mark.parametrize("rule", ["geometric", "mass", "none"])
def test_a_smaller_adults_maximum_elbow_moment_follows_the_strength_rule(elbow_flexion, rule):
    """1.60 m, 60 kg: the moment ratio is s_L x the rule's Fmax factor (geometric s_L^3, mass s_L s_m^(2/3), none
    s_L) to 0.2 % (gravity scales with the body mass, not with the rule)."""
    s_l, s_m = SMALL[0] / REFERENCE_HEIGHT_M, SMALL[1] / REFERENCE_MASS_KG
    ratio = elbow_flexion(_small(rule)) / elbow_flexion(ModelConfig())
    expected = {"geometric": s_l ** 3, "mass": s_l * s_m ** (2.0 / 3.0), "none": s_l}[rule]
    assert ratio == pytest.approx(expected, rel=2e-3)


def test_the_size_keys_convert_against_the_stated_reference():
    size, _ = size_from_values({"height_m": 1.60, "body_mass_kg": 60.0, "length_scale": None, "mass_scale": None,
                                "strength_rule": "mass"})
    assert size.length_scale == 1.60 / 1.741 and size.mass_scale == 60.0 / 73.0
    assert size.force_scale == (60.0 / 73.0) ** (2.0 / 3.0)
    only, _ = size_from_values({"length_scale": 0.9, "strength_rule": "geometric"})
    assert (only.length_scale, only.mass_scale, only.force_scale) == (0.9, 1.0, 0.9 ** 2)
    assert size_from_values({"height_m": 1.6, "length_scale": 0.9, "strength_rule": "none"}) == (None, "length_scale")


@pytest.mark.parametrize("field, value", [("length_scale", 0.0), ("mass_scale", -1.0), ("force_scale", math.nan),
                                          ("length_scale", True), ("mass_scale", 11.0)])
def test_a_bad_model_size_factor_is_one_error_naming_it(field, value):
    with pytest.raises(ConfigError) as err:
        ModelConfig(**{field: value})
    assert err.value.key == field and "must be a number in (0, 10]" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_drawn_arm_is_the_published_one_scaled_about_the_thorax_origin(model, scaled):
    """Every landmark the view draws (sim.das3.kinematics, the wrist included) of the scaled arm is S_L times the
    published one's at the same angles: the chain's joint centres all scale and the angles do not."""
    q = np.array([model.equilibrium_state[:N_DOF], np.radians([-20, 10, 15, 35, -25, -15, 40, 60, 20, 90, 80])])
    np.testing.assert_allclose(landmarks(scaled.arrays, q, S_L), S_L * landmarks(model.arrays, q), rtol=1e-13,
                               atol=1e-16)
