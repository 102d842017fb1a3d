"""The sensor measurement model (hil.rt.sensor.SensorModel): noise, quantisation, delay; plant values untouched."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from hil.rt.sensor import SensorModel, SensorModelConfig


def outputs(k: float) -> SimpleNamespace:
    """Plant outputs that change with k, so a delayed frame can be told apart."""
    return SimpleNamespace(q=np.linspace(0.1, 1.1, 11) + 0.001 * k, qdot=np.full(11, 0.5),
                           th_angles=np.array([0.2, 0.7, -0.3]), hand_position=np.array([0.1, -0.4, 0.2]),
                           gh_force=np.array([-300.0, 50.0, 20.0]), st_contact_force=np.zeros((2, 3)),
                           gh_stability=-0.5)


def measure_many(config: SensorModelConfig, n: int) -> np.ndarray:
    model = SensorModel(config)
    frames = np.zeros(n, model.dtype)
    for k in range(n):
        frames[k] = model.measure(k, k * 0.004, outputs(0), 0)[0]
    return frames


def test_noise_has_the_configured_standard_deviation_and_no_bias():
    cfg = SensorModelConfig(seed=3, angle_noise_rad=math.radians(0.5), velocity_noise_rad_s=0.2, force_noise_n=5.0)
    f = measure_many(cfg, 4000)
    true = outputs(0)
    for field, want_std, true_value in (("q", cfg.angle_noise_rad, true.q), ("th_angles", cfg.angle_noise_rad, true.th_angles),
                                        ("qdot", 0.2, true.qdot), ("gh_force", 5.0, true.gh_force)):
        err = f[field] - true_value
        assert np.allclose(err.std(axis=0), want_std, rtol=0.08), field
        assert np.all(np.abs(err.mean(axis=0)) < 4 * want_std / math.sqrt(len(f))), field
    assert np.array_equal(f["elbow_flexion"], f["q"][:, 9]) and np.array_equal(f["forearm_pronation"], f["q"][:, 10])
    assert np.all(f["hand_position"] == true.hand_position) and np.all(f["gh_stability"] == -0.5)


def test_quantisation_rounds_the_angles_to_the_step():
    step = math.radians(0.1)
    f = measure_many(SensorModelConfig(angle_quantum_rad=step), 3)
    for field in ("q", "th_angles"):
        ratio = f[field] / step
        assert np.allclose(ratio, np.round(ratio), atol=1e-9) and np.all(np.abs(f[field] - getattr(outputs(0), field)) <= step / 2 + 1e-12)
    assert np.all(f["qdot"] == 0.5)      # velocities are not quantised


def test_a_delayed_sensor_sends_the_frame_measured_delay_ticks_earlier():
    model = SensorModel(SensorModelConfig(delay_ticks=3))
    sent = [model.measure(k, k * 0.004, outputs(k), 0)[0].copy() for k in range(10)]
    assert [int(f["tick"]) for f in sent] == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]
    assert sent[7]["q"][0] == pytest.approx(outputs(4).q[0], abs=0) and sent[7]["time"] == 4 * 0.004


def test_the_same_seed_gives_the_same_noise_and_reset_starts_it_again():
    cfg = SensorModelConfig(seed=11, angle_noise_rad=0.01, force_noise_n=1.0)
    a, b = measure_many(cfg, 20), measure_many(cfg, 20)
    assert a.tobytes() == b.tobytes()
    assert measure_many(SensorModelConfig(seed=12, angle_noise_rad=0.01, force_noise_n=1.0), 20).tobytes() != a.tobytes()
    model = SensorModel(cfg)
    first = model.measure(0, 0.0, outputs(0), 0)[0].copy()
    model.reset()
    assert model.measure(0, 0.0, outputs(0), 0)[0].tobytes() == first.tobytes()
