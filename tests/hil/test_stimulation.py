"""Stimulation -> excitation model: recruitment, frequency factor, limits and config errors."""
import tomllib
from pathlib import Path

import numpy as np
import pytest

from hil.rt.stimulation import StimulationModel, load_stimulation_config
from sim.das3.config import ConfigError

REPO = Path(__file__).resolve().parents[2]


def default_model(model):
    table = tomllib.loads((REPO / "configs/stimulation-default.toml").read_text())["stimulation"]
    return StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)


def one_channel(model, **kw) -> StimulationModel:
    """A single channel driving the first muscle element with gain 1 (the production kernel)."""
    from hil.rt.stimulation import ChannelConfig, StimulationConfig
    channel = ChannelConfig(name="test", gains={model.muscle_names[0]: 1.0}, **kw)
    return StimulationModel(StimulationConfig(channels=(channel,)), model.muscle_names)


def excitation_of(stim: StimulationModel, pw_s, amp_a, freq_hz, mode=0.0) -> float:
    return float(stim.excitation(np.array([pw_s]), np.array([amp_a]), np.array([freq_hz]), np.array([mode]),
                                 np.zeros(stim.gains.shape[1]))[0])


def test_recruitment_is_zero_below_threshold_one_above_saturation_and_c1(model):
    """r(Q) = 3x^2 - 2x^3, x = (Q - Q_th)/(Q_sat - Q_th) clipped to [0, 1], through the compiled kernel
    at the fusion frequency (frequency factor 1)."""
    stim = one_channel(model, threshold_charge_c=5e-6, saturation_charge_c=24e-6)
    q = np.linspace(0, 40e-6, 4001)
    r = np.array([excitation_of(stim, 200e-6, charge / 200e-6, 50.0) for charge in q])
    x = np.clip((q - 5e-6) / 19e-6, 0.0, 1.0)
    np.testing.assert_allclose(r, 3 * x**2 - 2 * x**3, rtol=1e-12, atol=1e-15)
    assert np.all(r[q <= 5e-6] == 0) and np.all(r[q >= 24e-6] == 1)
    slope = np.diff(r) / np.diff(q)
    assert np.max(np.abs(np.diff(slope))) < 0.01 * np.max(slope)  # no jump in the slope (C1)


def test_frequency_factor_saturates_at_fusion(model):
    """phi(f) = min(1, (1 - exp(-f/f_c)) / (1 - exp(-f_fuse/f_c))) at full recruitment; a doublet (mode 1)
    counts as f (1 + g_d)."""
    stim = one_channel(model, frequency_constant_hz=12.0, fusion_frequency_hz=50.0, doublet_gain=0.5)
    f = np.array([0.0, 10.0, 20.0, 50.0, 80.0])
    phi = np.array([excitation_of(stim, 300e-6, 0.1, fi) for fi in f])
    np.testing.assert_allclose(phi, np.minimum(1.0, -np.expm1(-f / 12.0) / -np.expm1(-50.0 / 12.0)), rtol=1e-12)
    assert phi[0] == 0 and phi[3] == 1.0 and phi[4] == 1.0
    assert excitation_of(stim, 300e-6, 0.1, 10.0, mode=1) == pytest.approx(-np.expm1(-15.0 / 12.0)
                                                                          / -np.expm1(-50.0 / 12.0), rel=1e-12)


def test_default_map_only_drives_the_stimulated_channel(model):
    stim = default_model(model)
    assert stim.n_channels == 8
    pw = np.zeros(8)
    amp = np.zeros(8)
    freq = np.full(8, 40.0)
    mode = np.zeros(8)
    pw[3], amp[3] = 300e-6, 0.06          # biceps channel, 18 uC
    out = np.full(model.n_muscles, -1.0)
    res = stim.excitation(pw, amp, freq, mode, out)
    assert res is out
    on = {model.muscle_names[i] for i in np.flatnonzero(out)}
    assert on and all(n.startswith(("bic", "brachialis")) for n in on)
    assert 0 < out.max() <= 1 and out.min() == 0
    # doublets raise the frequency factor at low rates
    freq[:] = 15.0
    single = stim.excitation(pw, amp, freq, mode, np.zeros(model.n_muscles)).max()
    mode[3] = 1
    doublet = stim.excitation(pw, amp, freq, mode, np.zeros(model.n_muscles)).max()
    assert doublet > single


