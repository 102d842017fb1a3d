"""A controller plug-in stuck in ``step()`` (issue 34 item 3) and a stop of the whole process group (item 11),
against the real service: the supervisor's tick-progress watchdog ends a stalled run with stimulation stopped,
one red line, exit 4 and a recording that says so; every process of the run dies with the supervisor even
while the loop is stuck; a SIGTERM to the process group is a clean stop."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest
from helpers import descendants, free_port, shared_memory_of

from drivers.core.contract import KIND_CHANNEL, KIND_TICK_STALL
from hil.recording.hilrec import RecordingReader

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
BICEPS = 3                    # channel 4 of the default map, 0-based
STALL_AT_TICK = 250           # 1 s of a 4 ms loop

PLUGIN = """
    import time
    from drivers.controllers.plugin import ChannelCommand, Controller
    class Plugin(Controller):
        stalled = False
        def step(self, tick, time_s, frame):
            if tick >= {stall_at} and not self.stalled:
                self.stalled = True
                open({marker!r}, "w").close()
                {stall}
            return [ChannelCommand(4, 300.0, 30.0, 40.0)]
    """


def plugin_config(tmp_path: Path, stall: str, timeout_ms: float, metrics_port: int | None = None,
                  more_drivers: str = "") -> Path:
    """A run whose plug-in (driver 0) stimulates the biceps, then runs ``stall`` once at STALL_AT_TICK. The loop
    runs SCHED_FIFO where permitted, so that a loaded machine does not make a healthy tick look stalled."""
    (tmp_path / "plugin.py").write_text(textwrap.dedent(PLUGIN).format(
        stall_at=STALL_AT_TICK, marker=str(tmp_path / "stalled"), stall=stall))
    metrics = "enabled = false" if metrics_port is None else f"port = {metrics_port}"
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'include = ["{CONFIGS / "loopback.toml"}", "{CONFIGS / "stimulation-default.toml"}"]\n'
                   f'[safety]\nwatchdog_timeout_ms = 100\ntick_stall_timeout_ms = {timeout_ms}\n'
                   f'[metrics]\n{metrics}\n'
                   '[[driver]]\ntype = "loopback"\ncontroller = "plugin.py:Plugin"\n' + textwrap.dedent(more_drivers))
    return cfg


def hil_run(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hil", "run", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)


def finish(proc: subprocess.Popen, timeout_s: float = 120.0) -> tuple[str, str]:
    """stdout and stderr of a run that must end by itself; a run still going after ``timeout_s`` is killed
    with every process of its group, and the test fails."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"hil run did not end within {timeout_s:g} s") from None


def wait_until(condition, proc: subprocess.Popen | None = None, timeout_s: float = 300.0, what: str = "") -> None:
    t_end = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"hil run exited early ({what}): {proc.communicate()[1]}")
        assert time.monotonic() < t_end, f"timed out waiting for {what}"
        time.sleep(0.05)


def gone(pids, timeout_s: float = 30.0) -> dict[int, str]:
    """The processes of ``pids`` still alive after up to ``timeout_s``."""
    t_end = time.monotonic() + timeout_s
    alive = dict(pids)
    while alive and time.monotonic() < t_end:
        time.sleep(0.1)
        alive = {p: n for p, n in alive.items() if Path(f"/proc/{p}").exists()}
    return alive


# --- the tick-progress watchdog ------------------------------------------------------------------------------

