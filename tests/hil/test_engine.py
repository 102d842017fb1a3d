"""The deterministic tick engine, its safety functions and the loopback driver (direct mode)."""
import math

import numpy as np
import pytest
from helpers import closed_loop_elbow, loopback_driver

from drivers.controllers.builtin import PlaybackController
from drivers.controllers.loopback import LoopbackDriver
from drivers.controllers.plugin import Controller, ExcitationCommand
from drivers.core.contract import (
    KIND_CHANNEL,
    KIND_EXCITATION,
    STATUS_GH_UNSTABLE,
    STATUS_GH_ZEROED,
    STATUS_OVERRUN,
    STATUS_ROM,
    STATUS_ROM_ZEROED,
    STATUS_STOPPING,
    STATUS_WATCHDOG,
)
from drivers.core.interface import Driver, driver_class
from hil.rt.engine import TickEngine
from hil.rt.loop import LoopConfig, RealtimeLoop, deadlines_missed
from hil.rt.sensor import SensorModel, SensorModelConfig
from hil.rt.tick import TickBody
from hil.safety.rules import GHMonitor, RangeOfMotion, Watchdog
from hil.safety.table import SafetyConfig
from sim.das3.plant import Plant

H = 0.004
REASONS = ("unknown_channel", "unknown_muscle", "non_finite", "bad_frame")


class ConstantExcitation(Controller):
    """Sends u to every muscle in ``muscles`` until ``stop_tick`` (then falls silent)."""

    max_commands = 138

    def __init__(self, muscles, u, stop_tick=None, resume_tick=None):
        self.muscles, self.u, self.stop_tick, self.resume_tick = list(muscles), u, stop_tick, resume_tick

    def step(self, tick, time_s, frame):
        silent = self.stop_tick is not None and tick >= self.stop_tick and (
            self.resume_tick is None or tick < self.resume_tick)
        if silent:
            return None                        # silent: no sign of life, the watchdog applies
        return [ExcitationCommand(self.settings.muscle_names[m], self.u) for m in self.muscles] or None


def make_engine(model, safety=SafetyConfig(), sensor=SensorModelConfig()):
    plant = Plant(model, step_s=H)
    return TickEngine(plant, None, safety, SensorModel(sensor), H, 1, REASONS,
                      group_index={"bic": np.array([model.muscle_index("bicl"), model.muscle_index("bicb1")])})


def run_ticks(engine, driver, n):
    """The production tick body, called back to back (no clock)."""
    body = TickBody(engine, [driver])
    frames, applied_u = [], []
    for tick in range(n):
        result = body.step(tick, tick)
        frames.append(result.frame.copy())
        applied_u.append(engine.u.copy())
        if result.stop:
            break
    return np.concatenate(frames), np.array(applied_u), result


def biceps(model):
    return [i for i, n in enumerate(model.muscle_names) if n.startswith(("bic", "brachialis"))]


def test_direct_excitation_flexes_the_elbow(model):
    engine = make_engine(model)
    driver = loopback_driver(ConstantExcitation(biceps(model), 0.6), H, model.muscle_names)
    frames, u, _ = run_ticks(engine, driver, 150)
    assert frames["elbow_flexion"][-1] > frames["elbow_flexion"][0] + math.radians(5)
    assert frames["tick"][-1] == 149 and frames["time"][-1] == pytest.approx(150 * H)
    assert u[-1][biceps(model)].min() == 0.6 and np.count_nonzero(u[-1]) == len(biceps(model))
    driver.shutdown()


def test_same_inputs_give_bit_identical_frames(model):
    runs = []
    for _ in range(2):
        engine = make_engine(model, sensor=SensorModelConfig(seed=7, angle_noise_rad=0.01, delay_ticks=2))
        driver = loopback_driver(ConstantExcitation(biceps(model), 0.4), H, model.muscle_names)
        frames, _, _ = run_ticks(engine, driver, 60)
        runs.append(frames)
        driver.shutdown()
    assert runs[0].tobytes() == runs[1].tobytes()


