"""Lab sensors (hil/rt/lab_sensors.py): IMU noise against its datasheet parameters (Allan deviation), IMU
orientation and rate against the model's kinematics, encoder quantisation, the evoked EMG under fatigue and
denervation, config errors, and replay of a run with every lab sensor."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import CONFIGS, hil_in_process
from scipy.spatial.transform import Rotation

from drivers.core.contract import frame_dtype
from hil.rt.engine import TickEngine
from hil.rt.lab_sensors import (
    EmgConfig,
    EncoderConfig,
    ImuConfig,
    LabSensors,
    LabSensorsConfig,
    gyro_record,
    lab_frame_dtype,
)
from hil.rt.sensor import SensorModel, SensorModelConfig
from hil.rt.stimulation import StimulationModel, load_stimulation_config
from hil.safety.table import SafetyConfig
from sim.das3.config import ConfigError
from sim.das3.kinematics import frames
from sim.das3.model import HUMERUS_FRAME, RADIUS_FRAME
from sim.das3.plant import Plant

PERIOD = 0.004
DEG_H = math.radians(1.0) / 3600.0
MTI300 = ImuConfig(model="mti-300", rate_hz=100.0, latency_s=0.0, gyro_noise=math.radians(0.01),
                   gyro_bias_instability=10.0 * DEG_H, gyro_bias_correlation_s=100.0,
                   roll_pitch_noise=math.radians(0.2), heading_noise=math.radians(1.0))
EXACT = ImuConfig(model="mti-300", rate_hz=1 / PERIOD, latency_s=0.0, gyro_noise=0.0, gyro_bias_instability=0.0,
                  gyro_bias_correlation_s=100.0, roll_pitch_noise=0.0, heading_noise=0.0)


def allan_deviation(rate: np.ndarray, fs: float, m: int) -> float:
    """Overlapping Allan deviation of a rate record sampled at fs, cluster time tau = m / fs (IEEE Std 952)."""
    angle = np.concatenate(([0.0], np.cumsum(rate))) / fs
    d = angle[2 * m:] - 2.0 * angle[m:-m] + angle[:-2 * m]
    return float(np.sqrt(np.mean(d * d) / (2.0 * (m / fs) ** 2)))


def test_gyro_allan_deviation_gives_the_datasheet_noise_density_and_bias_instability():
    """4 h of a resting MTi-300 gyro at 50 Hz from the tick's own noise kernel: the Allan deviation at tau = 1 s
    is the noise density N (within 10 %), falls as 1/sqrt(tau) there, and at the Gauss-Markov bias's peak
    (tau = 1.89 T) is the in-run bias stability (within 20 %, the estimate's spread over 4 h, 3 axes averaged)."""
    imu = ImuConfig(**{**MTI300.__dict__, "rate_hz": 50.0})
    fs = imu.rate_hz
    sensors = LabSensors(LabSensorsConfig(imu=imu), seed=5)
    params = sensors.imu_params(imu, 1 / fs, 0)
    bias = np.zeros((2, 3))
    sensors.imu = (params, *sensors.imu[1:4], bias, *sensors.imu[5:])
    sensors.reset()                               # the bias drawn from its stationary distribution
    record = np.zeros((int(4 * 3600 * fs), 3))
    gyro_record(params, sensors.rng, bias, record)
    n = [allan_deviation(record[:, i], fs, int(fs)) for i in range(3)]
    assert np.allclose(n, imu.gyro_noise, rtol=0.10), np.degrees(n)
    slope = np.log(allan_deviation(record[:, 0], fs, int(4 * fs)) / n[0]) / np.log(4.0)
    assert slope == pytest.approx(-0.5, abs=0.05)
    floor = np.mean([allan_deviation(record[:, i], fs, int(1.89 * 100.0 * fs)) for i in range(3)])
    assert floor == pytest.approx(imu.gyro_bias_instability, rel=0.20), floor / DEG_H


def _engine(model, lab: LabSensorsConfig, fatigue="none", seed=0):
    table = {"fatigue": fatigue, "channel": [{"name": "biceps", "muscles": {"bicl": 1.0, "bicb": 1.0}}]}
    stim = StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)
    sensor = SensorModel(SensorModelConfig(seed=seed, lab=lab), n_channels=1)
    return TickEngine(Plant(model, step_s=PERIOD), stim, SafetyConfig(watchdog_timeout_s=0.2), sensor, PERIOD, 1,
                      ("unknown_channel",))


