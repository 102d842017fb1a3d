"""Spasticity (issue 37, sim.das3.kernels.reflex and sim.fitting.spasticity): the clinical catch above the
threshold velocity only, its delay, the gate of a denervated element, the reflex's state through reset and
warm-up, and the stroke preset's gain as the fit to the published torques."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import angles_under_elbow_moment

from hil.patients import read_patient
from sim.das3.config import ConfigError, ModelConfig
from sim.das3.model import load_model
from sim.das3.plant import Plant
from sim.fitting import spasticity as sp
from sim.patient import apply_patient

FLEXORS = ("bicl", "bicb", "brachialis", "brachiorad", "pronteres")


def _spastic(model, gain=0.3, threshold=0.1, delay_s=0.03, groups=FLEXORS):
    return sp.with_reflex(model, tuple((g, gain, threshold, delay_s) for g in groups))


@pytest.fixture(scope="module")
def still_fast(model):
    return sp.servo_moments(model, sp.FAST_DEG_S)[0]


def test_a_fast_stretch_meets_a_catch_and_a_slow_one_does_not(model, still_fast):
    spastic = _spastic(model)
    fast = sp.reflex_moment(spastic, still_fast, sp.FAST_DEG_S)
    slow = sp.reflex_moment(spastic, model, sp.SLOW_DEG_S)
    assert fast.max() > 3.0                         # N m resisting the 100 deg/s extension
    assert np.all(slow == 0.0)                      # the 5 deg/s stretch stays below the threshold velocity


def test_without_a_threshold_the_slow_stretch_fires_too(model):
    slow = sp.reflex_moment(_spastic(model, threshold=0.0), model, sp.SLOW_DEG_S)
    assert slow.max() > 0.05


def _onset(reflex: np.ndarray, level: float = 0.05) -> int:
    return int(np.argmax(reflex > level))


def test_the_delay_moves_the_catch(model, still_fast):
    """30 ms more delay (7.5 steps of 4 ms, rounded to 8) starts the reflex moment about that much later."""
    early = _onset(sp.reflex_moment(_spastic(model, delay_s=0.03), still_fast, sp.FAST_DEG_S))
    late = _onset(sp.reflex_moment(_spastic(model, delay_s=0.06), still_fast, sp.FAST_DEG_S))
    assert 6 <= late - early <= 10, (early, late)


def test_a_denervated_spastic_group_has_no_reflex(model, still_fast):
    spastic = sp.with_reflex(load_model(ModelConfig(denervated=FLEXORS)), tuple((g, 0.3, 0.1, 0.03) for g in FLEXORS))
    still = sp.servo_moments(load_model(ModelConfig(denervated=FLEXORS)), sp.FAST_DEG_S)[0]
    assert np.all(sp.reflex_moment(spastic, still, sp.FAST_DEG_S) == 0.0)


def _fast_stretch(plant: Plant, steps: int = 120) -> np.ndarray:
    """Joint angles over a passive elbow extension driven by a constant moment (the reflex fires)."""
    return angles_under_elbow_moment(plant, -15.0, steps)


def test_reset_and_warmup_leave_the_reflex_as_a_fresh_plant_has_it(model):
    spastic = _spastic(model)
    fresh = _fast_stretch(Plant(spastic))
    plant = Plant(spastic)
    _fast_stretch(plant, steps=12)          # stopped mid-stretch: the ring holds fast lengthening
    plant.reset()
    plant.warmup()
    again = _fast_stretch(plant)
    assert np.array_equal(fresh, again)
    still = _fast_stretch(Plant(model))
    assert np.max(np.abs(fresh - still)) > 1e-3     # the reflex changed the movement


def test_the_stroke_presets_gain_is_the_fit_to_the_published_torques():
    patient, _ = read_patient({"preset": "stroke-hemiparesis"}, "configs/x.toml")
    model = load_model(apply_patient(ModelConfig(), patient))
    gain, threshold, delay_s = patient.state_of("bicb").spasticity
    fitted, peak = sp.fit_gain(sp.with_reflex(model, ()), FLEXORS, threshold, delay_s)
    assert peak == pytest.approx(sp.TARGET_REFLEX_NM, rel=1e-3)
    assert gain == pytest.approx(fitted, rel=2e-3)
    assert all(patient.state_of(g).spasticity == (gain, threshold, delay_s) for g in FLEXORS)


def test_a_bad_reflex_is_one_config_error():
    with pytest.raises(ConfigError, match="key 'spasticity'.*unknown muscle element or group 'bicps'"):
        ModelConfig(spasticity=(("bicps", 0.1, 0.1, 0.03),))
    with pytest.raises(ConfigError, match="must be finite numbers >= 0"):
        ModelConfig(spasticity=(("bicb", -0.1, 0.1, 0.03),))
