"""Stimulation as electrodes behave (issue 37 item 7): spill-over to neighbouring muscles that grows with the
current, and a seeded, recorded per-session draw of the recruitment thresholds."""
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_one_error_line, closed_loop_elbow, hil, hil_process

from hil.config import load_service_config
from hil.rt.engine import TickEngine
from hil.rt.sensor import SensorModel, SensorModelConfig
from hil.rt.stimulation import (
    ChannelConfig,
    StimulationConfig,
    StimulationModel,
    amplitude_for_level,
    load_stimulation_config,
)
from hil.safety.table import SafetyConfig
from sim.analysis import static_opt as so
from sim.analysis.channel_opt import ChannelEquilibria
from sim.das3.config import ConfigError
from sim.das3.plant import Plant

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs/elbow-hold-electrodes.toml"
Q_TH, Q_SAT, Q_SPILL = 5e-6, 24e-6, 12e-6
PW = 300e-6


def biceps(**kw) -> ChannelConfig:
    """One biceps channel spilling to brachioradialis (gain 0.4) from 12 uC on."""
    return ChannelConfig(**{"name": "biceps", "gains": {"bicl": 1.0}, "threshold_charge_c": Q_TH,
                            "saturation_charge_c": Q_SAT, "spill": {"brachiorad": 0.4},
                            "spill_threshold_charge_c": Q_SPILL, **kw})


def excitation(stim: StimulationModel, amp_a: float, freq_hz: float = 50.0) -> np.ndarray:
    n = stim.gains.shape[1]
    return stim.excitation(np.full(stim.n_channels, PW), np.full(stim.n_channels, amp_a),
                           np.full(stim.n_channels, freq_hz), np.zeros(stim.n_channels), np.zeros(n)).copy()


def smoothstep(x):
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def test_spill_is_zero_below_its_threshold_and_grows_with_current_on_the_neighbour_only(model):
    """u_brachiorad = 0.4 s((Q - Q_spill) / (Q_sat - Q_th)): zero up to 12 uC, then rising monotonically; the
    channel's own muscle is as without spill-over, and no other muscle is touched."""
    spill = StimulationModel(StimulationConfig(channels=(biceps(),)), model.muscle_names)
    plain = StimulationModel(StimulationConfig(channels=(biceps(spill={}),)), model.muscle_names)
    group = [model.muscle_index(f"brachiorad{i}") for i in (1, 2, 3)]
    br, bicl = group[0], model.muscle_index("bicl")
    charges = np.linspace(0.0, 40e-6, 801)
    u = np.array([excitation(spill, q / PW) for q in charges])
    u_plain = np.array([excitation(plain, q / PW) for q in charges])
    np.testing.assert_allclose(u[:, br], 0.4 * smoothstep((charges - Q_SPILL) / (Q_SAT - Q_TH)), rtol=1e-12,
                               atol=1e-15)
    assert np.all(u[charges < Q_SPILL * (1 - 1e-9), br] == 0.0) and np.all(u[charges > Q_SPILL + 1e-7, br] > 0.0)
    rising = (charges > Q_SPILL) & (charges < Q_SPILL + Q_SAT - Q_TH)
    assert np.all(np.diff(u[:, br]) >= 0.0) and np.all(np.diff(u[rising, br]) > 0.0)
    assert np.array_equal(u[:, bicl], u_plain[:, bicl])
    others = np.ones(model.n_muscles, bool)
    others[group + [bicl]] = False
    assert np.array_equal(u[:, group[1]], u[:, br]) and np.array_equal(u[:, group[2]], u[:, br])
    assert not u[:, others].any() and not u_plain[:, br].any()


def test_the_spill_starts_at_the_saturation_charge_unless_configured(model):
    """spill_threshold_charge_uc defaults to the channel's saturation_charge_uc: the onset d_c = 1."""
    table = {"mode": "channels", "channel": [{"muscles": {"bicl": 1.0}, "spill": {"brachiorad": 0.3}},
                                             {"muscles": {"bicb": 1.0}}]}
    config = load_stimulation_config(table, model.muscle_names)
    stim = StimulationModel(config, model.muscle_names)
    assert config.channels[0].spill_charge_c == config.channels[0].saturation_charge_c
    assert stim.spill_onset[0] == 1.0 and stim.spill_onset[1] == math.inf and not stim.spill_gains[1].any()