def _run(engine, n: int, amplitude_ma: float = 60.0, frequency_hz: float = 40.0) -> np.ndarray:
    out = np.zeros(n, engine.sensor.dtype)
    for tick in range(n):
        engine.begin(tick)
        if amplitude_ma > 0:
            engine.channel(0, tick, 0, 300.0, amplitude_ma, frequency_hz, 0)
        out[tick] = engine.step().frame[0]
    return out


def _body_rate(model, q, qdot, f, h=1e-6) -> np.ndarray:
    """The segment's angular velocity in its own frame by central differences of the drawing kinematics."""
    R0, _ = frames(model.arrays, q)
    Rp, _ = frames(model.arrays, q + h * qdot)
    Rm, _ = frames(model.arrays, q - h * qdot)
    omega = R0[0, f].T @ (Rp[0, f] - Rm[0, f]) / (2 * h)
    return np.array([omega[2, 1], omega[0, 2], omega[1, 0]])


def test_imu_reports_the_segment_orientation_and_rate_of_the_model(model):
    """Noise off, latency 0, the loop rate: each IMU's quaternion is its segment's rotation in the thorax frame
    (scipy from the drawing kinematics, sim.das3.kinematics) and its gyro the segment's angular velocity in its
    own frame (central differences of those rotations), while the biceps moves the elbow."""
    engine = _engine(model, LabSensorsConfig(imu=EXACT))
    got = _run(engine, 60)
    assert np.ptp(got["q"][:, 9]) > 0.02         # the elbow moved
    for k in (0, 30, 59):
        R, _ = frames(model.arrays, got["q"][k])
        for s, f in enumerate((HUMERUS_FRAME, RADIUS_FRAME)):
            x, y, z, w = Rotation.from_matrix(R[0, f]).as_quat()
            want = np.array([w, x, y, z]) * (1 if w >= 0 else -1)
            assert np.allclose(got["imu_quat"][k, s], want, atol=1e-12)
            rate = _body_rate(model, got["q"][k], got["qdot"][k], f)
            assert np.allclose(got["imu_gyro"][k, s], rate, atol=1e-6 * max(1.0, np.abs(rate).max()))


def test_imu_samples_and_holds_at_its_rate_after_its_latency_and_its_quaternion_is_unit(model):
    exact = _run(_engine(model, LabSensorsConfig(imu=EXACT)), 40)
    slow = ImuConfig(**{**EXACT.__dict__, "rate_hz": 62.5, "latency_s": 3 * PERIOD})    # every 4th tick
    held = _run(_engine(model, LabSensorsConfig(imu=slow)), 40)
    for k in range(3, 40):
        sample = (k - 3 + 1) // 4 * 4 - 1 if k - 3 >= 3 else 0       # the newest sample tick 3 ticks ago
        assert np.array_equal(held["imu_quat"][k], exact["imu_quat"][max(sample, 0)]), k
    noisy = _run(_engine(model, LabSensorsConfig(imu=MTI300), seed=4), 40)
    assert np.allclose(np.linalg.norm(noisy["imu_quat"], axis=2), 1.0, atol=1e-12)
    angle = 2 * np.arccos(np.clip(np.abs(np.sum(noisy["imu_quat"] * exact["imu_quat"], axis=2)), 0, 1))
    assert 0 < np.median(angle) < math.radians(5)


def test_encoder_counts_are_the_joint_angle_quantised(model):
    cpr = 1000
    got = _run(_engine(model, LabSensorsConfig(encoder=EncoderConfig(("ELx", "PSy"), cpr))), 30)
    step = 2 * math.pi / cpr
    counts = np.stack([got["encoder_ELx"], got["encoder_PSy"]], axis=1)
    assert np.array_equal(counts, np.round(counts)) and np.ptp(counts[:, 0]) >= 1
    assert np.all(np.abs(counts * step - got["q"][:, [9, 10]]) <= step / 2 + 1e-12)


EMG = EmgConfig(m_max_v=0.01, fatigue_coupling=0.5, noise_v=0.0)