def test_limits_reject_or_clamp(model):
    table = {"mode": "channels", "channel": [
        {"name": "a", "muscles": {"bicl": 1.0}, "max_amplitude_ma": 50, "limit_policy": "reject"},
        {"name": "b", "muscles": {"bicl": 1.0}, "max_amplitude_ma": 50, "limit_policy": "clamp",
         "modes": [0]}]}
    stim = StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)
    assert stim.check_command(0, 300, 40, 30, 0) == ((300, 40, 30, 0), None)
    assert stim.check_command(0, 300, 60, 30, 0) == (None, "amplitude_limit")
    assert stim.check_command(1, 300, 60, 30, 0) == ((300, 50, 30, 0), "amplitude_limit")
    assert stim.check_command(1, 600, 40, 30, 0)[1] == "pulse_width_limit"
    assert stim.check_command(1, 300, 40, 30, 2) == (None, "mode_not_allowed")
    assert stim.check_command(0, float("nan"), 40, 30, 0) == (None, "non_finite")


@pytest.mark.parametrize("table, key, words", [
    ({"mode": "pulses"}, "stimulation.mode", "channels"),
    ({"channel": [{"muscles": {"bicx": 1.0}}]}, "stimulation.channel[0].muscles.bicx", "did you mean"),
    ({"channel": [{"muscles": {"bicl": 1.5}}]}, "stimulation.channel[0].muscles.bicl", "[0, 1]"),
    ({"channel": [{"muscles": {"bicl": 1}, "max_amplitude_ma": 200}]}, "stimulation.channel[0].max_amplitude_ma", "130"),
    ({"channel": [{"muscles": {"bicl": 1}, "threshold_charge_uc": 30}]}, "stimulation.channel[0].threshold_charge_uc", "below"),
    ({"channel": [{"name": "x", "muscles": {"bicl": 1}}, {"name": "x", "muscles": {"bicl": 1}}]}, "stimulation.channel[1].name", "duplicate"),
    ({"channel": [{"muscles": {"bicl": 1}, "gian": 1}]}, "stimulation.channel[0].gian", "unknown key"),
    ({"channel": []}, "stimulation.channel", "at least one"),
    ({"channel": [{"muscles": {"bicl": 1}, "emd_ms": 250}]}, "stimulation.channel[0].emd_ms", "200"),
    ({"channel": [{"muscles": {"bicl": 1}, "emd_ms": -1}]}, "stimulation.channel[0].emd_ms", "0"),
])
def test_config_errors_name_the_key(model, table, key, words):
    with pytest.raises(ConfigError) as err:
        load_stimulation_config(table, model.muscle_names, file="x.toml")
    assert err.value.key == key and words in str(err.value) and "x.toml" in str(err.value)


def _emd_engine(model, emd_ms, period_s=0.004):
    """A tick engine with one biceps channel whose electromechanical delay is ``emd_ms``."""
    from hil.rt.engine import TickEngine
    from hil.rt.sensor import SensorModel, SensorModelConfig
    from hil.rt.stimulation import ChannelConfig, StimulationConfig
    from hil.safety.table import SafetyConfig
    from sim.das3.plant import Plant

    channel = ChannelConfig(name="biceps", gains={"bicl": 1.0, "bicb": 1.0}, emd_s=emd_ms * 1e-3)
    stim = StimulationModel(StimulationConfig(channels=(channel,)), model.muscle_names)
    return TickEngine(Plant(model, step_s=period_s), stim, SafetyConfig(watchdog_timeout_s=0.2),
                      SensorModel(SensorModelConfig()), period_s, 1, ("unknown_channel",))


def _excitations(engine, n_ticks, stop_commands_at):
    """u of bicl per tick with a 300 us / 60 mA / 40 Hz command every tick until ``stop_commands_at``."""
    out = []
    for tick in range(n_ticks):
        engine.begin(tick)
        if tick < stop_commands_at:
            engine.channel(0, tick, 0, 300.0, 60.0, 40.0, 0)
        engine.step()
        out.append(engine.u[engine.plant.model.muscle_index("bicl")])
    return np.array(out)


def test_electromechanical_delay_shifts_the_excitation_by_whole_ticks(model):
    """emd_ms = 40 at a 4 ms loop: the muscles see each channel level 10 ticks late, including the fall
    to zero when the watchdog stops the stimulation (the stimulator output itself drops at once)."""
    prompt, late = _emd_engine(model, 0.0), _emd_engine(model, 40.0)
    u0 = _excitations(prompt, 160, 40)
    u40 = _excitations(late, 160, 40)
    assert u0[0] > 0.3 and np.all(u40[:10] == 0.0)
    np.testing.assert_array_equal(u40[10:], u0[:-10])
    tripped = int(np.argmax(u0[1:] == 0.0)) + 1            # watchdog: 0.2 s after the last command
    assert np.all(late.applied == 0.0) and u40[tripped] > 0.3 and u40[tripped + 10] == 0.0