def _engine(model, channel: ChannelConfig, **stim) -> TickEngine:
    """A tick engine with one channel (4 ms ticks, no substeps)."""
    sm = StimulationModel(StimulationConfig(channels=(channel,), **stim), model.muscle_names)
    return TickEngine(Plant(model, step_s=0.004), sm, SafetyConfig(watchdog_timeout_s=1.0),
                      SensorModel(SensorModelConfig()), 0.004, 1, ("unknown_channel",))


def _tick_u(engine: TickEngine, amps_ma, freq_hz=40.0) -> np.ndarray:
    """u of each tick under a 300 us command of each amplitude in turn."""
    out = []
    for tick, amp in enumerate(amps_ma):
        engine.begin(tick)
        engine.channel(0, tick, 0, PW * 1e6, float(amp), freq_hz, 0)
        engine.step()
        out.append(engine.u.copy())
    return np.array(out)


def test_the_tick_spills_as_the_map_with_its_delay_and_fatigue(model):
    """The compiled tick's spill-over is the map's (same force-frequency factor), delayed by the channel's
    electromechanical delay and scaled by its fitness like the channel's own muscles."""
    amps = np.linspace(10.0, 90.0, 60)
    sm = StimulationModel(StimulationConfig(channels=(biceps(),)), model.muscle_names)
    expected = np.array([excitation(sm, a * 1e-3, 40.0) for a in amps])
    u = _tick_u(_engine(model, biceps()), amps)
    np.testing.assert_allclose(u, expected, rtol=1e-12, atol=1e-15)
    assert u[:, model.muscle_index("brachiorad1")].max() > 0.1
    delayed = _tick_u(_engine(model, biceps(emd_s=0.02)), amps)
    np.testing.assert_array_equal(delayed[5:], u[:-5])
    tired = _engine(model, biceps(), fatigue="ding2003", fatigue_rate_scale=50.0)
    u_tired = _tick_u(tired, np.full(400, 90.0))
    br, bicl = model.muscle_index("brachiorad1"), model.muscle_index("bicl")
    assert u_tired[-1, br] < 0.9 * u_tired[0, br]
    np.testing.assert_allclose(u_tired[:, br] / u_tired[:, bicl], u_tired[0, br] / u_tired[0, bicl], rtol=1e-12)


def test_the_channel_optimisation_spills_as_the_tick(model):
    """The analyses' map (at force-frequency factor 1, x = s^-1(level)) gives the tick's excitations, and its
    derivative matches finite differences."""
    sm = StimulationModel(StimulationConfig(channels=(biceps(),)), model.muscle_names)
    eqs = ChannelEquilibria(model, sm.gains, so.Posture(0.8, 0.5, 0.0, 1.2, 1.42), np.zeros(10),
                            (sm.spill_gains, sm.spill_onset))
    br = model.muscle_index("brachiorad1")
    for q in np.linspace(6e-6, 23.5e-6, 30):
        tick = excitation(sm, q / PW)
        level = smoothstep((q - Q_TH) / (Q_SAT - Q_TH))
        u, du = eqs.excitation(np.array([level]))
        np.testing.assert_allclose(u, tick, rtol=1e-9, atol=1e-12)
        if 0.05 < level < 0.95:
            h = 1e-7
            fd = (eqs.excitation(np.array([level + h]))[0] - eqs.excitation(np.array([level - h]))[0]) / (2 * h)
            np.testing.assert_allclose(du[:, 0], fd, rtol=1e-5, atol=1e-7)
    assert eqs.excitation(np.array([0.3]))[0][br] == 0.0 and eqs.excitation(np.array([0.9]))[0][br] > 0.0


def test_no_spill_and_no_draw_leave_the_default_map_as_it_was(model):
    import tomllib
    table = tomllib.loads((REPO / "configs/stimulation-default.toml").read_text())["stimulation"]
    config = load_stimulation_config(table, model.muscle_names)
    stim = StimulationModel(config, model.muscle_names)
    assert stim.spill_gains.shape == (0, model.n_muscles) and stim.delay_line(0.004)[0].shape[0] == 8
    assert config.session_channels() is config.channels and np.array_equal(stim.threshold_factors, np.ones(8))
    assert config.session_header() is None


