"""A policy saved from a Gymnasium environment (hil.gym.policy_file) runs as the ``policy`` controller plug-in:
the same observation and action layouts, the network's commands applied through the engine's limits; a policy
file that is corrupt or does not fit gives one config error line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import hil_in_process

from drivers.controllers.policy import PolicyFileError, read_policy
from hil.config import load_service_config
from hil.gym.env import FesArmEnv
from hil.gym.policy_file import save_network
from hil.rt.offline import run_offline

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
GAIN = 3.0     # level per rad of elbow error


def proportional_layers():
    """A linear network on (elbow, elbow velocity, target): biceps level = GAIN e, triceps = -GAIN e."""
    return [(np.array([[-GAIN, 0.0, GAIN], [GAIN, 0.0, -GAIN]]), np.zeros(2))]


def policy_config(tmp_path: Path, policy: Path, target: str = "80", base: str = "elbow-hold.toml") -> Path:
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'include = ["{CONFIGS / "gym" / base}"]\n[[driver]]\ntype = "loopback"\n'
                   f'controller = "policy"\npolicy = "{policy}"\ntarget_deg = {target}\nrate_hz = 50\n')
    return cfg


class Keep:
    def __init__(self):
        self.frames, self.applied = [], []

    def on_tick(self, record, engine, actuation_ns):
        self.frames.append(record[0]["frame"].copy())
        self.applied.append(record[0]["applied"][:, 1].copy())


def test_a_saved_policy_commands_what_the_network_says_in_a_run(tmp_path):
    env = FesArmEnv("ElbowHold")
    path = tmp_path / "policy.npz"
    save_network(str(path), env.episodes, proportional_layers(), activation="tanh")
    keep = Keep()
    run_offline(load_service_config(policy_config(tmp_path, path)), 300, [keep])
    elbow = np.array([f["elbow_flexion"] for f in keep.frames])
    applied = np.array(keep.applied)
    # the command applied at tick 5k + 1 came from the frame of tick 5k - 1 (50 Hz calls, 4 ms ticks)
    k = 50
    error = np.radians(80.0) - keep.frames[k - 1]["elbow_flexion"]
    error /= np.sqrt(1.0 + 1e-8)      # the normalisation SB3's VecNormalize applies: (x - 0) / sqrt(1 + eps)
    expected = np.clip([GAIN * error, -GAIN * error], 0.0, 1.0) * 100.0
    assert applied[k + 1, [3, 4]] == pytest.approx(expected, rel=1e-12)
    assert abs(np.degrees(elbow[-1]) - 80.0) < abs(np.degrees(elbow[0]) - 80.0) / 2


def test_the_file_keeps_the_environment_layouts(tmp_path):
    env = FesArmEnv("Reach")
    path = tmp_path / "policy.npz"
    n_obs, n_act = env.observation_space.shape[0], env.action_space.shape[0]
    save_network(str(path), env.episodes, [(np.zeros((n_act, n_obs)), np.zeros(n_act))])
    net = read_policy(str(path))
    assert net.meta["observe"] == ["q", "qdot", "hand_position"] and net.meta["target_unit"] == "m"
    assert net.meta["action"]["channels"] == list(env.episodes.arms.actions.channels)


@pytest.mark.parametrize("damage, words", [
    ("garbage", "not a policy saved by hil.gym"),
    ("wrong_size", "do not take"),
    ("nan", "do not take"),
    ("target", "1 finite value(s)"),
])
def test_a_bad_policy_file_is_one_config_error(tmp_path, damage, words):
    env = FesArmEnv("ElbowHold")
    path = tmp_path / "policy.npz"
    layers = proportional_layers()
    if damage == "wrong_size":
        layers = [(np.zeros((2, 5)), np.zeros(2))]
    if damage == "nan":
        layers[0][0][0, 0] = np.nan
    save_network(str(path), env.episodes, layers)
    if damage == "garbage":
        path.write_bytes(b"PK\x03\x04 not a zip at all")
    cfg = policy_config(tmp_path, path, target='"ninety"' if damage == "target" else "80")
    out = hil_in_process("check-config", cfg)
    key = "driver[0].target_deg" if damage == "target" else "driver[0].policy"
    assert out.returncode == 2 and key in out.stderr and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_policy_observing_what_the_runs_plant_does_not_model_is_one_config_error(tmp_path):
    """Trained on the DAS3 arm with the GH stability observed, run on the MTG arm (NaN there): refused."""
    env = FesArmEnv("ElbowHold", observe=("q[ELx]", "qdot[ELx]", "gh_stability"))
    path = tmp_path / "policy.npz"
    save_network(str(path), env.episodes, [(np.zeros((2, 4)), np.zeros(2))])
    assert hil_in_process("check-config", policy_config(tmp_path, path)).returncode == 0
    out = hil_in_process("check-config", policy_config(tmp_path, path, base="elbow-hold-mtg.toml"))
    assert out.returncode == 2 and "driver[0].policy" in out.stderr, out.stderr
    assert "observes gh_stability, which this run's plant does not model" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_policy_observing_a_lab_sensor_the_run_has_not_is_one_config_error(tmp_path):
    """Trained with IMUs, run without them: refused by check-config, not failing in every call of the run."""
    with_imu = tmp_path / "gym-imu.toml"
    with_imu.write_text(f'include = ["{CONFIGS / "gym" / "elbow-hold.toml"}"]\n'
                        '[sensor.imu]\nmodel = "mti-300"\nrate_hz = 100\nlatency_ms = 2\n')
    env = FesArmEnv("ElbowHold", config=str(with_imu), observe=("q[ELx]", "imu_gyro"))
    path = tmp_path / "policy.npz"
    save_network(str(path), env.episodes, [(np.zeros((2, env.observation_space.shape[0])), np.zeros(2))])
    runs_with_imu = tmp_path / "run-imu.toml"
    runs_with_imu.write_text(policy_config(tmp_path, path).read_text() + with_imu.read_text().split("\n", 1)[1])
    assert hil_in_process("check-config", runs_with_imu).returncode == 0
    out = hil_in_process("check-config", policy_config(tmp_path, path))
    assert out.returncode == 2 and "driver[0].policy" in out.stderr, out.stderr
    assert "observation item 'imu_gyro': the frame has no field 'imu_gyro'" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_policy_file_that_would_unpack_to_gigabytes_is_refused_before_it_is_read(tmp_path):
    import io
    import zipfile
    env = FesArmEnv("ElbowHold")
    good = tmp_path / "good.npz"
    save_network(str(good), env.episodes, proportional_layers())
    declared = tmp_path / "declared.npz"           # W0's header declares 320 GB, its data is a few bytes
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(declared, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "W0.npy":
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                              "shape": (200000, 200000)})
                data = header.getvalue() + bytes(16)
            dst.writestr(info.filename, data)
    with pytest.raises(PolicyFileError, match=r"W0.npy declares an array of shape \(200000, 200000\)"):
        read_policy(str(declared))                 # numpy would have tried to allocate 298 GiB: a MemoryError
    bomb = tmp_path / "bomb.npz"                   # 400 MB of zeros in a 0.4 MB file
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        data = io.BytesIO()
        np.save(data, np.zeros((5000, 10000)))
        dst.writestr("W0.npy", data.getvalue())
    with pytest.raises(PolicyFileError, match="its arrays unpack to 400000128 bytes; at most"):
        read_policy(str(bomb))
    assert read_policy(str(good)).meta["task"] == "ElbowHold"


def test_the_render_example_draws_the_saved_policys_episode(tmp_path):
    """examples/gym/render_episode.py: the shipped PPO policy's episode, drawn (hil.gym.render) two frames a row."""
    import subprocess
    import sys

    import matplotlib.image
    out = tmp_path / "episode.png"
    done = subprocess.run([sys.executable, "examples/gym/render_episode.py", "--frames", "3", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0 and "3 frames of 200 steps" in done.stdout, done.stdout + done.stderr
    assert matplotlib.image.imread(out).shape[:2] == (2 * 244, 2 * 484)

