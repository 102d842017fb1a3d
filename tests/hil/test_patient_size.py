"""A patient's size (issue 37, item 5: [patient.size], sim.subject_size) in configs: read, applied to the model,
recorded and replayed, shown by hil model info, swept, refused by the MTG plant, and bad keys as one error line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import hil, hil_in_process

from hil.config import load_service_config, service_config_from_dict
from hil.patients import read_patient
from hil.recording.hilrec import RecordingReader
from hil.rt.plants import plant_type
from hil.sweep.runner import preflight, tasks
from hil.sweep.spec import load_sweep, variants
from hil.view.scene import Scene
from sim.config_schema import toml_text
from sim.das3.config import ConfigError, ModelConfig
from sim.das3.model import load_model

REPO = Path(__file__).resolve().parents[2]
ELBOW_HOLD = REPO / "configs" / "elbow-hold.toml"
SMALL = '[patient.size]\nheight_m = 1.6\nbody_mass_kg = 60.0\n'
S_L, S_M = 1.6 / 1.741, 60.0 / 73.0


def _config(tmp_path, patient_toml: str, base: Path = ELBOW_HOLD) -> Path:
    path = tmp_path / "sized.toml"
    path.write_text(f'include = ["{base}"]\n{patient_toml}\n')
    return path


def test_a_size_is_read_applied_and_recorded_as_given(tmp_path):
    cfg = load_service_config(_config(tmp_path, SMALL))
    assert (cfg.model.length_scale, cfg.model.mass_scale, cfg.model.force_scale) == (S_L, S_M, S_L ** 2)
    assert not cfg.patient.able_bodied and cfg.model.strength == ()
    assert cfg.raw["patient"]["size"] == {"height_m": 1.6, "body_mass_kg": 60.0, "strength_rule": "geometric"}
    assert read_patient(cfg.raw["patient"], "recorded")[0] == cfg.patient       # a replay rebuilds the same arm
    plain = load_service_config(_config(tmp_path, '[patient]\nname = "x"\n[patient.size]\nlength_scale = 1.0'))
    assert plain.model == ModelConfig() and "size" not in plain.raw["patient"]   # the reference: nothing recorded
    rule = load_service_config(_config(tmp_path, '[patient.size]\nlength_scale = 1.1\nstrength_rule = "none"'))
    assert (rule.model.length_scale, rule.model.mass_scale, rule.model.force_scale) == (1.1, 1.0, 1.0)


@pytest.mark.parametrize("size_toml, key, message", [
    ("height_m = 3.0", "patient.size.height_m", "must be a finite number in [0.9, 2.5]"),
    ("height_m = 1.7\nlength_scale = 0.9", "patient.size.length_scale", "give height_m or length_scale, not both"),
    ("body_mass_kg = 70\nmass_scale = 0.9", "patient.size.mass_scale", "give body_mass_kg or mass_scale, not both"),
    ('strength_rule = "cubic"', "patient.size.strength_rule", "must be one of geometric, mass, none"),
    ("heigth_m = 1.7", "patient.size.heigth_m", "did you mean 'height_m'"),
    ("mass_scale = 0.1", "patient.size.mass_scale", "must be a finite number in [0.25, 4]"),
])
def test_a_bad_size_is_one_error_line_naming_the_key(tmp_path, size_toml, key, message):
    with pytest.raises(ConfigError) as err:
        load_service_config(_config(tmp_path, f"[patient.size]\n{size_toml}"))
    assert err.value.key == key and message in err.value.reason
    out = hil_in_process("check-config", _config(tmp_path, f"[patient.size]\n{size_toml}"))
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_the_view_draws_the_scaled_thorax(tmp_path):
    radii = Scene(load_service_config(_config(tmp_path, SMALL)), {}).info()["thorax"]["radii"]
    assert radii == pytest.approx([S_L * r for r in load_model().arrays.contact[3:6]], rel=1e-14)


def test_the_mtg_plant_takes_a_size(tmp_path):
    """The MTG arm on the scaled DAS3 segments, its moments x s_F s_L (tests/sim/test_mtg_size.py)."""
    cfg = load_service_config(_config(tmp_path, SMALL, REPO / "configs" / "elbow-hold-mtg.toml"))
    small, published = plant_type("mtg").load_model(cfg), plant_type("mtg").load_model(
        load_service_config(REPO / "configs" / "elbow-hold-mtg.toml"))
    scale = cfg.model.force_scale * cfg.model.length_scale
    assert small.arrays.mtg_const[:, 2] == pytest.approx(published.arrays.mtg_const[:, 2] * scale, rel=1e-14)
    assert small.arrays.body_mass == pytest.approx(published.arrays.body_mass * S_M, rel=1e-14)


def test_model_info_shows_the_scales_and_the_segments(tmp_path):
    patient = tmp_path / "small.toml"
    patient.write_text(f'[patient]\nname = "small"\n{SMALL}')
    out = hil("model", "info", "--patient", patient, "--json")
    assert out.returncode == 0, out.stderr
    size = json.loads(out.stdout)["patient"]["size"]
    assert size["length_scale"] == S_L and size["mass_scale"] == S_M and size["strength_rule"] == "geometric"
    assert (size["reference_height_m"], size["reference_body_mass_kg"]) == (1.741, 73.0)
    published = load_model().arrays
    segments = {s["segment"]: s for s in size["segments"]}
    assert segments["humerusr"]["length_m"] == pytest.approx(S_L * 0.29079914, rel=1e-7)
    assert segments["humerusr"]["mass_kg"] == pytest.approx(S_M * published.body_mass[2], rel=1e-12)
    text = hil("model", "info", "--patient", patient)
    assert text.returncode == 0 and "humerusr" in text.stdout and "Size: length x0.919" in text.stdout


def test_a_sized_patient_runs_offline_is_recorded_and_replays(tmp_path):
    patient = tmp_path / "small.toml"
    patient.write_text(f'[patient]\nname = "small"\n{SMALL}')
    rec = tmp_path / "run.hilrec"
    out = hil("run", "--config", ELBOW_HOLD, "--duration", "1", "--offline", "--patient", patient, "--record", rec)
    assert out.returncode == 0, out.stderr
    patient.unlink()
    assert RecordingReader(rec).header["config"]["patient"]["size"]["height_m"] == 1.6
    rep = hil("replay", rec, "--json")
    assert rep.returncode == 0 and json.loads(rep.stdout)["identical"], rep.stdout + rep.stderr


def test_a_sweep_varies_the_height(tmp_path):
    sweep = tmp_path / "sizes.toml"
    sweep.write_text(f'base = {toml_text(str(ELBOW_HOLD))}\nduration_s = 1.0\n[grid]\n'
                     '"patient.size.height_m" = [1.5, 1.9]\n"patient.size.strength_rule" = ["geometric", "mass"]\n')
    spec = load_sweep(str(sweep))
    valid, errors = preflight(tasks(spec, variants(spec), str(tmp_path / "out")))
    assert errors == [] and len(valid) == 4
    scales = sorted(service_config_from_dict(task.raw, task.config_path).model.length_scale for task in valid)
    assert scales == pytest.approx([1.5 / 1.741] * 2 + [1.9 / 1.741] * 2, rel=1e-15)