def test_m_wave_falls_with_fatigue_and_is_zero_without_stimulation(model):
    """A constant strong biceps command for 10 s with Ding fatigue: the M-wave follows
    M_max r (1 - c_M (1 - fitness)) and falls as the fitness does; 0 before the first command and at 0 Hz;
    without fatigue it stays at M_max r."""
    tired = _engine(model, LabSensorsConfig(emg=EMG), fatigue="ding2003")
    quiet = _run(tired, 5, amplitude_ma=0.0)
    assert np.all(quiet["emg_mwave"] == 0.0)
    m = _run(tired, 2500, amplitude_ma=100.0)["emg_mwave"][:, 0]
    fitness = tired.fitness[0]
    assert fitness < 0.9
    assert m[0] == pytest.approx(0.01, rel=1e-12)     # rested; 300 us x 100 mA saturates the default recruitment
    assert m[-1] == pytest.approx(0.01 * (1 - 0.5 * (1 - fitness)), rel=1e-2)
    assert np.all(np.diff(m) <= 1e-15) and m[-1] < m[0] * 0.96
    off = _run(tired, 3, amplitude_ma=100.0, frequency_hz=0.0)["emg_mwave"]
    assert np.all(off == 0.0)
    fresh = _run(_engine(model, LabSensorsConfig(emg=EMG)), 300, amplitude_ma=100.0)["emg_mwave"][:, 0]
    assert np.all(fresh[1:] == fresh[1])


def test_m_wave_of_a_channel_on_denervated_muscles_is_zero(model):
    """g_c: the share of the channel's gains on innervated elements (bicl denervated: half; both: none)."""
    table = {"channel": [{"name": "biceps", "muscles": {"bicl": 1.0, "bicb": 1.0}}]}
    stim = StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)
    applied = np.array([[300.0, 100.0, 40.0, 0.0]])
    out = []
    for denervated in ((), ("bicl",), ("bicl", "bicb")):
        lab = LabSensorsConfig(emg=EMG)
        frame = np.zeros(1, lab_frame_dtype(frame_dtype(), lab, 1))
        sensors = LabSensors(lab, 0)
        patient = SimpleNamespace(config=SimpleNamespace(denervated=denervated), muscle_names=model.muscle_names)
        sensors.bind(frame, patient, stim, applied, np.ones(1), PERIOD)
        sensors.step(0, np.zeros(11), np.zeros(11))
        out.append(frame["emg_mwave"][0, 0])
    gains = stim.gains[0]
    bicb = [i for i, name in enumerate(model.muscle_names) if name.startswith("bicb")]
    assert out[0] == pytest.approx(0.01) and out[1] == pytest.approx(0.01 * gains[bicb].sum() / gains.sum())
    assert 0 < out[1] < out[0] and out[2] == 0.0


def test_without_lab_sensors_the_frame_and_the_run_are_unchanged():
    assert SensorModel(SensorModelConfig()).dtype == frame_dtype()
    assert SensorModel(SensorModelConfig(), n_channels=8).ideal


@pytest.mark.parametrize("base, text, key", [
    ("elbow-hold.toml", '[sensor.imu]\nmodel = "mti-9"\n', "sensor.imu.model"),
    ("elbow-hold.toml", "[sensor.imu]\nrate_hz = -1\n", "sensor.imu.rate_hz"),
    ("elbow-hold.toml", "[sensor.imu]\ngyro_noise = 1\n", "sensor.imu.gyro_noise"),
    ("elbow-hold.toml", '[sensor.encoder]\njoints = ["elbow"]\n', "sensor.encoder.joints"),
    ("elbow-hold.toml", '[sensor.encoder]\njoints = ["ELx", "ELx"]\n', "sensor.encoder.joints"),
    ("elbow-hold.toml", '[sensor.encoder]\njoints = []\n', "sensor.encoder.joints"),
    ("elbow-hold.toml", "[sensor.emg]\nfatigue_coupling = 2\n", "sensor.emg.fatigue_coupling"),
    ("elbow-hold.toml", "[sensor]\nimu = 3\n", "sensor.imu"),
    ("loopback.toml", "[sensor.emg]\n", "sensor.emg"),
])
def test_lab_sensor_config_errors_name_the_key(config_over, base, text, key):
    from hil.config import load_service_config

    with pytest.raises(ConfigError) as err:
        load_service_config(config_over(base, text))
    assert err.value.key == key