@pytest.mark.parametrize("stall, killed", [
    ("while True: pass", True),                 # never returns (pure Python: holds the GIL between checks)
    ("time.sleep(3.0)", True),                  # returns, but after the grace
    ("time.sleep(0.9)", False),                 # returns within the grace: the loop stops itself
])
def test_a_stuck_controller_ends_the_run_with_stimulation_stopped(tmp_path, stall, killed):
    cfg = plugin_config(tmp_path, stall, 300)
    rec = tmp_path / "run.hilrec"
    proc = hil_run("--config", cfg, "--duration", 30, "--record", rec, "--json")
    out, err = finish(proc)
    assert proc.returncode == 4, err
    red = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(red) == 1 and "the loop stalled" in red[0] and "tick_stall_timeout_ms = 300" in red[0], err
    assert ("was killed" in red[0]) == killed and "Traceback" not in err, err
    summary = json.loads(out)
    assert summary["ok"] is False and summary["stopped_by"] == "tick_stall"
    [entry] = summary["stalls"]
    assert entry == {"tick": STALL_AT_TICK, "duration_s": entry["duration_s"], "timeout_s": 0.3, "killed": killed}
    assert entry["duration_s"] >= 0.3
    reader = RecordingReader(rec)                   # readable, and it says why it ends
    ticks, commands = reader.read("ticks"), reader.read("commands")
    assert not reader.warnings and len(ticks) < 30 / 0.004 / 2
    assert ticks["applied"][-1, BICEPS, 1] == 30.0                     # stimulating until the stall
    assert ticks["tick"][-1] == STALL_AT_TICK - killed                 # no tick after the stalled one
    stop = commands[-1]
    assert stop["kind"] == KIND_TICK_STALL and stop["tick"] == STALL_AT_TICK and stop["values"][0] >= 0.3
    assert not np.any(commands["kind"][commands["tick"] > ticks["tick"][-1]] == KIND_CHANNEL)
    if stall != "while True: pass":
        return                                      # the report reads the stall record: once is enough
    report = subprocess.run([sys.executable, "-m", "hil", "report", rec, "--out", tmp_path / "report", "--json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert report.returncode == 0, report.stderr
    [reported] = json.loads(report.stdout)["tick_stalls"]
    assert reported == {"tick": STALL_AT_TICK, "duration_s": float(stop["values"][0])}


LARGE_HEAP_PLUGIN = """
    from drivers.controllers.plugin import ChannelCommand, Controller
    class Plugin(Controller):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.table = [[] for _ in range(3_000_000)]     # a model held as Python objects
        def step(self, tick, time_s, frame):
            return [ChannelCommand(4, 300.0, 30.0, 40.0)]
    """


def test_a_plugin_with_a_large_heap_starts_without_a_false_stall(tmp_path):
    """Setting the loop up (memory lock, a full garbage collection, then a frozen heap) takes as long as the
    controller's heap is large; the stall watch starts counting at the first tick, not before. A loop that set
    itself up under the watch stalled "in tick 0" at the shortest timeout with this heap."""
    cfg = plugin_config(tmp_path, "", 250)
    (tmp_path / "plugin.py").write_text(textwrap.dedent(LARGE_HEAP_PLUGIN))       # in place of the stalling one
    proc = hil_run("--config", cfg, "--duration", 0.5, "--json")
    out, err = finish(proc)
    assert proc.returncode == 0 and "stalled" not in err, err
    summary = json.loads(out)
    assert summary["ok"] and summary["stopped_by"] == "duration" and not summary.get("stalls")


def test_sigkill_of_the_supervisor_while_the_controller_is_stuck_leaves_nothing(tmp_path):
    """The real-time process cannot act on its parent's death while its loop is stuck: the orphan watch kills
    it, its helpers die with it, and no shared memory or port file is left behind."""
    cfg = plugin_config(tmp_path, "while True: pass", 60000, metrics_port=free_port(),
                        more_drivers="""
                            [[driver]]
                            type = "sciencemode2"
                            port = "pty"
                            sensor_port = "none"
                            """)
    rec, ports_file = tmp_path / "run.hilrec", tmp_path / "ports.json"
    proc = hil_run("--config", cfg, "--record", rec, "--port-file", ports_file)
    try:
        wait_until(lambda: (tmp_path / "stalled").exists(), proc, what="the plug-in to get stuck")
        time.sleep(0.5)
        helpers = descendants(proc.pid)
        segments, had_port_file = shared_memory_of([proc.pid, *helpers]), ports_file.exists()
    finally:
        proc.kill()
        proc.wait(10)
    alive = gone(helpers)
    for pid, name in alive.items():                 # the test's own clean-up when the service's failed; the
        if name.startswith("hil-"):                 # resource tracker then unlinks the shared memory
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert {"hil-rt", "hil-recorder", "hil-link-1", "hil-exporter", "hil-orphanwatch"} <= set(helpers.values()), \
        helpers
    assert segments and had_port_file
    assert not alive, f"still running after the supervisor was killed: {alive}"
    assert not {s for s in segments if (Path("/dev/shm") / s).exists()}, "shared memory left behind"
    assert not ports_file.exists(), "the port file of a dead service was left behind"
    reader = RecordingReader(rec)                   # the recorder closed it: whole blocks, every tick up to the stall
    ticks = reader.read("ticks")["tick"]
    assert not reader.warnings and np.array_equal(ticks, np.arange(len(ticks))) and len(ticks) >= STALL_AT_TICK


def test_sigterm_to_the_supervisor_ends_a_stuck_run(tmp_path):
    """A stop request the loop cannot honour is a stall at once, whatever the configured timeout."""
    cfg = plugin_config(tmp_path, "while True: pass", 60000)
    proc = hil_run("--config", cfg, "--duration", 600, "--record", tmp_path / "run.hilrec", "--json")
    try:
        wait_until(lambda: (tmp_path / "stalled").exists(), proc, what="the plug-in to get stuck")
    finally:
        proc.send_signal(signal.SIGTERM)
    out, err = finish(proc, 45.0)                   # not the 60 s of the configured timeout
    assert proc.returncode == 4 and "the loop stalled in tick 250" in err, err
    assert json.loads(out)["stalls"][0]["killed"]


# --- the watch itself, and its metrics ------------------------------------------------------------------------

class FakeProcess:
    def __init__(self) -> None:
        self.killed = False

    def is_alive(self) -> bool:
        return not self.killed

    def kill(self) -> None:
        self.killed = True


def test_stall_watch_counts_the_stall_and_kills_after_the_grace(monkeypatch):
    from drivers.core.contract import REJECT_REASONS
    from hil.service import build as service
    from hil.service.run_result import RunResult
    from hil.service.supervisor import StallWatch
    from hil.telemetry.metrics import MetricsBlock, MetricsSchema, default_schema

    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    block = MetricsBlock.private(MetricsSchema(default_schema(["0:loopback"], list(REJECT_REASONS))))
    status = types.SimpleNamespace(ticks=0.0, state=service.STATE_WARMING, stop_request=0.0, stall_s=0.0)
    watch, proc = StallWatch(0.5, status, types.SimpleNamespace(block=block)), FakeProcess()
    for t in np.arange(100.0, 160.0, 0.05):           # a minute of warm-up (numba compiling) is no stall
        clock[0] = t
        watch.poll(proc)
    status.state = service.STATE_RUNNING
    for k in range(40):                                # ticks advance every 100 ms
        clock[0] += 0.1
        status.ticks = 25.0 * k
        watch.poll(proc)
    assert not watch.declared and not status.stop_request
    clock[0] += 0.45
    watch.poll(proc)
    assert not watch.declared
    clock[0] += 0.1
    watch.poll(proc)
    assert watch.declared and status.stop_request == 1.0 and status.stall_s > 0.5 and not proc.killed
    assert block.counter("hil_tick_stalls_total").value == 1 and block.gauge("hil_tick_stalled").value == 1
    clock[0] += StallWatch.GRACE_S
    watch.poll(proc)
    assert proc.killed
    block.gauge("hil_running").set(1.0)
    summary = watch.report(RunResult(ok=False, error="the real-time process died (exit code -9)"))
    assert not summary.ok and summary.stopped_by == "tick_stall" and summary.stalls[0]["killed"]
    assert block.gauge("hil_running").value == 0.0     # the killed loop could not say so itself
    assert summary.to_dict()["stalls"] == summary.stalls


def test_a_tick_that_outlasts_the_stall_timeout_ends_the_loop(model):
    """The loop's own backstop, for a stall that ends before the supervisor acts: no tick after it."""
    from test_engine import ConstantExcitation, FakeClock, H, SlowDriver, biceps, make_engine

    from hil.rt.loop import LoopConfig, RealtimeLoop
    from hil.rt.tick import TickBody
    fake = FakeClock()
    fake.work_ns[3] = int(0.6e9)
    engine = make_engine(model)
    driver = SlowDriver(ConstantExcitation(biceps(model), 0.3), fake, model.muscle_names)
    loop = RealtimeLoop(TickBody(engine, [driver], clock=fake.clock), LoopConfig(period_s=H, sched_fifo=False,
                        mlock=False), clock=fake.clock, wait=fake.wait, stall_timeout_s=0.5)
    summary = loop.run(8)
    driver.shutdown()
    assert summary.ticks == 4 and summary.stopped_by == "tick_stall" and summary.stall_s == pytest.approx(0.6, abs=1e-3)


def test_tick_stall_timeout_is_validated_and_defaults_to_the_watchdog_timeout(tmp_path):
    from hil.config import load_service_config
    from sim.errors import UserInputError

    def config(safety: str) -> Path:
        path = tmp_path / "c.toml"
        path.write_text(f'include = ["{CONFIGS / "loopback.toml"}"]\n[safety]\n{safety}\n')
        return path

    assert load_service_config(config("")).safety.tick_stall_timeout_s == 0.5
    assert load_service_config(config("watchdog_timeout_ms = 2500")).safety.tick_stall_timeout_s == 2.5
    assert load_service_config(config("tick_stall_timeout_ms = 800")).safety.tick_stall_timeout_s == 0.8
    with pytest.raises(UserInputError, match="tick_stall_timeout_ms"):
        load_service_config(config("tick_stall_timeout_ms = 100"))


# --- a stop of the whole process group (systemd KillMode=control-group) -------------------------------------

def test_sigterm_to_the_process_group_is_a_clean_stop(tmp_path, config_over):
    port = free_port()
    cfg = config_over("serial.toml", f"""
        [metrics]
        port = {port}
        [[driver]]
        type = "sciencemode2"
        port = "pty"
        sensor_port = "none"
        """)
    rec, ports_file = tmp_path / "run.hilrec", tmp_path / "ports.json"
    proc = hil_run("--config", cfg, "--duration", 120, "--record", rec, "--port-file", ports_file, "--json")
    wait_until(ports_file.exists, proc, what="the port file")
    wait_until(lambda: rec.exists() and len(RecordingReader(rec).read("ticks")) > 50, proc, what="ticks")
    helpers = descendants(proc.pid)
    assert {"hil-rt", "hil-recorder", "hil-link-0", "hil-exporter"} <= set(helpers.values()), helpers
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    assert "died" not in err and "restart" not in err and "Error" not in err, err
    summary = json.loads(out)
    assert summary["stopped_by"] == "signal" and summary["exporter_restarts"] == 0 and summary["exporter_deaths"] == 0
    assert not summary["problems"] and not summary["drivers_lost"] and not any(summary["records_unwritten"].values())
    reader = RecordingReader(rec)
    assert not reader.warnings and len(reader.read("ticks")) == summary["ticks"]


# --- a transport shows the stimulation as zero when the loop stops feeding it ------------------------------

def test_the_lsl_link_zeroes_the_stimulation_stream_when_the_loop_stalls(tmp_path, lsl_config):
    import uuid

    import pylsl
    from pylsl.util import LostError

    from drivers.lsl.streams import EVENTS_STREAM, STIM_STREAM
    cfg = plugin_config(tmp_path, "while True: pass", 500, more_drivers=f"""
        [[driver]]
        type = "lsl"
        api_config = "{lsl_config}"
        [driver.inlet]
        name = "nobody-{uuid.uuid4().hex[:8]}"
        """)
    proc = hil_run("--config", cfg, "--duration", 30, "--port-file", tmp_path / "ports.json")
    samples, markers = [], []
    try:
        wait_until((tmp_path / "ports.json").exists, proc, what="the port file")
        inlets = []
        for name in (STIM_STREAM, EVENTS_STREAM):
            [info] = pylsl.resolve_byprop("name", name, 1, 10.0)
            inlets.append(pylsl.StreamInlet(info, recover=False))
            inlets[-1].open_stream(5.0)
        stim, events = inlets
        while proc.poll() is None:
            try:
                samples += stim.pull_chunk(timeout=0.05, max_samples=100000)[0]
                markers += [m[0] for m in events.pull_chunk(timeout=0.0)[0]]
            except LostError:
                break
        _, err = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 4, err
    stalled = [m for m in markers if m.startswith("loop_stalled")]
    assert len(stalled) == 1, markers
    values = np.array(samples)
    assert 30.0 in values[-2] and 300.0 in values[-2] and not values[-1].any()   # 30 mA, 300 us, then zero