def test_watchdog_zeroes_stimulation_and_recovers(model):
    safety = SafetyConfig(watchdog_timeout_s=0.1)   # 25 ticks
    engine = make_engine(model, safety=safety)
    driver = loopback_driver(ConstantExcitation(biceps(model), 0.5, stop_tick=20, resume_tick=80), H, model.muscle_names)
    frames, u, _ = run_ticks(engine, driver, 100)
    wd = (frames["status"] & STATUS_WATCHDOG) != 0
    assert not wd[:44].any()            # last command at tick 19, timeout 25 ticks
    assert wd[45:80].all() and not u[45:80].any()
    assert not wd[80:].any() and u[85].max() == 0.5
    assert engine.watchdog.trips == 1
    driver.shutdown()


def test_no_controller_means_no_stimulation(model):
    engine = make_engine(model)
    driver = loopback_driver(ConstantExcitation([], 0.0), H, model.muscle_names)
    engine.direct[:] = 0.7  # a stale latch must not be applied while nobody has spoken
    frames, u, _ = run_ticks(engine, driver, 5)
    assert not u.any() and (frames["status"] & STATUS_WATCHDOG).all()
    driver.shutdown()


@pytest.mark.parametrize("action", ["monitor", "zero", "stop"])
def test_gh_actions(model, action):
    # threshold -1: every state counts as unstable (stability is > -1 unless the force is centred)
    engine = make_engine(model, safety=SafetyConfig(gh_action=action, gh_threshold=-1.0))
    driver = loopback_driver(ConstantExcitation(biceps(model), 0.5), H, model.muscle_names)
    frames, u, result = run_ticks(engine, driver, 10)
    assert (frames["status"] & STATUS_GH_UNSTABLE).all()
    assert np.array_equal((frames["status"] & STATUS_GH_UNSTABLE) != 0, frames["gh_stability"] > -1.0)
    if action == "monitor":
        assert len(frames) == 10 and u[-1].max() == 0.5 and not result.stop
    elif action == "zero":
        assert not u.any() and (frames["status"] & STATUS_GH_ZEROED).all() and not result.stop
    else:
        assert len(frames) == 1 and result.stop and result.stop_reason == "gh_unstable"
        assert frames["status"][0] & STATUS_STOPPING and not u.any()
    assert engine.gh.unstable_ticks == len(frames)
    driver.shutdown()


@pytest.mark.parametrize("action", ["monitor", "zero", "stop"])
def test_rom_actions_when_full_triceps_stimulation_extends_the_elbow_past_its_range(model, action):
    """The triceps at 1.0 extend the elbow to -0.5 deg; the model's range starts at 5 deg. The margin is
    3.5 deg because the published equilibrium itself has ACz 3.1 deg outside its range."""
    margin = math.radians(3.5)
    engine = make_engine(model, safety=SafetyConfig(rom_margin_rad=margin, rom_action=action))
    triceps = [i for i, n in enumerate(model.muscle_names) if n.startswith("tri")]
    driver = loopback_driver(ConstantExcitation(triceps, 1.0), H, model.muscle_names)
    frames, u, result = run_ticks(engine, driver, 400)
    q = frames["q"]
    outside = (q < model.dof_ranges[:, 0] - margin) | (q > model.dof_ranges[:, 1] + margin)
    out = outside.any(axis=1)
    alarm = (frames["status"] & STATUS_ROM) != 0
    assert outside[:, 9].any() and np.array_equal(alarm, out)    # the bit follows each frame's own posture
    first = int(np.argmax(out))
    assert engine.rom.alarm_ticks == int(out.sum())
    if action == "monitor":
        assert len(frames) == 400 and not result.stop and (u[first:, triceps] == 1.0).all()
        assert np.degrees(q[:, 9].min()) < 0.0
        exported = engine.counters.block.counter("hil_rom_alarm_ticks_total")   # the series the exporter serves
        assert exported.value == int(out.sum())                                # is the count itself
    elif action == "zero":   # zero from the tick after an alarm frame until rom_zero_hold_ms after the last one
        assert len(frames) == 400 and not result.stop
        hold = engine.rom.hold_ticks
        assert hold == 62                                        # 250 ms at 4 ms
        expected = np.array([out[max(0, k - hold):k].any() for k in range(400)])
        zeroed = (frames["status"] & STATUS_ROM_ZEROED) != 0
        assert np.array_equal(zeroed, expected) and np.array_equal(~u.any(axis=1)[1:], expected[1:])
        assert out.sum() < 100           # 67 frames out of range (monitor: 378; zero without the hold: 300)
    else:
        assert len(frames) == first + 1 and result.stop and result.stop_reason == "range_of_motion"
        assert frames["status"][-1] & STATUS_STOPPING
    driver.shutdown()


