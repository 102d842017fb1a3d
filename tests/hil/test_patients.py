"""Virtual patients (issue 37): the [patient] table, its presets, what it does to the model, its errors, the CLI
and its recording and replay."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_error_line, closed_loop_elbow, hil

from hil.config import load_service_config, with_patient
from hil.patients import PRESET_DIR, preset_names, read_patient, resolved_table
from hil.recording.hilrec import RecordingReader
from hil.rt.plants import plant_type
from hil.sweep.runner import preflight, tasks
from hil.sweep.spec import load_sweep, variants
from sim.das3.config import ConfigError, ModelConfig
from sim.das3.model import load_model
from sim.das3.muscle_groups import group_members
from sim.patient import apply_patient, muscle_group_names

REPO = Path(__file__).resolve().parents[2]
ELBOW_HOLD = REPO / "configs" / "elbow-hold.toml"


def _config(tmp_path, patient_toml: str, base: Path = ELBOW_HOLD) -> Path:
    path = tmp_path / "patient.toml"
    path.write_text(f'include = ["{base}"]\n{patient_toml}\n')
    return path


def test_the_four_presets_are_shipped_and_resolve_to_every_group():
    assert preset_names() == ("able-bodied", "c5-tetraplegia", "c6-tetraplegia", "stroke-hemiparesis")
    for name in preset_names():
        patient, table = read_patient({"preset": name}, str(REPO / "configs" / "x.toml"))
        assert patient.name == name and [g for g, _ in patient.groups] == list(muscle_group_names())
        assert patient.sources and read_patient(table, "recorded") == (patient, table)    # replays as recorded


def test_able_bodied_leaves_the_model_untouched(tmp_path):
    """No [patient] table and the able-bodied preset both give the published model (so runs stay bit-identical)."""
    plain = load_service_config(ELBOW_HOLD)
    preset = load_service_config(_config(tmp_path, '[patient]\npreset = "able-bodied"'))
    assert plain.model == preset.model == ModelConfig() and "patient" not in plain.raw
    assert preset.patient.able_bodied and preset.raw["patient"]["name"] == "able-bodied"


def test_c5_states_and_atrophy_reach_the_model(tmp_path):
    cfg = load_service_config(_config(tmp_path, '[patient]\npreset = "c5-tetraplegia"'))
    states = {g: cfg.patient.state_of(g) for g in muscle_group_names()}
    assert states["bicb"].state == "voluntary" and states["bicb"].strength == 1.0      # C5 key muscle
    assert states["triclong"].state == "paralysed" and states["triclong"].strength == 0.6   # C7, below the lesion
    published, model = load_model(ModelConfig()), load_model(cfg.model)
    ratio = model.arrays.mus[:, 0] / published.arrays.mus[:, 0]
    for group, idx in group_members(model.muscle_names).items():
        np.testing.assert_allclose(ratio[idx], states[group].strength, rtol=1e-15)


def test_config_keys_apply_over_the_preset_and_model_strength_multiplies(tmp_path):
    path = _config(tmp_path, '[model.strength]\ntriclong = 0.5\n[patient]\npreset = "c5-tetraplegia"\n'
                             'name = "c5, stronger triceps"\n[patient.groups.triclat]\nstrength = 0.9')
    cfg = load_service_config(path)
    assert cfg.patient.name == "c5, stronger triceps"
    assert cfg.patient.state_of("triclat").state == "paralysed" and cfg.patient.state_of("triclat").strength == 0.9
    assert dict(cfg.model.strength)["triclong"] == pytest.approx(0.5 * 0.6, rel=1e-15)


def test_a_denervated_group_is_gated_in_the_model(tmp_path):
    cfg = load_service_config(_config(tmp_path, '[patient.groups.bicb]\nstate = "denervated"\nstrength = 0.5'))
    assert cfg.model.denervated == ("bicb",) and dict(cfg.model.strength) == {"bicb": 0.5}
    assert apply_patient(ModelConfig(), cfg.patient) == cfg.model


@pytest.mark.parametrize("patient_toml, key, message", [
    ('[patient]\npreset = "c7-tetraplegia"', "patient.preset", "unknown preset 'c7-tetraplegia' (did you mean"),
    ('[patient.groups.bicb1]\nstate = "paralysed"', "patient.groups.bicb1", "is a muscle element; a patient's states "
                                                                            "are per group (bicb)"),
    ('[patient.groups.bicps]\nstate = "paralysed"', "patient.groups.bicps", "unknown muscle group 'bicps'"),
    ('[patient.groups.bicb]\nstate = "paralyzed"', "patient.groups.bicb.state", "must be one of voluntary, paralysed"),
    ('[patient.groups.bicb]\nstrength = 0', "patient.groups.bicb.strength", "must be a finite number in (0, 10]"),
    ('[patient.groups.bicb]\nstrenght = 0.5', "patient.groups.bicb.strenght", "did you mean 'strength'"),
    ('[patient]\nnmae = "x"', "patient.nmae", "did you mean 'name'"),
])
def test_a_bad_patient_is_one_error_line(tmp_path, patient_toml, key, message):
    with pytest.raises(ConfigError) as err:
        load_service_config(_config(tmp_path, patient_toml))
    assert err.value.key == key and message in err.value.reason


def test_a_patient_file_holds_only_its_table_and_no_other_preset(tmp_path):
    (tmp_path / "p.toml").write_text('[patient]\npreset = "c5-tetraplegia"\n')
    with pytest.raises(ConfigError, match="cannot name another preset"):
        load_service_config(_config(tmp_path, '[patient]\npreset = "p.toml"'))
    (tmp_path / "p.toml").write_text('[patient]\nname = "x"\n[loop]\nperiod_ms = 4\n')
    with pytest.raises(ConfigError, match="holds one \\[patient\\] table and nothing else"):
        load_service_config(_config(tmp_path, '[patient]\npreset = "p.toml"'))


def test_the_mtg_plant_takes_every_part_of_a_patient(tmp_path):
    """Strengths, states, denervation and stretch reflexes reach the MTG arm's actuators (sim.mtg.patient), a
    contracture its coordinates (sim.mtg.contracture), a size its segments and moments (sim.mtg.model.moment_scale);
    a bad value is one line naming its key."""
    mtg = REPO / "configs" / "elbow-hold-mtg.toml"

    def mtg_model(text: str):
        return plant_type("mtg").load_model(load_service_config(_config(tmp_path, text, mtg)))

    able, c5 = mtg_model('[patient]\npreset = "able-bodied"'), mtg_model('[patient]\npreset = "c5-tetraplegia"')
    assert all(np.all(f == 1.0) for f in able.actuators) and c5.actuators.strength.min() < 0.7
    weak_biceps = mtg_model("[model.strength]\nbicb = 0.5")
    assert 0.5 < weak_biceps.actuators.strength[weak_biceps.muscle_names.index("elbow_flexor")] < 1.0
    stroke = mtg_model('[patient]\npreset = "stroke-hemiparesis"')
    assert stroke.muscle_names.index("elbow_flexor") in stroke.reflex.mtg and not able.reflex.mtg.size
    tight = mtg_model('[patient]\n[patient.groups.brachialis]\ncontracture_lceopt = 0.2')
    assert tight.contracture.n_knots[3] > 0 and not able.contracture.n_knots.any()
    assert tight.equilibrium_state[3] > able.equilibrium_state[3] + math.radians(10.0)     # rests flexed
    tall = mtg_model("[patient]\n[patient.size]\nlength_scale = 1.1")
    assert tall.arrays.mtg_const[0, 2] == pytest.approx(able.arrays.mtg_const[0, 2] * 1.1 ** 3, rel=1e-12)
    with pytest.raises(ConfigError) as err:
        load_service_config(_config(tmp_path, "[patient]\n[patient.size]\nlength_scale = 2.1", mtg))
    assert err.value.key == "patient.size.length_scale"
    out = hil("check-config", _config(tmp_path, '[patient]\n[patient.size]\nlength_scale = 2.1', mtg))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_check_config_shows_a_bad_preset_as_one_line(tmp_path):
    out = hil("check-config", _config(tmp_path, '[patient]\npreset = "c7"'))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "unknown preset 'c7'" in out.stderr


def test_model_info_lists_each_groups_state(tmp_path):
    out = hil("model", "info", "--patient", "c6-tetraplegia", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["patient"]
    groups = {g["group"]: g for g in doc["groups"]}
    assert doc["name"] == "c6-tetraplegia" and len(groups) == 28
    assert groups["triclong"]["state"] == "paralysed" and groups["triclong"]["fmax_factor"] == [0.36]
    assert groups["supinator"]["state"] == "voluntary" and groups["supinator"]["stimulable"]
    mtg = {a["name"]: a for a in doc["mtg"]["actuators"]}
    assert len(mtg) == 10 and mtg["elbow_extensor"]["reach"] == 0.0 and mtg["elbow_extensor"]["strength"] == pytest.approx(0.36)
    (tmp_path / "tight.toml").write_text('[patient]\nname = "tight"\n[patient.groups.bicb]\ncontracture_lceopt = 0.2\n')
    tight = json.loads(hil("model", "info", "--patient", tmp_path / "tight.toml", "--json").stdout)["patient"]
    [elbow] = [c for c in tight["mtg"]["contracture"] if c["coordinate"] == "elbow_flexion"]
    assert elbow["rest_deg"] != elbow["able_bodied_rest_deg"]
    assert "contracture" not in doc["mtg"]
    bad = hil("model", "info", "--patient", "nobody")
    assert bad.returncode == 2 and "unknown preset 'nobody'" in bad.stderr and "Traceback" not in bad.stderr


def test_a_patient_run_is_recorded_and_replays_without_its_file(tmp_path):
    """hil run --patient FILE: the header holds the resolved table, the replay is bit-identical after the file
    is gone, and the arm moves otherwise than the able-bodied one under the same controller."""
    patient_file = tmp_path / "weak.toml"
    patient_file.write_text('[patient]\nname = "weak flexors"\n[patient.groups]\nbicl = {strength = 0.4}\n'
                            'bicb = {strength = 0.4}\nbrachialis = {strength = 0.4, state = "paralysed"}\n')
    rec, plain = tmp_path / "run.hilrec", tmp_path / "plain.hilrec"
    out = hil("run", "--config", ELBOW_HOLD, "--duration", "1", "--offline", "--patient", patient_file,
              "--record", rec)
    assert out.returncode == 0, out.stderr
    assert hil("run", "--config", ELBOW_HOLD, "--duration", "1", "--offline", "--record", plain).returncode == 0
    patient_file.unlink()
    header = RecordingReader(rec).header["config"]["patient"]
    assert header["name"] == "weak flexors" and header["groups"]["brachialis"] == {"state": "paralysed",
                                                                                   "strength": 0.4}
    rep = hil("replay", rec, "--json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr
    elbow = [RecordingReader(r).read("ticks")["frame"]["q"][:, 9] for r in (rec, plain)]
    assert np.max(np.abs(elbow[0] - elbow[1])) > 1e-3


@pytest.mark.parametrize("patient", ["stroke-hemiparesis", "contracted.toml", "small.toml"])
def test_a_patients_mtg_run_replays_bit_for_bit(tmp_path, patient):
    """The stroke preset (its flexors' reflex rings in the plant's state), a contracture (its moment tables in the
    model) and a smaller subject on the MTG arm: the replay is bit-identical, and the elbow moves otherwise than the
    able-bodied MTG arm's. Offline: a real-time run here would compete for the loop's CPU with the serial group's
    (tests/conftest.py REALTIME)."""
    (tmp_path / "contracted.toml").write_text('[patient]\nname = "contracted"\n'
                                              '[patient.groups.brachialis]\ncontracture_lceopt = 0.2\n')
    (tmp_path / "small.toml").write_text('[patient]\nname = "small"\n[patient.size]\nheight_m = 1.6\n'
                                         'body_mass_kg = 60\nstrength_rule = "none"\n')
    patient = tmp_path / patient if patient.endswith(".toml") else patient
    mtg = REPO / "configs" / "elbow-hold-mtg.toml"
    rec, plain = tmp_path / "patient.hilrec", tmp_path / "plain.hilrec"
    out = hil("run", "--config", mtg, "--duration", "1.5", "--offline", "--patient", patient, "--record", rec)
    assert out.returncode == 0, out.stderr
    assert hil("run", "--config", mtg, "--duration", "1.5", "--offline", "--record", plain).returncode == 0
    for file in ("contracted.toml", "small.toml"):              # the recording holds the resolved patient
        (tmp_path / file).unlink()
    rep = hil("replay", rec, "--json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr
    elbow = [RecordingReader(r).read("ticks")["frame"]["q"][:, 9] for r in (rec, plain)]
    assert np.max(np.abs(elbow[0] - elbow[1])) > 1e-3


def test_with_patient_replaces_the_table(tmp_path):
    cfg = with_patient(load_service_config(ELBOW_HOLD), {"preset": "stroke-hemiparesis"})
    assert cfg.patient.name == "stroke-hemiparesis" and cfg.raw["patient"] == resolved_table(cfg.patient)
    assert PRESET_DIR.is_dir()


def test_the_patient_sweep_example_is_accepted_by_hil_sweep(tmp_path):
    spec = load_sweep(str(REPO / "examples" / "sweeps" / "elbow-hold-patients.toml"))
    runs = variants(spec)
    valid, errors = preflight(tasks(spec, runs, str(tmp_path)))
    assert errors == [] and len(valid) == len(runs) == 8
    presets = {run.values["patient.preset"] for run in runs}
    assert presets == set(preset_names())


@pytest.mark.parametrize("flexors", ["voluntary", "denervated"])
def test_the_elbow_hold_controller_cannot_lift_a_forearm_whose_flexors_are_denervated(tmp_path, flexors):
    """configs/elbow-hold.toml's PID controller brings the able-bodied elbow from 37.6 deg to 90 deg and holds it;
    with bicl, bicb and brachialis denervated its biceps channel moves nothing and the elbow stays near rest."""
    groups = "".join(f'[patient.groups.{g}]\nstate = "{flexors}"\n' for g in ("bicl", "bicb", "brachialis"))
    elbow, _ = closed_loop_elbow(load_service_config(_config(tmp_path, groups)), 750)
    if flexors == "denervated":
        assert elbow.max() < elbow[0] + 5.0, (elbow[0], elbow.max())
    else:
        assert np.all(np.abs(elbow[500:] - 90.0) < 1.0), (elbow[500:].min(), elbow[500:].max())


def test_a_spastic_group_is_read_recorded_and_applied(tmp_path):
    spec = '[patient.groups.bicb.spasticity]\ngain = 0.2\nthreshold_lceopt_per_s = 0.1\ndelay_ms = 40'
    cfg = load_service_config(_config(tmp_path, spec))
    assert cfg.model.spasticity == (("bicb", 0.2, 0.1, 0.04),)
    recorded = cfg.raw["patient"]["groups"]["bicb"]["spasticity"]
    assert recorded == {"gain": 0.2, "threshold_lceopt_per_s": 0.1, "delay_ms": 40.0}
    assert read_patient(cfg.raw["patient"], "recorded")[0] == cfg.patient
    with pytest.raises(ConfigError) as err:
        load_service_config(_config(tmp_path, '[patient.groups.bicb.spasticity]\ngain = 0.2'))
    assert err.value.key == "patient.groups.bicb.spasticity.threshold_lceopt_per_s" and "is required" in err.value.reason


def test_analyze_catch_shows_the_stroke_presets_catch_at_the_fast_stretch_only(tmp_path):
    out = hil("analyze", "catch", "--patient", "stroke-hemiparesis", "--json", "--out", tmp_path / "catch")
    assert out.returncode == 0, out.stderr
    peaks = json.loads(out.stdout)["peak_reflex_moment_Nm"]
    assert peaks["5"] == 0.0 and peaks["100"] == pytest.approx(3.46, abs=0.01)
    assert (tmp_path / "catch" / "catch.png").stat().st_size > 10_000
    none = hil("analyze", "catch", "--patient", "c5-tetraplegia")
    assert none.returncode == 2 and "has no spastic group" in none.stderr and "Traceback" not in none.stderr


def test_analyze_catch_on_the_mtg_arm(tmp_path):
    """The same test on the reduced arm (its reflexes on the MTGs, sim.mtg.patient): the fast stretch catches
    within 30 % of the moment the gain was fitted to on the DAS3 arm, the slow one does not."""
    out = hil("analyze", "catch", "--patient", "stroke-hemiparesis", "--plant", "mtg", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["plant"] == "mtg" and abs(doc["peak_reflex_moment_Nm"]["5"]) < 1e-3
    assert doc["peak_reflex_moment_Nm"]["100"] == pytest.approx(3.46, rel=0.3)
    assert abs(doc["peak_reflex_moment_Nm"]["100"] - 3.46) > 0.1          # another arm than the fitted DAS3 one
    bad = hil("analyze", "catch", "--patient", "stroke-hemiparesis", "--plant", "opensim")
    assert_one_error_line(bad.returncode, bad.stderr, "--plant must be das3 or mtg")


def test_a_real_time_run_takes_the_patient_in_its_loop_process(tmp_path):
    """hil run --patient (not offline): the real-time process applies the override too, records the patient and
    the recording replays bit-identically."""
    rec = tmp_path / "rt.hilrec"
    out = hil("run", "--config", ELBOW_HOLD, "--duration", "0.5", "--patient", "stroke-hemiparesis", "--record", rec)
    assert out.returncode == 0, out.stderr
    assert RecordingReader(rec).header["config"]["patient"]["name"] == "stroke-hemiparesis"
    rep = hil("replay", rec, "--json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr


def test_a_contracture_is_read_recorded_and_applied(tmp_path):
    cfg = load_service_config(_config(tmp_path, '[patient.groups.brachialis]\ncontracture_lceopt = 0.1'))
    assert cfg.model.contracture == (("brachialis", 0.1),)
    assert cfg.raw["patient"]["groups"]["brachialis"] == {"state": "voluntary", "strength": 1.0,
                                                           "contracture_lceopt": 0.1}
    assert read_patient(cfg.raw["patient"], "recorded")[0] == cfg.patient
    with pytest.raises(ConfigError) as err:
        load_service_config(_config(tmp_path, '[patient.groups.brachialis]\ncontracture_lceopt = 0.95'))
    assert err.value.key == "patient.groups.brachialis.contracture_lceopt"