def _drawn(seed: int, cv: float, n: int) -> np.ndarray:
    channels = tuple(ChannelConfig(name=f"c{i}", gains={"bicl": 1.0}) for i in range(n))
    return StimulationConfig(channels=channels, session_seed=seed, session_cv=cv).threshold_factors()


def test_the_session_draw_is_reproducible_differs_between_seeds_and_has_the_configured_spread():
    """F_c = exp(sigma z), sigma = sqrt(ln(1 + CV^2)): the same for (seed, channel index) whatever the number of
    channels, different for another seed; over 200 seeds x 16 channels the SD of ln F is sigma and its mean 0
    within 3 % of sigma (standard errors 1.3 % and 1.8 %)."""
    assert np.array_equal(_drawn(7, 0.2, 16), _drawn(7, 0.2, 16))
    assert np.array_equal(_drawn(7, 0.2, 4), _drawn(7, 0.2, 16)[:4])
    assert not np.any(_drawn(7, 0.2, 16) == _drawn(8, 0.2, 16))
    assert len(set(_drawn(7, 0.2, 16))) == 16
    cv = 0.5
    sigma = math.sqrt(math.log1p(cv ** 2))
    logs = np.log(np.concatenate([_drawn(seed, cv, 16) for seed in range(200)]))
    assert abs(logs.std() / sigma - 1.0) < 0.03, logs.std()
    assert abs(logs.mean()) < 0.03 * sigma, logs.mean()


def test_the_session_scales_every_charge_of_a_channel_and_the_amplitude_for_a_level(model):
    """Q_th, Q_sat and Q_spill of channel c all times F_c: the spill onset in levels is unchanged, and the
    amplitude that gives a level (hil analyze channels) is F_c times the configured one."""
    config = StimulationConfig(channels=(biceps(), biceps(name="b2")), session_seed=5, session_cv=0.3)
    stim = StimulationModel(config, model.muscle_names)
    f = config.threshold_factors()
    for c in range(2):
        ch = stim.channels[c]
        assert (ch.threshold_charge_c, ch.saturation_charge_c, ch.spill_threshold_charge_c) == (
            Q_TH * f[c], Q_SAT * f[c], Q_SPILL * f[c])
        assert amplitude_for_level(ch, 0.4, PW, 50.0) == pytest.approx(
            f[c] * amplitude_for_level(config.channels[c], 0.4, PW, 50.0), rel=1e-12)
    np.testing.assert_allclose(stim.spill_onset, (Q_SPILL - Q_TH) / (Q_SAT - Q_TH), rtol=1e-12)


def test_a_fixed_command_recruits_differently_on_two_sessions(model):
    """The same 300 us / 30 mA command: the drawn thresholds differ, so does the biceps excitation (by more than
    3 %)."""
    u1 = _tick_u(_engine(model, biceps(spill={}), session_seed=1, session_cv=0.1), [30.0])[0]
    u2 = _tick_u(_engine(model, biceps(spill={}), session_seed=2, session_cv=0.1), [30.0])[0]
    bicl = model.muscle_index("bicl")
    assert u1[bicl] > 0.0 and u2[bicl] > 0.0 and abs(u1[bicl] / u2[bicl] - 1.0) > 0.03


def test_the_elbow_hold_controller_meets_another_arm_each_day(config_over):
    """configs/elbow-hold-electrodes.toml on two days: the PID's elbow trajectories differ; both still hold 90 deg."""
    runs = []
    for seed in (1, 2):
        cfg = load_service_config(config_over("elbow-hold-electrodes.toml",
                                              f"[stimulation]\nsession_seed = {seed}\n", name=f"day{seed}.toml"))
        runs.append(closed_loop_elbow(cfg, 750)[0])
    assert np.max(np.abs(runs[0] - runs[1])) > 0.5
    assert all(np.all(np.abs(r[600:] - 90.0) < 2.0) for r in runs)