def test_bad_commands_are_rejected_counted_and_recorded(model):
    engine = make_engine(model)
    engine.begin(0)
    assert not engine.excitation(0, 123, 500, 0.5)                 # no such muscle
    assert not engine.excitation(0, 124, 3, math.nan)
    assert not engine.channel(0, 125, 0, 200.0, 20.0, 30.0, 0)     # direct mode: no channels
    assert not engine.group_excitation(0, 126, "nope", 0.3)
    engine.reject(0, 127, "bad_frame")
    assert engine.excitation(0, 128, 3, 1.5)                       # clipped, accepted
    assert engine.direct[3] == 1.0
    assert engine.group_excitation(0, 129, "bic", 0.25)
    assert engine.rejected == {(0, "unknown_muscle"): 2, (0, "non_finite"): 1, (0, "unknown_channel"): 1,
                               (0, "bad_frame"): 1}
    assert engine.clamped == {(0, "excitation_clipped"): 1}                # applied, so not "rejected"
    log = engine.log[: engine.n_log]
    assert list(log["receive_ns"]) == [123, 124, 125, 126, 127, 128, 129, 129]
    assert list(log["status"][:5] > 0) == [True] * 5 and not log["status"][5:].any()
    assert log["kind"][2] == KIND_CHANNEL and log["kind"][5] == KIND_EXCITATION


def test_channel_mode_rejects_excitations_once_per_command(model):
    import tomllib
    from pathlib import Path

    from hil.rt.stimulation import StimulationModel, load_stimulation_config
    path = Path(__file__).resolve().parents[2] / "configs/stimulation-default.toml"
    table = tomllib.loads(path.read_text())["stimulation"]
    stim = StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)
    engine = TickEngine(Plant(model, step_s=H), stim, SafetyConfig(), SensorModel(SensorModelConfig()), H, 1,
                        REASONS, group_index={"bic": np.array([model.muscle_index("bicl"), model.muscle_index("bicb1")])})
    engine.begin(0)
    assert not engine.excitation(0, 1, 3, 0.5)
    assert not engine.group_excitation(0, 2, "bic", 0.5)           # one rejection, not one per element
    assert engine.rejected == {(0, "wrong_mode"): 2} and engine.n_log == 2
    assert not engine.direct.any()


def test_watchdog_and_monitors_units():
    wd = Watchdog(timeout_s=0.01, period_s=0.004)  # 2 ticks (rounded from 2.5)
    assert wd.update(0)                            # never fed: tripped, not counted
    wd.feed(1)
    assert not wd.update(1) and not wd.update(2) and wd.update(3) and wd.trips == 1
    gh = GHMonitor("zero", hold_ticks=2)
    gh.prime(-0.5)
    assert not gh.zero_now() and not gh.observe(-0.5) and not gh.zero_now()
    assert not gh.observe(0.2) and gh.zero_now() and gh.unstable and gh.unstable_ticks == 1
    assert not gh.observe(math.nan) and gh.unstable_ticks == 2      # NaN counts as unstable
    # zero for hold_ticks = 2 ticks after the last unstable frame: the next tick, and one more
    assert not gh.observe(-0.5) and gh.zero_now() and not gh.unstable
    assert not gh.observe(-0.5) and not gh.zero_now()
    stop = GHMonitor("stop")
    stop.prime(-0.5)
    assert not stop.observe(-0.1) and stop.observe(0.1) and stop.unstable_ticks == 1
    with pytest.raises(ValueError):
        GHMonitor("explode")
    rom = RangeOfMotion(np.array([[0.0, 1.0]] * 11), 0.1, "stop")
    rom.prime(np.full(11, 0.5))
    assert not rom.zero_now() and not rom.observe(np.full(11, 0.5))
    q = np.full(11, 0.5)
    q[4] = 1.2
    assert rom.observe(q) and rom.alarm and rom.zero_now() and rom.alarm_ticks == 1


