"""``hil model linearize``: the files it writes (.npz, .mat through scipy.io) with A, B, C, D and their names, the
channel inputs (level and amplitude), and one clear error line for each bad input."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import hil_in_process
from scipy.io import loadmat

from hil.config import load_service_config
from hil.linearize import channel_inputs, level_per_ma, stimulation_model
from hil.patients import load_patient
from hil.rt.plants import plant_type
from hil.rt.stimulation import amplitude_for_level
from sim.das3.config import ModelConfig
from sim.das3.model import load_model
from sim.mtg.model import mtg_model_for
from sim.patient import apply_patient

ROOT = Path(__file__).resolve().parents[2]
HOLD = str(ROOT / "configs/elbow-hold.toml")
HOLD_MTG = str(ROOT / "configs/elbow-hold-mtg.toml")


def _linearize(*args):
    return subprocess.run([sys.executable, "-m", "hil", "model", "linearize", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_npz_at_a_channel_held_posture_with_reduced_and_discrete_forms(tmp_path):
    out = tmp_path / "elbow.npz"
    run = _linearize("--config", HOLD, "--posture", "ELx=90", "--inputs", "channels=biceps,triceps",
                     "--outputs", "q:ELx,qdot:ELx,hand_position", "--reduce", "ELx", "--out", str(out), "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["q0_deg"]["ELx"] == pytest.approx(90.0, abs=1e-6) and summary["residual_max"] < 1e-8
    z = np.load(out)
    assert z["A"].shape == (298, 298) and z["B"].shape == (298, 2) and z["C"].shape == (5, 298)
    assert z["D"].shape == (5, 2) and list(z["input_names"]) == ["biceps", "triceps"]
    assert list(z["output_names"][:2]) == ["q_ELx", "qdot_ELx"] and z["state_names"][9] == "q_ELx"
    assert z["A_reduced"].shape[0] == len(z["reduced_state_names"]) and z["dt"] == pytest.approx(0.004)
    assert z["A_discrete"].shape == (298, 298) and z["A_reduced_discrete"].shape == z["A_reduced"].shape
    prov = json.loads(str(z["provenance"]))
    assert prov["model_data_sha256"] == load_model().data_sha256 and prov["config"] == HOLD
    assert np.max(np.linalg.eigvals(z["A"]).real) < 0.0              # the held posture is stable


def test_mat_at_the_published_equilibrium_with_amplitude_inputs(tmp_path):
    out = tmp_path / "rest.mat"
    run = _linearize("--config", HOLD, "--inputs", "channels=biceps", "--channel-input", "amplitude",
                     "--out", str(out), "--json")
    assert run.returncode == 0, run.stderr
    m = loadmat(out)
    assert {"A", "B", "C", "D", "x0", "u0", "state_names", "provenance"} <= set(m)
    assert m["A"].shape == (298, 298) and m["C"].shape == (22, 298)
    np.testing.assert_array_equal(m["x0"].ravel(), load_model().equilibrium_state)
    assert not np.any(m["B"])                     # at rest the channel is below threshold: the dead zone
    assert any("flat" in n for n in json.loads(run.stdout)["notes"])


def test_mtg_arm_of_its_config_at_a_channel_held_posture(tmp_path):
    out = tmp_path / "mtg.npz"
    run = _linearize("--config", HOLD_MTG, "--posture", "ELx=90", "--inputs", "channels=elbow_flexor,elbow_extensor",
                     "--outputs", "q:ELx,qdot:ELx", "--reduce", "ELx", "--out", str(out), "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["plant"] == "mtg" and summary["q0_deg"]["elbow_flexion"] == pytest.approx(90.0, abs=1e-6)
    assert summary["residual_max"] < 1e-10 and any("Richardson" in n for n in summary["notes"])
    z = np.load(out)
    assert z["A"].shape == (20, 20) and z["B"].shape == (20, 2) and z["state_names"][3] == "q_elbow_flexion"
    assert list(z["reduced_state_names"]) == ["q_elbow_flexion", "qdot_elbow_flexion", "a_elbow_flexor",
                                              "a_elbow_extensor"]
    prov = json.loads(str(z["provenance"]))
    cfg = load_service_config(HOLD_MTG)
    assert prov["plant"] == "mtg" and "central differences" in prov["method"]
    assert prov["model_data_sha256"] == plant_type("mtg").load_model(cfg).data_sha256
    assert np.max(np.linalg.eigvals(z["A"]).real) < 0.0


def test_a_patients_mtg_arm_without_a_config(tmp_path):
    out = tmp_path / "stroke.npz"
    run = _linearize("--plant", "mtg", "--patient", "stroke-hemiparesis", "--posture", "ELx=90",
                     "--inputs", "excitations=elbow_flexor", "--outputs", "q:ELx", "--out", str(out), "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    who = load_patient("stroke-hemiparesis")
    arm = mtg_model_for(apply_patient(ModelConfig(), who), who)
    prov = json.loads(str(np.load(out)["provenance"]))
    assert summary["plant"] == "mtg" and summary["states"] == 20 and prov["options"]["patient"] == "stroke-hemiparesis"
    assert prov["model_data_sha256"] == arm.data_sha256 != mtg_model_for(ModelConfig(), None).data_sha256
    able = json.loads(_linearize("--plant", "mtg", "--posture", "ELx=90", "--inputs", "excitations=elbow_flexor",
                                 "--out", str(tmp_path / "able.npz"), "--json").stdout)
    assert summary["u0"][0] > able["u0"][0]                   # the weakened flexor needs more to hold 90 deg


def test_amplitude_slope_matches_the_recruitment_curve():
    cfg = load_service_config(HOLD)
    model = load_model(cfg.model)
    stim = stimulation_model(cfg, model)
    ch = stim.channels[3]
    pw, f = 300e-6, 40.0
    for level in (0.05, 0.3, 0.7):                           # dl/dI against the independent inverse I(l)
        amp = amplitude_for_level(ch, level, pw, f) * 1e3
        d = 1e-6
        di_dl = (amplitude_for_level(ch, level + d, pw, f) - amplitude_for_level(ch, level - d, pw, f)) * 1e3 / (2 * d)
        assert level_per_ma(ch, amp, pw, f) * di_dl == pytest.approx(1.0, rel=1e-5)
    assert level_per_ma(ch, 10.0, pw, f) == 0.0                 # below the threshold (about 16.7 mA at 300 us)
    u, J = channel_inputs(stim, ["biceps", "triceps"], f).excitation(np.array([0.2, 0.0]))
    bicl = model.muscle_names.index("bicl")
    assert u[bicl] == pytest.approx(0.2) and J[bicl, 0] == 1.0 and J[bicl, 1] == 0.0


@pytest.mark.parametrize("case, args, message", [
    ("short_state", ["--state", "{short}"], "expected 298 state values"),
    ("nan_state", ["--state", "{nan}"], "not finite"),
    ("unknown_dof", ["--posture", "ELbow=90"], "--posture: 'ELbow=90' is not DOF=deg"),
    ("bad_extension", ["--out", "{tmp}/model.txt"], "unknown extension '.txt'"),
    ("no_channels", ["--config", str(ROOT / "configs/loopback.toml"), "--inputs", "channels"],
     "--inputs channels needs stimulation channels"),
    ("mtg_groups", ["--config", HOLD_MTG, "--inputs", "groups"], "the MTG arm has no muscle groups"),
    ("bad_plant", ["--plant", "mtx"], "--plant: 'mtx' is not a plant type (das3 or mtg)"),
    ("mtg_short_state", ["--config", HOLD_MTG, "--state", "{short}"], "expected 20 state values"),
    ("negative_activation", ["--state", "{negative}"], "not a state of the DAS3 model: activation of trapscap6 is -3"),
    ("mtg_activation", ["--config", HOLD_MTG, "--state", "{mtg_over}"],
     "not a state of the MTG model: activations must lie in [0, 1]"),
    ("huge_angle", ["--posture", "ELx=1e300"], "--posture: 'ELx=1e300': the angle must be a number of degrees from -180"),
    ("nan_angle", ["--plant", "mtg", "--posture", "ELx=nan"], "the angle must be a number of degrees from -180 to 180"),
    ("nan_frequency", ["--config", HOLD, "--inputs", "channels=biceps",
                       "--frequency-hz", "nan"], "--frequency-hz must be within the input channels' limits, 10 to 100"),
    ("huge_pulse", ["--config", HOLD, "--inputs", "channels=biceps",
                    "--channel-input", "amplitude", "--pulse-width-us", "1e9"],
     "--pulse-width-us must be more than 0 and at most 500 us"),
])
def test_bad_input_is_one_clear_line(tmp_path, case, args, message):
    short, nan = tmp_path / "short.json", tmp_path / "nan.csv"
    short.write_text(json.dumps({"x": [0.0] * 100}))
    nan.write_text(",".join(["0.1"] * 297 + ["nan"]) + "\n")
    negative, mtg_over = tmp_path / "negative.json", tmp_path / "mtg_over.json"
    x = load_model().equilibrium_state.copy()
    x[2 * 11 + 138 + 5] = -3.0                                 # an activation
    negative.write_text(json.dumps({"x": x.tolist()}))
    mtg_over.write_text(json.dumps({"x": [0.1, 1.0] + [0.0] * 8 + [1.5] * 10}))
    args = [a.format(short=short, nan=nan, tmp=tmp_path, negative=negative, mtg_over=mtg_over) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "m.npz")]
    run = hil_in_process("model", "linearize", *args)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in " ".join(run.stderr.split()), run.stderr
    assert not (tmp_path / "m.npz").exists() and math.isfinite(0.0)