def test_the_draw_is_recorded_and_a_replay_reproduces_the_run(tmp_path, monkeypatch):
    """hil run --offline records seed, CV and every channel's factor in the header; hil replay is bit-identical;
    a replay whose draw differs from the recorded one is refused."""
    from hil.recording.hilrec import RecordingError, read_run_recording
    from hil.recording.replay import replay_recording
    rec = tmp_path / "day.hilrec"
    done = hil("run", "--config", EXAMPLE, "--offline", "--duration", "1", "--record", rec)
    assert done.returncode == 0, done.stderr[-2000:]
    session = read_run_recording(str(rec)).header["stimulation_session"]
    config = load_service_config(EXAMPLE)
    assert session["seed"] == 3 and session["threshold_cv"] == 0.1
    assert list(session["threshold_factors"].values()) == list(
        load_stimulation_config(config.stimulation, _names()).threshold_factors())
    replayed = hil("replay", rec)
    assert replayed.returncode == 0 and "bit-identical" in replayed.stdout + replayed.stderr, replayed.stderr
    monkeypatch.setattr(StimulationConfig, "threshold_factors", lambda self: np.full(len(self.channels), 1.01))
    with pytest.raises(RecordingError, match="threshold factors"):
        replay_recording(str(rec))


def _names():
    from sim.das3.config import ModelConfig
    from sim.das3.model import load_model
    return load_model(ModelConfig()).muscle_names


def test_check_config_shows_the_spill_over_and_the_draw():
    done = hil("check-config", EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert "biceps spills to brachiorad 0.3, coracobr 0.2" in done.stdout
    assert "session seed 3, threshold CV 0.1: thresholds x anterior_deltoid" in done.stdout


@pytest.mark.parametrize("channel, top, key, words", [
    ({"spill": {"brachioradd": 0.3}}, {}, "stimulation.channel[0].spill.brachioradd", "did you mean"),
    ({"spill": {"brachiorad": -0.1}}, {}, "stimulation.channel[0].spill.brachiorad", "[0, 1]"),
    ({"spill": {"brachiorad": 1.5}}, {}, "stimulation.channel[0].spill.brachiorad", "[0, 1]"),
    ({"spill": {"bicl": 0.3}}, {}, "stimulation.channel[0].spill.bicl", "drives it already"),
    ({"spill": 0.3}, {}, "stimulation.channel[0].spill", "table"),
    ({"spill": {"brachiorad": 0.3}, "spill_threshold_charge_uc": 2.0}, {},
     "stimulation.channel[0].spill_threshold_charge_uc", "threshold_charge_uc"),
    ({}, {"session_threshold_cv": 1.5}, "stimulation.session_threshold_cv", "1"),
    ({}, {"session_threshold_cv": -0.1}, "stimulation.session_threshold_cv", "0"),
    ({}, {"session_seed": -1}, "stimulation.session_seed", "integer"),
    ({}, {"session_seed": 1.5}, "stimulation.session_seed", "integer"),
])
def test_bad_electrode_keys_name_the_key(model, channel, top, key, words):
    table = {"mode": "channels", "channel": [{"muscles": {"bicl": 1.0}, **channel}], **top}
    with pytest.raises(ConfigError) as err:
        load_stimulation_config(table, model.muscle_names, file="x.toml")
    assert err.value.key == key and words in str(err.value) and "x.toml" in str(err.value)


def test_a_bad_electrode_key_is_one_error_line(config_over):
    bad = config_over("elbow-hold-electrodes.toml", "[stimulation]\nsession_threshold_cv = 2\n")
    assert_one_error_line(*hil_process("check-config", bad), "stimulation.session_threshold_cv")


def test_the_days_sweep_draws_one_session_per_seed(tmp_path):
    """examples/sweeps/elbow-hold-days.toml: five runs, each with its own session seed, all accepted."""
    from hil.sweep.runner import preflight, tasks
    from hil.sweep.spec import load_sweep, variants
    spec = load_sweep(str(REPO / "examples/sweeps/elbow-hold-days.toml"))
    runs = variants(spec)
    assert [r.values["stimulation.session_seed"] for r in runs] == [1, 2, 3, 4, 5]
    valid, errors = preflight(tasks(spec, runs, str(tmp_path)))
    assert errors == [] and len(valid) == 5
