"""Controller plug-ins (drivers.controllers.plugin, drivers.controllers.loopback): the example plug-in in the loop, the built-ins as
entry points, and plug-ins that raise, return garbage or fail to load, which never stop the loop."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import hil_in_process

from drivers.controllers.builtin import ElbowHoldController, PlaybackController
from drivers.controllers.plugin import ControllerLoadError, controller_class
from drivers.core.contract import KIND_CHANNEL, STATUS_WATCHDOG
from hil.config import load_service_config
from hil.rt.offline import run_offline

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


class Keep:
    """Tick listener keeping the elbow angle, the status bits and the applied channel amplitudes."""

    def __init__(self) -> None:
        self.elbow, self.status, self.amp, self.engine = [], [], [], None

    def on_tick(self, record, engine, actuation_ns):
        self.engine = engine
        self.elbow.append(float(record[0]["frame"]["elbow_flexion"]))
        self.status.append(int(record[0]["frame"]["status"]))
        self.amp.append(record[0]["applied"][:, 1].copy())


def _plugin_config(tmp_path: Path, source: str, extra: str = "") -> Path:
    (tmp_path / "plugin.py").write_text(textwrap.dedent(source))
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'include = ["{CONFIGS / "loopback.toml"}", "{CONFIGS / "stimulation-default.toml"}"]\n'
                   '[safety]\nwatchdog_timeout_ms = 100\n'
                   '[[driver]]\ntype = "loopback"\ncontroller = "plugin.py:Plugin"\n' + extra)
    return cfg


def test_the_example_plugin_holds_the_elbow():
    keep = Keep()
    run_offline(load_service_config(CONFIGS / "elbow-pd-plugin.toml"), 1500, [keep])
    elbow = np.degrees(keep.elbow)
    assert elbow[0] < 45.0 and abs(np.mean(elbow[-250:]) - 70.0) < 10.0
    amp = np.array(keep.amp)[:, 3]                                   # biceps, channel 4
    assert np.max(np.abs(np.diff(amp))) <= 200.0 * 0.02 + 1e-9        # the slew limit per call (50 Hz)


def test_builtins_are_entry_points_and_module_paths():
    assert controller_class("elbow_hold") is ElbowHoldController
    assert controller_class("playback") is PlaybackController
    assert controller_class("drivers.controllers.builtin:ElbowHoldController") is ElbowHoldController
    from importlib.metadata import entry_points
    assert {"playback", "elbow_hold"} <= {ep.name for ep in entry_points(group="fes_hil.controllers")}
    with pytest.raises(ControllerLoadError, match="not a drivers.controllers.plugin.Controller"):
        controller_class("drivers.core.contract:frame_dtype")


def test_a_plugin_that_raises_is_counted_logged_once_and_the_watchdog_zeroes(tmp_path, caplog):
    cfg = _plugin_config(tmp_path, """
        from drivers.controllers.plugin import ChannelCommand, Controller
        class Plugin(Controller):
            def step(self, tick, time_s, frame):
                if tick >= 100:
                    raise ZeroDivisionError("the decoder broke")
                return [ChannelCommand(4, 300.0, 50.0, 40.0)]
        """)
    keep = Keep()
    with caplog.at_level(logging.ERROR, logger="drivers.controllers.loopback"):
        result = run_offline(load_service_config(cfg), 250, [keep])
    assert result.ticks == 250                                       # the loop went on
    calls_failed = len(range(100, 250, 5))                           # 50 Hz at 4 ms: every 5th tick
    assert keep.engine.counters.by_reason("rejected") == {(0, "controller_error"): calls_failed}
    assert [r.message for r in caplog.records if "controller_error" in r.message] == [
        "driver 0 (loopback) controller controller_error: ZeroDivisionError: the decoder broke"]
    status, amp = np.array(keep.status), np.array(keep.amp)[:, 3]
    assert amp[99] == 50.0 and not status[99] & STATUS_WATCHDOG
    assert status[-1] & STATUS_WATCHDOG and amp[-1] == 0.0           # 100 ms after the last command


@pytest.mark.parametrize("returned", [
    '"stimulate please"', '{"channel": 4}', '[ChannelCommand(4, "wide", 50.0, 40.0)]', "[42]",
    "[ChannelCommand(4, 300.0, 20.0, 40.0)] * 3",
])
def test_malformed_returns_are_rejected_and_the_good_commands_still_apply(tmp_path, returned):
    cfg = _plugin_config(tmp_path, f"""
        from drivers.controllers.plugin import ChannelCommand, Controller
        class Plugin(Controller):
            max_commands = 2
            def step(self, tick, time_s, frame):
                return {returned}
        """)
    keep = Keep()
    run_offline(load_service_config(cfg), 50, [keep])
    rejected = keep.engine.counters.by_reason("rejected")
    assert rejected == {(0, "controller_malformed"): 10}             # one per call
    if "* 3" in returned:                                            # the first two of three were applied
        assert np.array(keep.amp)[-1, 3] == 20.0
        log = keep.engine.log[:keep.engine.n_log]
        assert np.count_nonzero(log["kind"] == KIND_CHANNEL) <= 2


FAILING_AFTER_100 = """
    import sys
    from drivers.controllers.plugin import ChannelCommand, Controller
    class Loud(ChannelCommand):
        @property
        def amplitude_ma(self):
            raise RuntimeError("field boom")
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no message either")
    def commands():
        yield ChannelCommand(4, 300.0, 50.0, 40.0)
        raise RuntimeError("generator boom")
    def leaving():
        yield ChannelCommand(4, 300.0, 50.0, 40.0)
        sys.exit(3)
    class Plugin(Controller):
        def step(self, tick, time_s, frame):
            if tick < 100:
                return [ChannelCommand(4, 300.0, 50.0, 40.0)]
            return FAILURE
    """


@pytest.mark.parametrize("failure, logged", [
    ("commands()", "iterating step's generator: RuntimeError: generator boom"),
    ("(c for c in commands())", "iterating step's generator: RuntimeError: generator boom"),
    ("[Loud(4, 300.0, 50.0, 40.0)]", "reading a command: RuntimeError: field boom"),
    ("(Loud(4, 300.0, 50.0, 40.0),)", "reading a command: RuntimeError: field boom"),
    ("[ChannelCommand(4, 300.0, 50.0, 40.0)] if (_ for _ in ()).throw(Unprintable()) else []",
     "an exception whose message cannot be read"),
    ("sys.exit(3)", "SystemExit: 3"),
    ("leaving()", "iterating step's generator: SystemExit: 3"),
])
def test_a_return_that_raises_while_read_is_counted_and_the_watchdog_decides(tmp_path, caplog, failure, logged):
    cfg = _plugin_config(tmp_path, FAILING_AFTER_100.replace("FAILURE", failure))
    keep = Keep()
    with caplog.at_level(logging.ERROR, logger="drivers.controllers.loopback"):
        result = run_offline(load_service_config(cfg), 250, [keep])
    assert result.ticks == 250                                       # the loop went on
    assert keep.engine.counters.by_reason("rejected") == {(0, "controller_error"): len(range(100, 250, 5))}
    assert [r.message for r in caplog.records if "controller_error" in r.message] == [
        f"driver 0 (loopback) controller controller_error: {logged}"]
    status, amp = np.array(keep.status), np.array(keep.amp)[:, 3]
    assert amp[110] == 50.0 and not status[110] & STATUS_WATCHDOG   # held until the watchdog's 100 ms (25 ticks)
    assert status[-1] & STATUS_WATCHDOG and amp[-1] == 0.0


def test_a_plugin_raising_new_exception_types_without_end_is_counted_but_logged_a_bounded_number_of_times(
        tmp_path, caplog):
    from drivers.controllers.loopback import MAX_DETAIL_CHARS, MAX_FAULT_KINDS
    cfg = _plugin_config(tmp_path, """
        from drivers.controllers.plugin import Controller
        class Plugin(Controller):
            def step(self, tick, time_s, frame):
                raise type(f"Fault{tick}", (Exception,), {})("x" * 10**6)
        """)
    with caplog.at_level(logging.ERROR, logger="drivers.controllers.loopback"):
        result = run_offline(load_service_config(cfg), 400, [Keep()])
    assert result.ticks == 400
    logged = [r.message for r in caplog.records if "controller_error" in r.message]
    assert len(logged) == MAX_FAULT_KINDS < 80 and max(map(len, logged)) < MAX_DETAIL_CHARS + 60


def test_max_commands_is_read_once_so_changing_it_mid_run_changes_nothing(tmp_path):
    cfg = _plugin_config(tmp_path, """
        from drivers.controllers.plugin import ChannelCommand, Controller
        class Plugin(Controller):
            max_commands = 2
            def step(self, tick, time_s, frame):
                if tick >= 100:
                    self.max_commands = "as many as I like"
                return [ChannelCommand(4, 300.0, 30.0 if tick < 100 else 40.0, 40.0)] * 3
        """)
    keep = Keep()
    result = run_offline(load_service_config(cfg), 250, [keep])
    assert result.ticks == 250
    assert keep.engine.counters.by_reason("rejected") == {(0, "controller_malformed"): 50}   # every call: 3 > 2
    assert np.array(keep.amp)[-1, 3] == 40.0                          # the first two still apply


def test_an_endless_generator_is_read_no_further_than_max_commands_plus_one(tmp_path):
    cfg = _plugin_config(tmp_path, """
        import itertools
        from drivers.controllers.plugin import ChannelCommand, Controller
        class Plugin(Controller):
            max_commands = 2
            pulled = 0
            def step(self, tick, time_s, frame):
                for n in itertools.count():
                    Plugin.pulled += 1
                    if n > 1000:
                        raise RuntimeError("read too far")
                    yield ChannelCommand(4, 300.0, 25.0, 40.0)
        """)
    keep = Keep()
    run_offline(load_service_config(cfg), 50, [keep])
    assert keep.engine.counters.by_reason("rejected") == {(0, "controller_malformed"): 10}  # more than 2, per call
    assert sys.modules["fes_hil_controller_plugin"].Plugin.pulled == 10 * 3
    assert np.array(keep.amp)[-1, 3] == 25.0


@pytest.mark.parametrize("controller, source, words", [
    ("nowhere.py:Plugin", "", "not found"),
    ("plugin.py:Missing", "from drivers.controllers.plugin import Controller\n", "Missing"),
    ("plugin.py:Plugin", "class Plugin:\n    pass\n", "not a drivers.controllers.plugin.Controller"),
    ("plugin.py:Plugin", "from drivers.controllers.plugin import Controller\nclass Plugin(Controller):\n"
                         "    def step(self, tick, time_s, frame): return []\n"
                         "    def reset(self, settings): raise ValueError('gain must be > 0')\n", "gain must be > 0"),
    ("no_such_module:Plugin", "", "No module named"),
    ("telepathy", "", "unknown controller"),
    ("plugin.py:Plugin", "from drivers.controllers.plugin import Controller\nclass Plugin(Controller):\n"
                         "    max_commands = 10**10\n"
                         "    def step(self, tick, time_s, frame): return []\n", "max_commands = 10000000000 is outside"),
    ("plugin.py:Plugin", "from drivers.controllers.plugin import Controller\nclass Plugin(Controller):\n"
                         "    max_commands = '64'\n"
                         "    def step(self, tick, time_s, frame): return []\n", "max_commands must be an integer"),
    ("plugin.py:Plugin", "from drivers.controllers.plugin import Controller\nclass Plugin(Controller):\n"
                         "    def step(self, tick, time_s, frame): return []\n"
                         "    def state(self): return [1.0]\n", "state() must return a dict"),
    ("plugin.py:Plugin", "from drivers.controllers.plugin import Controller\nclass Plugin(Controller):\n"
                         "    def step(self, tick, time_s, frame): return []\n"
                         "    def state(self): return {'gain k': 1.0}\n", "keys must be identifiers"),
])
def test_plugins_that_cannot_load_are_config_errors_naming_the_key(tmp_path, controller, source, words):
    (tmp_path / "plugin.py").write_text(source)
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'include = ["{CONFIGS / "loopback.toml"}"]\n[[driver]]\ntype = "loopback"\n'
                   f'controller = "{controller}"\n')
    out = hil_in_process("check-config", cfg)
    assert out.returncode == 2 and "driver[0].controller" in out.stderr and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


STATEFUL = """
    import math
    from drivers.controllers.plugin import ChannelCommand, Controller
    class Plugin(Controller):
        def reset(self, settings):
            self.calls, self.seen = 0, math.nan
        def step(self, tick, time_s, frame):
            self.calls += 1
            self.seen = math.nan if frame is None else float(frame["elbow_flexion"][0])
            return [ChannelCommand(4, 300.0, 30.0, 40.0)]
        def state(self):
            if self.calls == 7:
                raise RuntimeError("state lost")
            return {"calls": self.calls, "seen_elbow_rad": self.seen} if self.calls != 9 else {"calls": 9}
    """


def test_a_plugins_state_is_recorded_after_every_call_and_exported(tmp_path):
    from hil.recording.hilrec import RecordingReader
    cfg = _plugin_config(tmp_path, STATEFUL)
    keep, rec = Keep(), tmp_path / "run.hilrec"
    result = run_offline(load_service_config(cfg), 60, [keep], str(rec))
    assert result.ticks == 60
    rows = RecordingReader(str(rec)).read("controller0")
    assert list(rows.dtype.names) == ["tick", "calls", "seen_elbow_rad"]
    np.testing.assert_array_equal(rows["tick"], np.arange(0, 60, 5))         # 50 Hz at 4 ms
    good = [i for i in range(len(rows)) if i not in (6, 8)]                   # calls 7 (raises) and 9 (lacks a key)
    np.testing.assert_array_equal(rows["calls"][good], np.array(good) + 1.0)
    elbow = np.array(keep.elbow)
    np.testing.assert_array_equal(rows["seen_elbow_rad"][good[1:]], elbow[rows["tick"][good[1:]] - 1])
    assert np.isnan(rows["calls"][6]) and np.isnan(rows["seen_elbow_rad"][8])
    assert keep.engine.counters.by_reason("rejected") == {(0, "controller_error"): 1, (0, "controller_malformed"): 1}
    out = subprocess.run([sys.executable, "-m", "hil", "export", str(rec), "--csv", str(tmp_path / "run.csv")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    exported = np.genfromtxt(tmp_path / "run.controller0.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(exported["calls"][good], rows["calls"][good])


def test_the_example_plugin_records_its_state_without_faults():
    keep = Keep()
    run_offline(load_service_config(CONFIGS / "elbow-pd-plugin.toml"), 100, [keep])
    faults = {reason: n for (_, reason), n in keep.engine.rejected.items() if reason.startswith("controller")}
    assert faults == {}