def test_a_run_with_every_lab_sensor_replays_bit_identically(tmp_path):
    """configs/elbow-hold-imu.toml (IMUs with the MTi-300's noise, encoders, EMG with noise, fatigue): an
    offline run's recording holds the lab fields, and replaying it reproduces every frame bit for bit."""
    from hil.config import load_service_config
    from hil.recording.hilrec import read_run_recording
    from hil.recording.replay import replay_recording
    from hil.rt.offline import run_offline

    cfg = load_service_config("configs/elbow-hold-imu.toml")
    path = tmp_path / "imu.hilrec"
    run_offline(cfg, 400, record_path=str(path))
    frames_ = read_run_recording(str(path)).read("ticks")["frame"]
    assert {"imu_quat", "imu_gyro", "encoder_ELx", "encoder_PSy", "emg_mwave"} <= set(frames_.dtype.names)
    assert np.ptp(frames_["imu_gyro"][:, 1]) > 0 and frames_["emg_mwave"][:, 3].max() > 0
    result = replay_recording(str(path))
    assert result["identical"] and result["ticks"] == 400, result


def test_a_controller_plugin_sees_the_lab_sensors_in_its_frame(tmp_path, config_over):
    """A loopback plug-in in an offline run of configs/elbow-hold-imu.toml gets frames with the lab fields, the
    same bytes as the recorded frame of that tick."""
    import sys
    import textwrap

    from hil.config import load_service_config
    from hil.rt.offline import run_offline

    plugin = tmp_path / "lab_seen.py"
    plugin.write_text(textwrap.dedent("""
        from drivers.controllers.plugin import Controller
        SEEN = []
        class Seen(Controller):
            def step(self, tick, time_s, frame):
                if frame is not None:
                    SEEN.append(frame[0].copy())
                return []
        """))
    cfg = load_service_config(config_over("elbow-hold-imu.toml", f'[[driver]]\ntype = "loopback"\n'
                                          f'controller = "{plugin}:Seen"\nrate_hz = 50\n'))
    recorded = {}

    class Frames:
        def on_tick(self, record, engine, actuation_ns):
            recorded[int(record[0]["frame"]["tick"])] = record[0]["frame"].tobytes()

    run_offline(cfg, 60, [Frames()])
    seen = sys.modules["fes_hil_controller_lab_seen"].SEEN
    assert len(seen) >= 10 and "imu_quat" in seen[0].dtype.names and "emg_mwave" in seen[0].dtype.names
    assert all(f.tobytes() == recorded[int(f["tick"])] for f in seen)
    assert np.any(np.stack([f["imu_gyro"] for f in seen]) != 0)


def test_the_allan_figure_reads_the_noise_density_and_bias_level(tmp_path):
    from hil.reports.imu_allan_figure import write_imu_allan

    imu = ImuConfig(**{**MTI300.__dict__, "rate_hz": 50.0})
    csv_path, png_path, readout = write_imu_allan(tmp_path, imu, hours=2.0, seed=1)
    assert png_path.stat().st_size > 10_000 and len(csv_path.read_text().splitlines()) > 30
    assert readout["noise_density_deg_s_rthz"] == pytest.approx(0.01, rel=0.10)
    assert readout["level_at_peak_deg_h"] == pytest.approx(10.0, rel=0.30)


def test_imu_elbow_angle_and_rate_are_the_models_from_noise_free_imus(model):
    """drivers.controllers.imu_elbow: from exact IMUs the elbow flexion and its rate are q[ELx] and qdot[ELx]
    while the biceps moves the elbow (and the forearm pronates passively)."""
    from drivers.controllers.imu_elbow import ImuElbow

    got = _run(_engine(model, LabSensorsConfig(imu=EXACT)), 60)
    elbow = ImuElbow()
    for k in (0, 20, 59):
        angle, rate = elbow.angle_rate(got[k:k + 1])
        assert angle == pytest.approx(got["q"][k, 9], abs=1e-9)
        assert rate == pytest.approx(got["qdot"][k, 9], abs=1e-9 * max(1.0, abs(got["qdot"][k, 9])))


