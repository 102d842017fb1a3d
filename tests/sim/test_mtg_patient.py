"""A virtual patient on the reduced MTG arm (sim.mtg.patient): capacities, factors and the plant's response."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.das3.config import ModelConfig
from sim.das3.kernels.multibody import multibody_eval, new_multibody_work
from sim.das3.layout import HUMERUS_FRAME, N_DOF
from sim.das3.model import LOAD_NAMES, load_model
from sim.das3.muscle_groups import group_of
from sim.fitting.spasticity import FAST_DEG_S, SLOW_DEG_S, TARGET_REFLEX_NM, catch_test, servo_moments
from sim.mtg.arm import mtg_torques, new_mtg_work
from sim.mtg.model import load_mtg_model, mtg_model_for
from sim.mtg.patient import REFERENCE_POSTURES_DEG, capacity_weights, das3_angles
from sim.mtg.plant import MtgPlant
from sim.patient import GroupState, Patient, apply_patient

TRICEPS = ("triclong", "triclat", "tricmed")
ELBOW_FLEXORS = {"bicl", "bicb", "brachialis", "brachiorad", "pronteres"}


@pytest.fixture(scope="module")
def das3():
    return load_model()


@pytest.fixture(scope="module")
def able(das3):
    return load_mtg_model(das3)


def patient_of(**groups: GroupState) -> Patient:
    return Patient(name="test", groups=tuple(groups.items()))


def mtg_for(das3, patient: Patient):
    return load_mtg_model(das3, None, apply_patient(ModelConfig(), patient), patient)


def test_the_das3_arm_posed_from_mtg_coordinates_has_those_thoracohumeral_angles(das3, able):
    work = new_multibody_work()
    for theta in np.radians(np.array(REFERENCE_POSTURES_DEG)) + np.radians([10.0, 5.0, -20.0, 0.0, 0.0]):
        q = das3_angles(able.arrays, theta)
        multibody_eval(das3.arrays, q, np.zeros(N_DOF), np.zeros(N_DOF), np.zeros(len(LOAD_NAMES)), work)
        R = work.R[HUMERUS_FRAME, :, :, 0]
        th = [np.arctan2(R[2, 1], -R[0, 1]), np.arccos(R[1, 1]), np.arctan2(R[1, 2], R[1, 0])]
        np.testing.assert_allclose(th, theta[:3], atol=1e-12)
        assert q[9] == theta[3] and q[10] == theta[4]


def test_each_elbow_mtg_draws_on_the_elements_that_turn_the_elbow_its_way(das3, able):
    w = capacity_weights(das3, able.arrays, np.ones(das3.n_muscles))
    groups = np.array([group_of(n) for n in das3.muscle_names])
    flexor, extensor = (able.muscle_names.index(n) for n in ("elbow_flexor", "elbow_extensor"))
    assert set(groups[w[flexor] > 1e-3]) <= ELBOW_FLEXORS and {"bicb", "brachialis"} <= set(groups[w[flexor] > 0])
    assert set(groups[w[extensor] > 1e-3]) <= {*TRICEPS, "anconeus"}
    assert np.all(w[flexor][np.isin(groups, TRICEPS)] == 0.0)
    assert np.all(w >= 0.0) and np.all(w.sum(axis=1) > 0.0)


def test_an_able_bodied_patient_leaves_the_mtg_arm_as_published(das3, able):
    model = mtg_for(das3, Patient())
    assert model.data_sha256 == able.data_sha256
    assert all(np.all(f == 1.0) for f in model.actuators)
    assert np.array_equal(model.arrays.mtg_const, able.arrays.mtg_const)


def test_a_uniform_weakness_scales_every_mtg_by_it(das3, able):
    model = mtg_for(das3, patient_of(**{g: GroupState(strength=0.5) for g in map(group_of, das3.muscle_names)}))
    np.testing.assert_allclose(model.actuators.strength, 0.5, rtol=1e-12)
    assert np.all(model.actuators.gate == 1.0) and np.all(model.actuators.reach == 1.0)
    np.testing.assert_allclose(model.arrays.mtg_const[:, 2], 0.5 * able.arrays.mtg_const[:, 2], rtol=1e-12)
    assert model.data_sha256 != able.data_sha256


def test_a_denervated_triceps_gates_the_elbow_extensor_to_the_anconeus_share(das3, able):
    model = mtg_for(das3, patient_of(**{g: GroupState(state="denervated") for g in TRICEPS}))
    w = capacity_weights(das3, able.arrays, das3.arrays.mus[:, 0])
    extensor = able.muscle_names.index("elbow_extensor")
    anconeus = np.array([group_of(n) == "anconeus" for n in das3.muscle_names])
    assert model.actuators.gate[extensor] == pytest.approx(w[extensor, anconeus].sum() / w[extensor].sum())
    assert 0.0 < model.actuators.gate[extensor] < 0.2
    triceps = np.isin([group_of(n) for n in das3.muscle_names], TRICEPS)
    acted_on = w[:, triceps].sum(axis=1) > 0.0          # the long head also extends and adducts the shoulder
    assert np.all(model.actuators.gate[~acted_on] == 1.0) and np.all(model.actuators.gate[acted_on] < 1.0)
    assert acted_on[able.muscle_names.index("depressor")] and not acted_on[able.muscle_names.index("elbow_flexor")]
    assert np.all(model.actuators.strength == 1.0)


def test_a_paralysed_triceps_is_stimulable_but_out_of_the_patients_reach(das3, able):
    model = mtg_for(das3, patient_of(**{g: GroupState(state="paralysed") for g in TRICEPS}))
    extensor = able.muscle_names.index("elbow_extensor")
    assert model.actuators.gate[extensor] == 1.0 and 0.0 < model.actuators.reach[extensor] < 0.2
    assert np.array_equal(model.voluntary_reach(None), model.actuators.reach)
    everything = mtg_for(das3, patient_of(**{g: GroupState(state="paralysed") for g in (*TRICEPS, "anconeus")}))
    assert everything.actuators.reach[extensor] == 0.0


def test_the_plant_applies_the_gate_to_the_excitation_and_the_strength_to_the_torque(das3, able):
    weak = mtg_for(das3, patient_of(**{g: GroupState(state="denervated") for g in TRICEPS},
                                    **{g: GroupState(strength=0.4) for g in ("bicl", "bicb", "brachialis")}))
    plants = [MtgPlant(m, step_s=0.004) for m in (able, weak)]
    u = np.ones(able.n_muscles)
    for plant in plants:
        plant.step(u)
    np.testing.assert_array_equal(plants[1].excitation, weak.actuators.gate)
    np.testing.assert_array_equal(plants[0].excitation, u)
    q, qd, a = able.equilibrium_state[:5], np.full(5, 0.1), np.full(able.n_muscles, 0.5)
    torque = []
    for model in (able, weak):        # the same state and activation: the torques differ by the strength alone
        work = new_mtg_work(model.arrays.body_mass.shape[0], model.n_muscles)
        mtg_torques(model.arrays, q, qd, a, work)
        torque.append(work.tau.copy())
    np.testing.assert_allclose(torque[1], weak.actuators.strength * torque[0], rtol=1e-12)
    assert weak.actuators.strength[able.muscle_names.index("elbow_flexor")] < 0.9


SPASTIC = (0.1226, 0.1, 0.03)      # gain, threshold (Lceopt/s), delay (s): configs/patients/stroke-hemiparesis.toml
FLEXOR_GROUPS = ("bicl", "bicb", "brachialis", "brachiorad", "pronteres")


def test_a_spastic_flexors_reflex_drives_the_elbow_flexor_after_its_delay_above_its_threshold(das3, able):
    """The arm extending at 100 deg/s from 90 deg: the elbow flexor MTG's excitation stays 0 for the 30 ms delay
    (round(0.03 / 0.004) = 8 steps), then rises; extending at 5 deg/s from its rest posture, no row passes its
    threshold; able-bodied, none."""
    spastic = mtg_for(das3, patient_of(**{g: GroupState(spasticity=SPASTIC) for g in FLEXOR_GROUPS}))
    flexor = able.muscle_names.index("elbow_flexor")
    rows = spastic.reflex.mtg == flexor
    assert rows.sum() >= 10 and np.all(spastic.reflex.delay_s == 0.03)
    assert np.all((spastic.reflex.rate[rows] > 0.05) & (spastic.reflex.rate[rows] < 0.6))   # Lceopt/s per rad/s
    assert 0.5 < spastic.reflex.share[rows].sum() <= 1.0

    plants = {id(m): MtgPlant(m, step_s=0.004) for m in (able, spastic)}      # each reused: reset between runs

    def flexor_excitation(model, speed_deg_s: float, elbow_deg: float | None = 90.0) -> np.ndarray:
        plant = plants[id(model)]
        state = model.equilibrium_state.copy()
        state[8] = -np.radians(speed_deg_s)
        if elbow_deg is not None:
            state[3] = np.radians(elbow_deg)
        plant.reset(state)
        seen = []
        for _ in range(14):
            plant.step(np.zeros(model.n_muscles))
            seen.append(plant.excitation[flexor])
        return np.array(seen)

    fast = flexor_excitation(spastic, 100.0)
    assert np.all(fast[:8] == 0.0) and np.all(fast[8:] > 0.01)
    assert not flexor_excitation(spastic, 5.0, None).any()     # (reset empties the ring of the fast run)
    assert not flexor_excitation(able, 100.0).any()
    np.testing.assert_array_equal(flexor_excitation(spastic, 100.0), fast)


def test_a_denervated_spastic_element_has_no_reflex(das3):
    both = {g: GroupState(state="denervated", spasticity=SPASTIC) for g in ("bicl", "bicb")}
    model = mtg_for(das3, patient_of(**both, brachialis=GroupState(spasticity=SPASTIC)))
    groups = {group_of(das3.muscle_names[i]) for i in model.reflex.element}
    assert groups == {"brachialis"} and model.reflex.mtg.shape[0] > 0


def test_a_warm_up_leaves_the_reflex_ring_as_it_was(das3):
    plant = MtgPlant(mtg_for(das3, patient_of(bicb=GroupState(spasticity=SPASTIC))), step_s=0.004)
    state = plant.model.equilibrium_state.copy()
    state[8] = -2.0
    plant.reset(state)
    for _ in range(3):
        plant.step(np.zeros(plant.model.n_muscles))
    ring, cursor = plant.workspace.rx_ring.copy(), plant.workspace.rx_cursor.copy()
    assert ring.any()
    plant.warmup()
    assert np.array_equal(plant.workspace.rx_ring, ring) and np.array_equal(plant.workspace.rx_cursor, cursor)


def test_the_catch_test_on_the_spastic_mtg_arm_meets_the_published_reflex_moment(das3):
    """The catch test of sim.fitting.spasticity on the MTG arm with the stroke preset's elbow flexors (strength
    0.5, the reflex whose gain was fitted on the DAS3 arm to 3.46 N m at 100 deg/s, PMC5345015): the reflex
    moment peaks within 30 % of that at 100 deg/s and stays below 1 mN m at 5 deg/s (the biceps' rows on the
    shoulder MTGs catch a trace of the shoulder's settling)."""
    def mtg(spastic: bool):
        reflex = dict(spasticity=SPASTIC) if spastic else {}
        return mtg_for(das3, patient_of(**{g: GroupState(strength=0.5, **reflex) for g in FLEXOR_GROUPS}))

    spastic, still = mtg(True), mtg(False)
    peak = {speed: float(np.max(catch_test(spastic, servo_moments(still, speed, plant_of=MtgPlant)[0], speed,
                                           plant_of=MtgPlant)[1])) for speed in (FAST_DEG_S, SLOW_DEG_S)}
    assert 0.7 * TARGET_REFLEX_NM < peak[FAST_DEG_S] < 1.3 * TARGET_REFLEX_NM
    assert abs(peak[SLOW_DEG_S]) < 1e-3


def test_the_same_patients_arm_is_built_once_and_a_changed_parameter_file_again(tmp_path):
    """mtg_model_for builds a patient's arm once per process (a batch of environments asks once per arm); a
    parameter file written anew is read anew."""
    patient = Patient(name="c", groups=(("brachialis", GroupState(contracture=0.2)),))
    config = apply_patient(ModelConfig(), patient)
    assert mtg_model_for(config, patient) is mtg_model_for(config, patient)
    source = json.loads((Path(sim.__file__).parent / "data" / "mtg_default.json").read_text())
    params = tmp_path / "mtg.json"
    params.write_text(json.dumps(source))
    first = mtg_model_for(config, patient, params)
    assert mtg_model_for(config, patient, params) is first
    source["mtgs"][0]["tau_max_nm"] *= 2.0
    params.write_text(json.dumps(source, indent=1))                  # another size, whatever the clock's resolution
    second = mtg_model_for(config, patient, params)
    assert second is not first and second.arrays.mtg_const[0, 2] == pytest.approx(2.0 * first.arrays.mtg_const[0, 2])
