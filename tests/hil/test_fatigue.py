"""Stimulation fatigue (hil/rt/fatigue.py): Ding et al. 2003's force-fatigue model in the tick."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import free_port

from hil.rt.fatigue import DING2003, channel_fitness, fatigue_tick, rested_state
from hil.rt.stimulation import StimulationModel, load_stimulation_config
from sim.das3.config import ConfigError

# Ding et al. 2003 as tabulated in Bioelectron Med 2023;9:3 Table 2, in ms, N and N/ms as printed there
# (alpha_Km per ms per N: 1.9e-8), written out here independently of hil.rt.fatigue.
A_REST, KM_REST, TAU1_REST, TAU2, TAU_C = 3.009, 0.103, 50.957, 100.0, 20.0
ALPHA_A, ALPHA_KM, ALPHA_TAU1, TAU_FAT = -4.0e-7, 1.9e-8, 2.1e-5, 127000.0


def _run_ticks(seconds, rate_hz, recruitment, dt=0.004, state=None):
    """Fitness per tick of one channel driven at ``rate_hz`` with recruitment ``recruitment``."""
    state = rested_state(1) if state is None else state
    p = DING2003.kernel_array()
    n = round(seconds / dt)
    fitness = np.empty(n)
    for k in range(n):
        fatigue_tick(state, p, 0, recruitment, rate_hz, dt)
        fitness[k] = channel_fitness(state, 0, p)
    return fitness, state


def _pulse_resolved(seconds, rate_hz, fatigue=True, h=0.25):
    """Ding et al. 2003 with every pulse (ms units, RK4 at h ms): mean force over each pulse period."""
    period = 1000.0 / rate_hz
    steps = round(period / h)
    a, km, tau1 = A_REST, KM_REST, TAU1_REST
    s = cn = f = 0.0
    means, last_pulse = [], -1e9
    scale = 1.0 if fatigue else 0.0

    def rates(y):
        s_, cn_, f_, a_, km_, tau1_ = y
        g = cn_ / (km_ + cn_)
        return np.array([-s_ / TAU_C, (s_ - cn_) / TAU_C, a_ * g - f_ / (tau1_ + TAU2 * g),
                         -(a_ - A_REST) / TAU_FAT + scale * ALPHA_A * f_,
                         -(km_ - KM_REST) / TAU_FAT + scale * ALPHA_KM * f_,
                         -(tau1_ - TAU1_REST) / TAU_FAT + scale * ALPHA_TAU1 * f_])

    t = 0.0
    for _ in range(round(seconds * rate_hz)):
        r0 = km + 1.04
        s += 1.0 + (r0 - 1.0) * math.exp(-(t - last_pulse) / TAU_C)
        last_pulse = t
        y = np.array([s, cn, f, a, km, tau1])
        total = 0.0
        for _ in range(steps):
            k1 = rates(y)
            k2 = rates(y + 0.5 * h * k1)
            k3 = rates(y + 0.5 * h * k2)
            k4 = rates(y + h * k3)
            y = y + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
            total += y[2]
        s, cn, f, a, km, tau1 = y
        means.append(total / steps)
        t += period
    return np.array(means)


def test_fatigued_channel_recovers_at_rest_with_the_published_time_constant():
    """With no stimulation each parameter returns to rest as exp(-t / tau_fat), tau_fat = 127 s."""
    _, state = _run_ticks(20.0, 30.0, 1.0)
    start = state.copy()
    _run_ticks(60.0, 0.0, 0.0, state=state)
    rest = np.array([DING2003.a_rest, DING2003.km_rest, DING2003.tau1_rest])
    np.testing.assert_allclose(state[0, :3] - rest, (start[0, :3] - rest) * math.exp(-60.0 / 127.0), rtol=1e-9)
    assert start[0, 0] < 0.8 * DING2003.a_rest    # it was fatigued


def test_fitness_under_30_hz_follows_the_pulse_resolved_ding_model():
    """Constant 30 Hz at full recruitment: the tick's pulse-averaged fatigue gives the force decline of
    the published model integrated pulse by pulse (force relative to the same train without fatigue)."""
    fitness, _ = _run_ticks(60.0, 30.0, 1.0)
    fatigued, rested = _pulse_resolved(60.0, 30.0), _pulse_resolved(60.0, 30.0, fatigue=False)
    for t in (10.0, 30.0, 60.0):
        k, n = round(t / 0.004) - 1, round(t * 30.0) - 1
        assert fitness[k] == pytest.approx(fatigued[n] / rested[n], abs=0.015), t
    assert fitness[-1] < 0.6 and np.all(np.diff(fitness[250:]) < 0)


def test_fatigue_grows_with_frequency_and_intensity():
    low_rate, _ = _run_ticks(30.0, 20.0, 1.0)
    high_rate, _ = _run_ticks(30.0, 50.0, 1.0)
    weak, _ = _run_ticks(30.0, 30.0, 0.3)
    strong, _ = _run_ticks(30.0, 30.0, 1.0)
    assert high_rate[-1] < low_rate[-1] - 0.02
    assert strong[-1] < weak[-1] - 0.1


def _fatigue_engine(model, fatigue="ding2003", period_s=0.004):
    from hil.rt.engine import TickEngine
    from hil.rt.sensor import SensorModel, SensorModelConfig
    from hil.safety.table import SafetyConfig
    from sim.das3.plant import Plant

    table = {"fatigue": fatigue, "channel": [{"name": "biceps", "muscles": {"bicl": 1.0, "bicb": 1.0}}]}
    stim = StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)
    return TickEngine(Plant(model, step_s=period_s), stim, SafetyConfig(watchdog_timeout_s=0.2),
                      SensorModel(SensorModelConfig()), period_s, 1, ("unknown_channel",))


def test_fatigue_scales_the_excitation_of_a_stimulated_channel(model):
    """Under a constant command the biceps excitation falls with the channel's fitness; warm-up leaves
    the fatigue state untouched; without fatigue it stays constant."""
    tired, fresh = _fatigue_engine(model), _fatigue_engine(model, "none")
    tired.warmup()
    assert np.all(tired.fitness == 1.0) and tired.fatigue[0][0, 3] == 0.0
    k = model.muscle_index("bicl")
    u_tired, u_fresh = [], []
    for tick in range(2500):
        for engine, out in ((tired, u_tired), (fresh, u_fresh)):
            engine.begin(tick)
            engine.channel(0, tick, 0, 300.0, 100.0, 40.0, 0)
            engine.step()
            out.append(engine.u[k])
    assert u_fresh[-1] == u_fresh[1] and u_tired[1] == pytest.approx(u_fresh[1], rel=1e-3)
    assert u_tired[-1] == pytest.approx(u_fresh[-1] * tired.fitness[0], rel=1e-2)
    assert tired.fitness[0] < 0.9


@pytest.mark.parametrize("table, key", [
    ({"fatigue": "riener", "channel": [{"muscles": {"bicl": 1}}]}, "stimulation.fatigue"),
    ({"fatigue_rate_scale": -1, "channel": [{"muscles": {"bicl": 1}}]}, "stimulation.fatigue_rate_scale"),
])
def test_fatigue_config_errors_name_the_key(model, table, key):
    with pytest.raises(ConfigError) as err:
        load_stimulation_config(table, model.muscle_names)
    assert err.value.key == key


def _elbow_hold(cfg_path, seconds):
    """(time, biceps amplitude mA, biceps fitness, elbow flexion deg) per tick of an offline run."""
    from hil.config import load_service_config
    from hil.rt.offline import run_offline

    cfg = load_service_config(cfg_path)
    rows = []

    class Collect:
        def on_tick(self, record, engine, actuation_ns):
            r = record[0]
            fitness = r["fitness"][3] if "fitness" in r.dtype.names else 1.0    # no field without fatigue
            rows.append((r["frame"]["time"], r["applied"][3, 1], fitness, math.degrees(r["frame"]["elbow_flexion"])))
    run_offline(cfg, round(seconds / cfg.loop.period_s), [Collect()])
    return np.array(rows)


@pytest.mark.slow
def test_elbow_hold_needs_rising_stimulation_as_the_biceps_tires(config_over):
    """configs/elbow-hold-fatigue.toml for 60 s: the PID holds 90 deg, and to do so raises the biceps
    amplitude as its fitness falls; the same run without fatigue holds it at constant amplitude."""
    tired = _elbow_hold("configs/elbow-hold-fatigue.toml", 60.0)
    fresh = _elbow_hold(config_over("elbow-hold-fatigue.toml", '[stimulation]\nfatigue = "none"\n'), 60.0)
    early, late = (tired[:, 0] > 5) & (tired[:, 0] <= 10), tired[:, 0] > 55
    for run in (tired, fresh):
        assert np.all(np.abs(run[late, 3] - 90.0) < 0.1)
    assert tired[-1, 2] < 0.97
    assert tired[late, 1].mean() > tired[early, 1].mean() + 0.15
    assert abs(fresh[late, 1].mean() - fresh[early, 1].mean()) < 0.01


def test_fatigue_is_recorded_replayed_bit_identical_and_exported(tmp_path, config_over):
    """A real-time run with fatigue: the recording holds each channel's fitness, replay reproduces every
    frame, and the exporter serves hil_fatigue_fitness per channel (scraped over HTTP)."""
    import subprocess
    import sys
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from hil.recording.hilrec import RecordingReader

    port = free_port()
    cfg = config_over("elbow-hold-fatigue.toml", f'[metrics]\nenabled = true\nport = {port}\n')
    rec = tmp_path / "run.hilrec"
    run = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "6",
                            "--record", str(rec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fitness = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and run.poll() is None:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                fitness = {s.labels["channel"]: s.value for fam in text_string_to_metric_families(text)
                           for s in fam.samples if s.name == "hil_fatigue_fitness"}
            except OSError:       # the exporter is not up yet
                pass
            if fitness.get("biceps", 1.0) < 1.0:
                break
            time.sleep(0.1)
    finally:
        out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert set(fitness) == {"anterior_deltoid", "middle_deltoid", "posterior_deltoid", "biceps", "triceps",
                            "pectoralis_major", "serratus_anterior", "lower_trapezius"}
    assert 0.99 < fitness["biceps"] < 1.0
    ticks = RecordingReader(rec).read("ticks")
    assert ticks["fitness"][-1, 3] < 1.0 == ticks["fitness"][0, 3] and np.all(ticks["fitness"][:, 0] == 1.0)
    replay = subprocess.run([sys.executable, "-m", "hil", "replay", str(rec)], capture_output=True, text=True,
                            timeout=300)
    assert replay.returncode == 0 and "bit-identical" in replay.stdout, replay.stdout + replay.stderr