def test_elbow_hold_on_the_imus_holds_the_target(config_over):
    """configs/elbow-hold-imu.toml (PID on the IMU-derived elbow angle and rate, MTi-300 noise, fatigue): the elbow
    reaches and holds 90 deg within the IMUs' orientation error."""
    from hil.config import load_service_config
    from hil.rt.offline import run_offline

    cfg = load_service_config("configs/elbow-hold-imu.toml")
    elbow = []

    class Elbow:
        def on_tick(self, record, engine, actuation_ns):
            elbow.append(math.degrees(record[0]["frame"]["elbow_flexion"]))

    run_offline(cfg, round(12.0 / cfg.loop.period_s), [Elbow()])
    late = np.array(elbow[round(8.0 / cfg.loop.period_s):])
    assert abs(late.mean() - 90.0) < 1.5 and np.all(np.abs(late - 90.0) < 4.0)


def test_the_imus_on_the_mtg_arm_show_its_segments_and_a_pid_on_them_holds_its_elbow(config_over):
    """The MTG arm's frame q is in DAS3 order on the DAS3 segments it is built on (``segment_model``), so its IMUs are
    those segments' rotations; the elbow PID on those IMUs (channels 7 and 8, the elbow MTGs) holds 90 deg."""
    from hil.config import load_service_config
    from hil.rt.offline import run_offline

    cfg = load_service_config(config_over("elbow-hold-mtg.toml", """
        [[driver]]
        type = "loopback"
        controller = "elbow_hold"
        elbow_sensor = "imu"
        target_deg = 90
        flexor_channel = 7
        extensor_channel = 8
        [sensor.imu]
        rate_hz = 250
        latency_ms = 0
        gyro_noise_deg_s_rthz = 0
        gyro_bias_instability_deg_h = 0
        roll_pitch_noise_deg = 0
        heading_noise_deg = 0
        """))
    got, plants = [], []

    class Keep:
        def on_tick(self, record, engine, actuation_ns):
            got.append(record[0]["frame"].copy())
            plants[:] = [engine.plant]

    run_offline(cfg, round(8.0 / cfg.loop.period_s), [Keep()])
    got = np.array(got)
    segments = plants[0].model.segment_model
    assert plants[0].model.kind == "mtg" and segments.kind == "das3"
    for k in (0, len(got) // 2, len(got) - 1):
        R, _ = frames(segments.arrays, got["q"][k])
        for s, f in enumerate((HUMERUS_FRAME, RADIUS_FRAME)):
            x, y, z, w = Rotation.from_matrix(R[0, f]).as_quat()
            assert np.allclose(got["imu_quat"][k, s], np.array([w, x, y, z]) * (1 if w >= 0 else -1), atol=1e-12)
    elbow = np.degrees(got["elbow_flexion"])
    assert elbow[0] < 60.0 and np.all(np.abs(elbow[-250:] - 90.0) < 1.0)


def test_elbow_hold_on_imus_the_run_has_not_is_one_config_error(tmp_path):
    """elbow_sensor = "imu" without [sensor.imu]: refused by check-config (before: the PID failed in every call of
    the run and the elbow never moved)."""
    cfg = tmp_path / "no-imu.toml"
    cfg.write_text(f'include = ["{CONFIGS / "gym" / "elbow-hold.toml"}"]\n[[driver]]\ntype = "loopback"\n'
                   'controller = "elbow_hold"\nelbow_sensor = "imu"\nflexor_channel = 4\nextensor_channel = 5\n')
    out = hil_in_process("check-config", cfg)
    assert out.returncode == 2 and "driver[0].elbow_sensor" in out.stderr and "[sensor.imu]" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert hil_in_process("check-config", CONFIGS / "elbow-hold-imu.toml").returncode == 0


def test_a_real_time_run_with_lab_sensors_replays_bit_identically(tmp_path):
    """`hil run` (the real-time process, its recorder and link rings) on configs/elbow-hold-imu.toml, then
    `hil replay`: every frame, lab fields included, is reproduced bit for bit."""
    import json
    import subprocess
    import sys

    rec = tmp_path / "rt.hilrec"
    run = subprocess.run([sys.executable, "-m", "hil", "run", "--config", "configs/elbow-hold-imu.toml", "--duration",
                          "3", "--record", str(rec), "--json"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    replay = subprocess.run([sys.executable, "-m", "hil", "replay", str(rec), "--json"], capture_output=True,
                            text=True, timeout=600)
    result = json.loads(replay.stdout)
    assert result["identical"] and result["ticks"] == 750, result
