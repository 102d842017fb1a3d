"""A patient's size on the reduced MTG arm: the scaled DAS3 arm's segments, the MTGs' moments and the passive joint
moments x s_F s_L (sim.mtg.model.moment_scale), and the rest posture it gives against the scaled DAS3 arm's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.das3.config import ModelConfig
from sim.das3.model import load_model
from sim.mtg.model import ELEVATION_STOP_K2, mtg_model_for
from sim.patient import Patient, apply_patient
from sim.subject_size import REFERENCE_HEIGHT_M, REFERENCE_MASS_KG, SubjectSize

ELBOW, DAS3_ELBOW = 3, 9


def _sized(height_m: float, mass_kg: float, rule: str):
    """(the patient's model options, its MTG arm, its DAS3 arm) for a subject of that size."""
    patient = Patient(name="sized", size=SubjectSize(length_scale=height_m / REFERENCE_HEIGHT_M,
                                                     mass_scale=mass_kg / REFERENCE_MASS_KG, strength_rule=rule))
    config = apply_patient(ModelConfig(), patient)
    return config, mtg_model_for(config, patient), load_model(config)


@pytest.fixture(scope="module")
def able():
    return mtg_model_for(ModelConfig(), Patient())


@pytest.mark.parametrize("rule", ["geometric", "none"])
def test_a_sized_mtg_arm_is_built_on_the_sized_das3_arm(able, rule):
    config, mtg, das3 = _sized(1.60, 60.0, rule)
    scale = config.force_scale * config.length_scale
    A, R = mtg.arrays, able.arrays
    np.testing.assert_allclose(A.mtg_const[:, 2], R.mtg_const[:, 2] * scale, rtol=1e-14)   # tau_max: active, passive
    np.testing.assert_array_equal(A.mtg_const[:, [0, 1, 3]], R.mtg_const[:, [0, 1, 3]])   # angles, rad/s unchanged
    np.testing.assert_allclose(A.body_mass, R.body_mass * config.mass_scale, rtol=1e-14)
    np.testing.assert_allclose(A.body_inertia, R.body_inertia * config.mass_scale * config.length_scale ** 2,
                               rtol=1e-14)
    np.testing.assert_allclose(A.elbow_loc, R.elbow_loc * config.length_scale, rtol=1e-14)
    np.testing.assert_allclose(A.damping, R.damping * scale, rtol=1e-14)
    np.testing.assert_allclose(A.stop_k2, [0.0, ELEVATION_STOP_K2 * scale, 0.0, *das3.arrays.joint_k[[1, 1]]],
                               rtol=1e-14)
    np.testing.assert_allclose(das3.arrays.joint_k, load_model().arrays.joint_k * scale, rtol=1e-14)


def test_a_lighter_subjects_elbow_rests_more_flexed_as_on_the_das3_arm(able):
    """1.60 m and 60 kg at unchanged Fmax: gravity's moment falls by s_m s_L, the passive muscles' by s_L alone, so
    the elbow rests more flexed on both arms (DAS3: +4.0 deg)."""
    _, mtg, das3 = _sized(1.60, 60.0, "none")
    das3_shift = math.degrees(das3.equilibrium_state[DAS3_ELBOW] - load_model().equilibrium_state[DAS3_ELBOW])
    mtg_shift = math.degrees(mtg.equilibrium_state[ELBOW] - able.equilibrium_state[ELBOW])
    assert das3_shift > 2.0 and mtg_shift == pytest.approx(das3_shift, abs=2.0), (das3_shift, mtg_shift)


def test_the_reference_size_leaves_the_arm_bit_for_bit(able):
    mtg = mtg_model_for(ModelConfig(), Patient(size=SubjectSize()))
    for name, array in able.arrays._asdict().items():
        np.testing.assert_array_equal(getattr(mtg.arrays, name), array, err_msg=name)
    assert mtg.data_sha256 == able.data_sha256