def test_playback_controller_direct_mode(model, tmp_path):
    csv = tmp_path / "u.csv"
    csv.write_text("time,bicl,triclong1\n0,0.2,0\n0.04,0.5,0.1\n")
    engine = make_engine(model)
    driver = loopback_driver(PlaybackController(), H, model.muscle_names, rate_hz=250.0,
                             params={"file": str(csv), "direct": True})
    _, u, _ = run_ticks(engine, driver, 15)
    b, t = model.muscle_index("bicl"), model.muscle_index("triclong1")
    assert u[5][b] == 0.2 and u[12][b] == 0.5 and u[12][t] == 0.1
    driver.shutdown()


def test_realtime_loop_runs_on_deadlines_without_catch_up(model):
    engine = make_engine(model)
    driver = loopback_driver(ConstantExcitation(biceps(model), 0.3), H, model.muscle_names)
    loop = RealtimeLoop(TickBody(engine, [driver]), LoopConfig(period_s=H, sched_fifo=False, mlock=False))
    summary = loop.run(50)
    assert summary.ticks == 50 and summary.stopped_by == "duration"
    assert loop.record[0]["tick"] == 49 and loop.record[0]["frame"]["tick"] == 49
    assert summary.timing_s.shape == (50, 5)
    assert summary.timing_s[-1, 2] == pytest.approx(loop.record[0]["compute_ns"] * 1e-9, rel=1e-12)  # the engine step
    assert np.all(summary.timing_s[:, 1:] > 0.0)       # every phase of every tick timed
    assert summary.timing_s[:, 4].max() < H             # listeners timed alone, not the wait for the next tick
    assert engine.plant.time == pytest.approx(50 * H)   # simulated time locked to ticks
    driver.shutdown()


class FakeClock:
    """Time that moves only when told: ``wait`` jumps to the deadline (a punctual wake-up), and a
    driver's fetch can take ``work_ns[tick]`` (a slow tick)."""

    def __init__(self) -> None:
        self.now = 10**12
        self.work_ns: dict[int, int] = {}

    def clock(self) -> int:
        return self.now

    def wait(self, deadline_ns: int, spin_ns: int) -> int:
        self.now = max(self.now, deadline_ns)
        return self.now


class SlowDriver(LoopbackDriver):
    def __init__(self, controller, clock: FakeClock, muscle_names) -> None:
        settings = loopback_driver(controller, H, muscle_names).settings
        super().__init__(controller, settings)
        self.fake = clock

    def fetch(self, tick, now_ns, sink) -> None:
        super().fetch(tick, now_ns, sink)
        self.fake.now += self.fake.work_ns.get(tick, 0)


def test_an_overrun_skips_the_missed_deadlines_without_catch_up(model):
    """Tick 3 takes 2.5 periods: deadlines 4 and 5 are skipped, tick 4 starts at deadline 6 and says it
    follows an overrun; the simulated time stays locked to the tick count."""
    period = int(H * 1e9)
    fake = FakeClock()
    fake.work_ns[3] = int(2.5 * period)
    engine = make_engine(model)
    driver = SlowDriver(ConstantExcitation(biceps(model), 0.3), fake, model.muscle_names)
    deadlines, skipped, status = [], [], []

    class Watch:
        def on_tick(self, record, engine, actuation_ns):
            deadlines.append(int(record[0]["deadline_ns"]))
            skipped.append(int(record[0]["skipped_deadlines"]))
            status.append(int(record[0]["frame"]["status"]))
    loop = RealtimeLoop(TickBody(engine, [driver], [Watch()], clock=fake.clock),
                        LoopConfig(period_s=H, sched_fifo=False, mlock=False), clock=fake.clock, wait=fake.wait)
    summary = loop.run(8)
    slots = [(d - deadlines[0]) // period for d in deadlines]
    assert slots == [0, 1, 2, 3, 6, 7, 8, 9]
    assert skipped == [0, 0, 0, 2, 0, 0, 0, 0] and summary.deadline_misses == 1 and summary.skipped_deadlines == 2
    assert [bool(s & STATUS_OVERRUN) for s in status] == [False] * 4 + [True] + [False] * 3
    assert engine.plant.time == pytest.approx(8 * H) and summary.timing_s[:, 0].max() == 0.0
    assert deadlines_missed(100, 100, 10) == 0 and deadlines_missed(101, 100, 10) == 1
    assert deadlines_missed(125, 100, 10) == 3
    driver.shutdown()


def test_driver_registry_and_lifecycle(model):
    assert driver_class("loopback") is LoopbackDriver
    with pytest.raises(ValueError, match="unknown driver"):
        driver_class("carrier-pigeon")
    d = loopback_driver(ConstantExcitation([], 0.0), H, model.muscle_names)
    d.shutdown()
    d.shutdown()  # idempotent
    assert isinstance(d, Driver)


def test_hil_run_loopback_end_to_end(tmp_path):
    """`hil run` on the shipped loopback config: the real-time process runs and the elbow flexes."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(repo / "configs/loopback.toml"),
                          "--duration", "1.5", "--record", str(tmp_path / "r.hilrec"), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["ticks"] == 375 and summary["stopped_by"] == "duration"
    assert summary["commands_received"] > 0 and summary["watchdog_trips"] == 0
    assert summary["final_elbow_deg"] > 60.0   # starts at 37.6 deg, the flexors are excited from 0.5 s


def test_hil_check_config_reports_the_key(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.toml"
    bad.write_text("[loop]\nperiod_ms = 0.5\n")
    out = subprocess.run([sys.executable, "-m", "hil", "check-config", str(bad)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "loop.period_ms" in out.stderr


def test_elbow_hold_closed_loop_through_the_stimulation_model():
    """configs/elbow-hold.toml: the PID controller drives the biceps/triceps channels of the default map,
    brings the elbow from 37.6 deg to the 90 deg target without a limit cycle and keeps the GH joint
    stable (the PI controller without threshold compensation swung ±20 deg and was GH-unstable 73 %)."""
    from pathlib import Path

    from hil.config import load_service_config

    cfg = load_service_config(Path(__file__).resolve().parents[2] / "configs/elbow-hold.toml")
    elbow, engine = closed_loop_elbow(cfg, 750)         # 3 s
    assert engine.n_channels == 8
    assert elbow[0] < 40.0 and elbow.max() < 100.0                       # overshoot under 10 deg
    assert np.all(np.abs(elbow[500:] - 90.0) < 1.0), (elbow[500:].min(), elbow[500:].max())
    assert engine.gh.unstable_ticks == 0
    assert engine.watchdog.trips == 0 and not engine.rejected


def test_clamped_commands_are_applied_counted_apart_and_logged_as_requested(model):
    from hil.rt.stimulation import StimulationModel, load_stimulation_config
    table = {"mode": "channels", "channel": [
        {"name": "rej", "muscles": {"bicl": 1.0}, "max_amplitude_ma": 50, "limit_policy": "reject"},
        {"name": "clamp", "muscles": {"bicl": 1.0}, "max_amplitude_ma": 50, "limit_policy": "clamp"}]}
    stim = StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)
    engine = TickEngine(Plant(model, step_s=H), stim, SafetyConfig(), SensorModel(SensorModelConfig()), H, 1, REASONS)
    engine.begin(0)
    assert not engine.channel(0, 1, 0, 300.0, 120.0, 40.0, 0)
    assert engine.channel(0, 2, 1, 300.0, 120.0, 40.0, 0)
    assert engine.rejected == {(0, "amplitude_limit"): 1} and engine.clamped == {(0, "amplitude_limit"): 1}
    assert engine.latched[1, 1] == 50.0 and engine.latched[0, 1] == 0.0
    log = engine.log[:engine.n_log]
    assert list(log["values"][:, 1]) == [120.0, 120.0] and all(log["status"] > 0)   # what was asked for


def test_command_log_entries_are_what_numpy_writes_and_refuses(model):
    """The engine packs log entries itself: bit for bit what a numpy item assignment stores, and what the
    packer cannot store goes to numpy, which converts it (a float index, None as NaN) or refuses it (an
    index beyond int16, which a loopback driver then counts as a malformed command), as before."""
    from drivers.core.contract import COMMAND_DTYPE, KIND_HEARTBEAT
    engine = make_engine(model)
    engine.begin(7)
    entries = [(0, 123, KIND_CHANNEL, 0, 3, 300.0, -0.0, math.nan, 2),
               (65535, -5, KIND_EXCITATION, 255, -32768, 1e308, 5e-324, -math.inf, 1),
               (1, 2 ** 62, KIND_HEARTBEAT, 7, 3.7, None, np.float32(0.1), np.int64(-3), True)]
    expected = np.zeros(len(entries), COMMAND_DTYPE)
    for i, (driver, ns, kind, status, index, *values) in enumerate(entries):
        engine._record(driver, ns, kind, status, index, *values)
        expected[i] = (7, ns, driver, kind, status, index, tuple(values))
    assert engine.log[:engine.n_log].tobytes() == expected.tobytes() and expected["index"][2] == 3
    with pytest.raises(OverflowError):
        engine._record(0, 0, KIND_CHANNEL, 0, 40001)
    assert engine.n_log == len(entries)


def test_the_tick_record_is_what_the_engine_applied_and_sent(model, config_over):
    """The tick record's applied channels, excitations, fitness and frame are the engine's own memory (the
    compiled tick writes them in place); its other fields are the body's, timed as a tick on its deadline until
    a real-time caller sets them. A delayed sensor's frame (sent from its history) is copied in."""
    from hil.config import load_service_config
    from hil.service.build import build_engine
    for delay_ms in (0, 12):
        cfg = config_over("elbow-hold-fatigue.toml", f"[sensor]\ndelay_ms = {delay_ms}\n")
        _, engine, drivers = build_engine(load_service_config(cfg))
        body = TickBody(engine, drivers)
        record = body.record
        for name, own in (("applied", engine.applied), ("u", engine.u), ("fitness", engine.fitness)):
            assert np.shares_memory(record[name], own)
        for tick in range(40):
            result = body.step(tick, 10 * tick)
            rec = record[0]
            assert (rec["deadline_ns"], rec["start_ns"], rec["lateness_ns"], rec["tick_ns"],
                    rec["skipped_deadlines"]) == (10 * tick, 10 * tick, 0, body.compute_ns, 0)   # on its deadline
            body.set_timing(3 * tick, 5 * tick, 9, tick % 2)
            assert body.emit() == 0
            assert rec["frame"].tobytes() == result.frame[0].tobytes() and rec["tick"] == tick
            assert rec["u"].tobytes() == engine.u.tobytes() and rec["fitness"].tobytes() == engine.fitness.tobytes()
            assert rec["applied"][:engine.n_channels].tobytes() == engine.applied.tobytes()
            assert (rec["compute_ns"], rec["deadline_ns"], rec["start_ns"], rec["lateness_ns"], rec["tick_ns"],
                    rec["skipped_deadlines"]) == (body.compute_ns, 3 * tick, 5 * tick, 2 * tick, 9, tick % 2)
        assert engine.applied.any() and (engine.fitness < 1.0).any()
        assert (result.frame is body.engine.sensor.true_frame) == (delay_ms == 0)
        for d in drivers:
            d.shutdown()


@pytest.mark.parametrize("safety, reason, words", [
    ('gh_action = "stop"\ngh_threshold = -1.0\n', "gh_unstable", "GH stability"),
    # the published equilibrium is 3.06 deg beyond the ACz range: with no margin the first frame alarms
    ('rom_action = "stop"\nrom_margin_deg = 0.0\n', "range_of_motion", "ACz -24.94 deg (range -21.9...20.0 deg")])
def test_hil_run_safety_stop_exits_4_and_says_why(config_over, safety, reason, words):
    import json
    import subprocess
    import sys
    cfg = config_over("loopback.toml", "[metrics]\nenabled = false\n[recording]\nenabled = false\n[safety]\n" + safety)
    out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "1", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 4, out.stderr
    summary = json.loads(out.stdout)
    assert summary["stopped_by"] == reason and summary["ticks"] == 1 and words in summary["stop_detail"]
    assert f"safety stop ({reason}) at tick 0" in out.stderr and words in out.stderr.replace("\n", " ")
