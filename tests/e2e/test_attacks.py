"""The service attacked as a hostile or broken controller and a careless operator would (issue 12): each test
reproduces one defect found that way, against the real service (``hil run`` in its own processes, real ptys,
a real CAN bus emulation, real files), and checks the behaviour the README's "Safety and failure behaviour"
table promises."""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import serial
from helpers import (
    CONFIGS,
    descendants,
    file_size_limit,
    free_port,
    hil,
    mount_small_tmpfs,
    shared_memory_of,
    start_hil,
)
from helpers import wait_for_port_file as wait_for_file

from drivers.can.local_bus import host_local_group
from drivers.core.contract import KIND_CHANNEL, KIND_DRIVER_LOST, KIND_REJECTS
from drivers.stimulators.rehastim2.codec import (
    CMD_INIT,
    CMD_INIT_CLM,
    CMD_START_CLM,
    CMD_WATCHDOG,
    FrameParser,
    encode_frame,
)
from hil.recording.hilrec import RecordingReader

ROOT = Path(__file__).resolve().parents[2]
DBC = ROOT / "configs" / "fes-hil.dbc"
BICEPS = 3          # channel 4 of the default map, 0-based


# --- helpers ---------------------------------------------------------------------------------------

def wait_for_ticks(rec: Path, n: int = 10, timeout: float = 60.0) -> None:
    """Until the recording holds ``n`` ticks: the loop runs (the ports are announced just before it starts). A
    recording's name appears with its header in it (sim.output_file.create_with_start), so a header error here is
    a defect, not a race."""
    t_end = time.monotonic() + timeout
    while _ticks_recorded(rec) < n:
        assert time.monotonic() < t_end, "the loop did not start"
        time.sleep(0.05)


def _ticks_recorded(rec: Path) -> int:
    return len(RecordingReader(rec).read("ticks")) if rec.exists() else 0


def red_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def wait_for_process(parent: int, name: str, timeout: float = 300.0) -> int:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        pids = [p for p, n in descendants(parent).items() if n == name]
        if pids:
            return pids[0]
        time.sleep(0.05)
    raise AssertionError(f"no process {name} below {parent}: {descendants(parent)}")


def serial_config(config_over, extra: str = "", metrics_port: int | None = None) -> Path:
    metrics = "enabled = false" if metrics_port is None else f"port = {metrics_port}"
    return config_over("serial.toml", f"""
        [metrics]
        {metrics}
        [[driver]]
        type = "sciencemode2"
        port = "pty"
        sensor_port = "none"
        """ + extra)


@contextlib.contextmanager
def serial_run(tmp_path: Path, cfg: Path, duration: float, channel: int = BICEPS + 1):
    """``hil run`` of a serial config and a raw client that has set up a list of one channel (1-based);
    yields (process, client, recording) once the loop runs; the client is closed on the way out."""
    rec, ports_file = tmp_path / "run.hilrec", tmp_path / "ports.json"
    proc = start_hil("run", "--config", cfg, "--duration", duration, "--json", "--record", rec, "--port-file", ports_file)
    client = RawStimulatorClient(wait_for_file(ports_file, proc)["0:sciencemode2"]["stimulator"])
    try:
        client.connect(channel)
        wait_for_ticks(rec)
        yield proc, client, rec
    finally:
        client.close()


class RawStimulatorClient:
    """A ScienceMode2 client written byte by byte on the emulated stimulator's pty; a thread reads and
    parses the replies so the pty never fills."""

    def __init__(self, port: str) -> None:
        self.tty = serial.Serial(port, timeout=0.1)
        self.parser = FrameParser()
        self.frames: list = []
        self.counter = 0
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.frames += [f for f in self.parser.feed(self.tty.read(4096)) if hasattr(f, "command")]
            except (serial.SerialException, OSError, TypeError):
                return

    def frame(self, command: int, data: bytes = b"") -> bytes:
        self.counter = self.counter % 250 + 1
        return encode_frame(self.counter, command, data)

    def connect(self, channel: int) -> None:
        """Answer the device's Init, then a channel list of one channel (1-based), period 20 ms."""
        t_end = time.monotonic() + 30
        while not any(f.command == CMD_INIT for f in self.frames):
            assert time.monotonic() < t_end, "no Init from the emulated stimulator"
            time.sleep(0.01)
        init = [f for f in self.frames if f.command == CMD_INIT][-1]
        self.tty.write(encode_frame(init.counter, 2, b"\x00"))
        self.tty.write(self.frame(CMD_INIT_CLM, bytes([0, 1 << (channel - 1), 0, 1, 0, 38, 0])))

    def start(self, amplitude_ma: int, pulse_width_us: int = 300) -> bytes:
        return self.frame(CMD_START_CLM, bytes([0, pulse_width_us >> 8, pulse_width_us & 0xFF, amplitude_ma]))

    def watchdog(self) -> bytes:
        return self.frame(CMD_WATCHDOG)

    def close(self) -> None:
        self._stop.set()
        self._reader.join(2)
        self.tty.close()


# --- 1. an accepted command never vanishes from the recording -----------------------------------------

def test_overflow_burst_keeps_every_accepted_command_and_replays(tmp_path, config_over):
    """Hundreds of garbage bytes plus a valid update and a watchdog frame in one write land in one tick:
    the link counts the garbage, every accepted command is recorded, and the run replays bit-identically."""
    rng = random.Random(12)
    with serial_run(tmp_path, serial_config(config_over), 5, channel=4) as (proc, client, rec):
        for i in range(24):
            client.tty.write(b"\xf0\x00" * rng.randint(260, 480) + client.start(10 + i) + client.watchdog())
            time.sleep(0.1)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    cmds = RecordingReader(rec).read("commands")
    accepted = cmds[cmds["status"] == 0]
    assert len(accepted) == summary["commands_received"] and summary["commands_unrecorded"] == 0
    biceps = accepted[(accepted["kind"] == KIND_CHANNEL) & (accepted["index"] == BICEPS)]
    assert [v for v in biceps["values"][:, 1] if v > 0] == list(range(10, 34))    # every update, in order
    rejected = cmds[cmds["kind"] == KIND_REJECTS]
    assert rejected["values"][:, 0].sum() == sum(summary["commands_rejected"].values()) > 0
    assert_one_count_per_reason_and_tick(rejected)
    ticks = RecordingReader(rec).read("ticks")
    assert ticks["commands_unrecorded"].sum() == 0
    replay = json.loads(hil("replay", rec, "--json").stdout)
    assert replay["identical"] and replay["commands_unrecorded"] == 0, replay


def assert_one_count_per_reason_and_tick(rejects: np.ndarray) -> None:
    """Rejects reach the loop as counts: at most one log entry per reason and tick, whatever the flood."""
    keys = rejects["tick"] * 256 + rejects["status"]
    assert len(np.unique(keys)) == len(keys), "rejects must reach the loop as one count per reason and tick"
    assert np.all(rejects["values"][:, 0] >= 1)


# --- 2. a recorder that dies, or a full disk -------------------------------------------------------------

@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_recorder_killed_is_reported_counted_and_exits_non_zero(tmp_path, config_over, policy):
    cfg = config_over("elbow-hold.toml", f"""
        [metrics]
        enabled = false
        [recording]
        on_failure = "{policy}"
        """)
    rec = tmp_path / "run.hilrec"
    proc = start_hil("run", "--config", cfg, "--duration", "6", "--json", "--record", rec)
    recorder = wait_for_process(proc.pid, "hil-recorder")
    while not rec.exists() or rec.stat().st_size < 100_000:
        time.sleep(0.05)
    os.kill(recorder, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, err
    summary = json.loads(out)
    lines = red_lines(err)
    assert len(lines) == 1 and "incomplete" in lines[0] and "died" in lines[0], err
    assert "Traceback" not in err
    in_file = len(RecordingReader(rec).read("ticks"))
    assert summary["records_unwritten"]["ticks"] == summary["ticks"] - in_file > 0
    if policy == "stop":
        assert summary["stopped_by"] == "recording_failed" and summary["ticks"] < 1500
    else:
        assert summary["stopped_by"] == "duration" and summary["ticks"] == 1500


def test_full_disk_stops_the_run_with_one_red_line(tmp_path, config_over):
    """On a small tmpfs where one can be mounted; elsewhere a file-size limit gives the same write error."""
    cfg = config_over("elbow-hold.toml", """
        [metrics]
        enabled = false
        """)
    disk = tmp_path / "disk"
    mounted = mount_small_tmpfs(disk, "160k")
    try:
        extra = {} if mounted else {"preexec_fn": file_size_limit(160_000)}
        out = hil("run", "--config", cfg, "--duration", "4", "--json", "--record", disk / "run.hilrec", **extra)
        assert out.returncode == 5, out.stderr
        lines = red_lines(out.stderr)
        assert len(lines) == 1 and "incomplete" in lines[0] and "Traceback" not in out.stderr, out.stderr
        assert ("No space left" if mounted else "too large") in lines[0]
        summary = json.loads(out.stdout)
        assert summary["stopped_by"] == "recording_failed"
        reader = RecordingReader(disk / "run.hilrec")
        assert summary["records_unwritten"]["ticks"] == summary["ticks"] - len(reader.read("ticks")) > 0
    finally:
        if mounted:
            subprocess.run(["umount", str(disk)])


# --- 3. a read-only recording directory ----------------------------------------------------------------

def test_read_only_recording_directory_fails_at_once(tmp_path, config_over):
    cfg = config_over("elbow-hold.toml", """
        [metrics]
        enabled = false
        """)
    ro = tmp_path / "ro"
    mounted = mount_small_tmpfs(ro, "64k", "ro")
    if not mounted:
        ro.mkdir(exist_ok=True)
        ro.chmod(0o555)
    try:
        t0 = time.monotonic()
        out = hil("run", "--config", cfg, "--duration", "2", "--record", ro / "run.hilrec", timeout=60)
        elapsed = time.monotonic() - t0
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(red_lines(out.stderr)) == 1 and f"--record {ro / 'run.hilrec'}: cannot write in" in out.stderr
        assert elapsed < 15, "the check comes before the warm-up"
        # behind the command line's check, the recorder's own start-up says so at once too
        from hil.service.supervisor import supervise
        result = supervise(str(cfg), 2.0, ro / "run.hilrec")
        assert not result.ok and result.config_error and "cannot write recording" in result.error, result.error
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)])


# --- 4. the supervisor killed ---------------------------------------------------------------------------

def test_supervisor_sigkill_stops_every_process_and_leaves_no_shared_memory(tmp_path, config_over):
    cfg = serial_config(config_over, metrics_port=free_port())
    rec, ports_file = tmp_path / "run.hilrec", tmp_path / "ports.json"
    proc = start_hil("run", "--config", cfg, "--record", rec, "--port-file", ports_file)   # no --duration
    wait_for_file(ports_file, proc)
    helpers = descendants(proc.pid)
    assert {"hil-rt", "hil-recorder", "hil-link-0", "hil-exporter"} <= set(helpers.values()), helpers
    wait_for_ticks(rec, 100)
    segments = shared_memory_of([proc.pid, *helpers])     # this run's own: other tests may run a service too
    proc.kill()
    proc.wait(10)
    t_end = time.monotonic() + 10
    alive = {p: n for p, n in helpers.items() if Path(f"/proc/{p}").exists()}
    while alive and time.monotonic() < t_end:
        time.sleep(0.1)
        alive = {p: n for p, n in alive.items() if Path(f"/proc/{p}").exists()}
    assert not alive, f"still running after the supervisor was killed: {alive}"
    assert segments and not {s for s in segments if (Path("/dev/shm") / s).exists()}, "shared memory left behind"
    assert not ports_file.exists(), "the port file of a dead service was left behind"
    reader = RecordingReader(rec)                       # closed properly: nothing torn, replays
    assert not reader.truncated and len(reader.read("ticks")) > 50
    assert json.loads(hil("replay", rec, "--json").stdout)["identical"]




# --- 5. no stimulation from a heartbeat after a watchdog trip --------------------------------------------

def _amplitudes_after(rec: Path, receive_kind_tick) -> np.ndarray:
    ticks = RecordingReader(rec).read("ticks")
    return ticks["applied"][ticks["tick"] > receive_kind_tick, BICEPS, 1]


def test_heartbeat_after_a_can_watchdog_trip_does_not_switch_stimulation_back_on(tmp_path, config_over):
    import can
    import cantools
    group = host_local_group(random.randint(1, 0xFFFF))
    cfg = config_over("can.toml", f"""
        [metrics]
        enabled = false
        [safety]
        watchdog_timeout_ms = 200
        [[driver]]
        type = "can"
        interface = "udp_multicast"
        channel = "{group}"
        dbc = "{DBC}"
        """)
    rec, ports_file = tmp_path / "run.hilrec", tmp_path / "ports.json"
    proc = start_hil("run", "--config", cfg, "--duration", "3", "--json", "--record", rec, "--port-file", ports_file)
    wait_for_file(ports_file, proc)
    wait_for_ticks(rec)
    db = cantools.database.load_file(str(DBC))
    bus = can.Bus(interface="udp_multicast", channel=group)
    try:
        stim, beat = db.get_message_by_name("FES_StimCmd"), db.get_message_by_name("FES_Heartbeat")
        bus.send(can.Message(arbitration_id=stim.frame_id, is_extended_id=False, data=stim.encode(dict(
            channel=BICEPS + 1, mode=0, enable=1, counter=1, pulse_width=300, amplitude=70, frequency=40))))
        time.sleep(0.6)                                          # silent: the watchdog trips
        for counter in range(1, 20):                             # heartbeats only
            bus.send(can.Message(arbitration_id=beat.frame_id, is_extended_id=False,
                                 data=beat.encode(dict(state=0, counter=counter))))
            time.sleep(0.05)
    finally:
        bus.shutdown()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["watchdog_trips"] >= 1
    _check_zero_after_trip(rec)


def _check_zero_after_trip(rec: Path) -> None:
    """70 mA was applied before the trip; after the first heartbeat that follows it, stimulation stays 0."""
    reader = RecordingReader(rec)
    ticks, cmds = reader.read("ticks"), reader.read("commands")
    amp = ticks["applied"][:, BICEPS, 1]
    assert amp.max() >= 60
    trip = int(np.flatnonzero((ticks["frame"]["status"] & 1) & (ticks["tick"] > np.argmax(amp)))[0])
    beats = cmds[(cmds["kind"] == 3) & (cmds["tick"] > trip)]
    assert len(beats) >= 5, "heartbeats after the trip were accepted"
    assert np.all(amp[ticks["tick"] >= trip] == 0.0), "a heartbeat switched the old stimulation back on"
    assert json.loads(hil("replay", rec, "--json").stdout)["identical"]


def test_watchdog_frame_after_a_serial_watchdog_trip_does_not_switch_stimulation_back_on(tmp_path, config_over):
    """The loop's watchdog (300 ms) trips long before the emulator's client timeout (2.5 s) would zero the
    channels: a Watchdog frame after the trip must not bring the 70 mA back."""
    cfg = serial_config(config_over, """
        [safety]
        watchdog_timeout_ms = 300
        """)
    with serial_run(tmp_path, cfg, 3) as (proc, client, rec):
        client.tty.write(client.start(70))
        time.sleep(0.8)                                          # silent: the loop's watchdog trips
        for _ in range(15):
            client.tty.write(client.watchdog())
            time.sleep(0.05)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["watchdog_trips"] >= 1
    _check_zero_after_trip(rec)


# --- 7. a reject flood costs the loop a few calls per tick -----------------------------------------------

def test_reject_flood_reaches_the_loop_as_counts_per_tick(tmp_path, config_over):
    """Garbage written as fast as the pty takes it into a 1 kHz run: every rejected frame is counted (link,
    summary and recording agree), and a tick hands the loop at most one entry per reject reason."""
    cfg = serial_config(config_over, """
        [loop]
        period_ms = 1.0
        """)
    rng = random.Random(7)
    with serial_run(tmp_path, cfg, 3) as (proc, client, rec):
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:
            client.tty.write(bytes(rng.getrandbits(8) for _ in range(2000)) + b"\xf0\x00" * 500)
            client.tty.write(client.watchdog())
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    cmds, ticks = RecordingReader(rec).read("commands"), RecordingReader(rec).read("ticks")
    rejects = cmds[cmds["kind"] == KIND_REJECTS]
    n_rejected = sum(summary["commands_rejected"].values())
    assert n_rejected > 1000 and rejects["values"][:, 0].sum() == n_rejected
    assert n_rejected == summary["drivers"]["0:sciencemode2"]["link_rejects"]
    assert_one_count_per_reason_and_tick(rejects)
    flooded = np.isin(ticks["tick"], rejects["tick"])
    print(f"tick body p50/p99 (µs): flooded {np.percentile(ticks['tick_ns'][flooded], [50, 99]) / 1e3}, "
          f"quiet {np.percentile(ticks['tick_ns'][~flooded], [50, 99]) / 1e3}, misses {summary['deadline_misses']}")


# --- 9. a killed link process ----------------------------------------------------------------------------

def test_killed_link_is_detected_zeroes_its_stimulation_and_is_reported(tmp_path, config_over):
    """The serial watchdog (2.5 s) is longer than the rest of the run: only the detection of the dead link
    can switch the 70 mA off."""
    with serial_run(tmp_path, serial_config(config_over), 3) as (proc, client, rec):
        client.tty.write(client.start(70))
        time.sleep(0.3)
        os.kill(wait_for_process(proc.pid, "hil-link-0"), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, err
    lines = red_lines(err)
    assert len(lines) == 1 and "0:sciencemode2" in lines[0] and "died" in lines[0] and "Traceback" not in err, err
    summary = json.loads(out)
    assert summary["drivers_lost"] == ["0:sciencemode2"]
    assert summary["drivers"]["0:sciencemode2"]["connected"] is False
    reader = RecordingReader(rec)
    ticks, cmds = reader.read("ticks"), reader.read("commands")
    [lost] = cmds[cmds["kind"] == KIND_DRIVER_LOST]
    amp = ticks["applied"][:, BICEPS, 1]
    assert amp[ticks["tick"] < lost["tick"]].max() == 70
    assert np.all(amp[ticks["tick"] >= lost["tick"]] == 0) and ticks["tick"][-1] - lost["tick"] > 200
    replay = json.loads(hil("replay", rec, "--json").stdout)
    assert replay["identical"], replay


# --- 10. a killed metrics exporter ----------------------------------------------------------------------

def _scrape(port: int) -> str | None:
    import urllib.request
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None


def _metric(text: str, name: str) -> float:
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def run_with_metrics(tmp_path: Path, config_over, duration: float):
    """``hil run`` of the elbow-hold config with metrics on a free port; (process, port, exporter pid) once
    the loop runs."""
    port = free_port()
    cfg = config_over("elbow-hold.toml", f"""
        [metrics]
        port = {port}
        """)
    proc = start_hil("run", "--config", cfg, "--duration", duration, "--json", "--record", tmp_path / "run.hilrec")
    exporter = wait_for_process(proc.pid, "hil-exporter")
    wait_for_ticks(tmp_path / "run.hilrec")
    return proc, port, exporter


def test_killed_exporter_is_restarted_and_counted(tmp_path, config_over):
    proc, port, exporter = run_with_metrics(tmp_path, config_over, 5)
    os.kill(exporter, signal.SIGKILL)
    t_end, text = time.monotonic() + 20, None
    while text is None or _metric(text, "hil_exporter_restarts_total") != 1:   # a scrape waiting in the held
        assert time.monotonic() < t_end and proc.poll() is None, "the exporter was not restarted"  # socket may
        time.sleep(0.2)                                                  # be answered just before the count
        text = _scrape(port)
    ticks = _metric(text, "hil_ticks_total")
    time.sleep(0.5)
    assert _metric(_scrape(port), "hil_ticks_total") > ticks > 0     # the counters went on through the restart
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    received = next(line for line in text.splitlines() if line.startswith("hil_commands_received_total{"))
    assert 0 < float(received.split()[-1]) <= summary["commands_received"]   # the engine counts in the block
    assert summary["exporter_restarts"] == 1 and summary["exporter_deaths"] == 1
    assert "metrics exporter died" in err


def test_no_process_can_take_the_metrics_port_while_the_exporter_restarts(tmp_path, config_over):
    """The supervisor holds the listening socket for the whole run: with the exporter killed, another process
    cannot bind its port (it could before, and the restart then failed), and the restart serves on it."""
    import socket
    proc, port, exporter = run_with_metrics(tmp_path, config_over, 4)
    os.kill(exporter, signal.SIGKILL)
    t_end, squatter = time.monotonic() + 1.0, socket.socket()
    try:
        while time.monotonic() < t_end:
            with pytest.raises(OSError):
                squatter.bind(("127.0.0.1", port))
            time.sleep(0.001)
    finally:
        squatter.close()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not red_lines(err), err
    assert json.loads(out)["exporter_restarts"] == 1


def test_exporter_that_cannot_be_restarted_is_reported_and_exits_5(monkeypatch, capsys):
    """A restart that fails (its process cannot start) is retried later, and the run ends with a problem, which
    `hil run` turns into exit status 5."""
    import typer

    from hil.cli.run import _run_exit
    from hil.config import load_service_config
    from hil.service import supervisor as supervisor_module
    from hil.service.run_result import RunResult
    from hil.service.supervisor import MetricsHost
    from hil.telemetry.exporter import MetricsError
    from hil.telemetry.metrics_port import MetricsPort
    cfg = load_service_config(str(CONFIGS / "elbow-hold.toml"))
    host = MetricsHost(cfg, MetricsPort(0))
    try:
        host.start()
        host.proc.kill()
        host.proc.join(5.0)

        def cannot_start(*_args, **_kwargs):
            raise MetricsError("the metrics exporter did not start")
        monkeypatch.setattr(supervisor_module, "start_exporter", cannot_start)
        host.check()
        assert host.proc is None and host.failures == ["the metrics exporter did not start"]
        assert host.restarts.value == 0 and host.deaths == 1
        summary = RunResult(ok=True, stopped_by="duration")
        host.report(summary)
    finally:
        host.close()
    assert len(summary.problems) == 1 and "metrics were not exported" in summary.problems[0]
    with pytest.raises(typer.Exit) as exit_:
        _run_exit(summary)
    assert exit_.value.exit_code == 5
    assert "next try in 1 s" in capsys.readouterr().err


# --- 11. a plug-in whose return raises while it is read (issue 34) ---------------------------------------

BROKEN_PLUGIN = """
from drivers.controllers.plugin import ChannelCommand, Controller
class Loud(ChannelCommand):
    @property
    def amplitude_ma(self):
        raise RuntimeError("field boom")
def commands():
    yield ChannelCommand(4, 300.0, 40.0, 40.0)
    raise RuntimeError("generator boom")
class Plugin(Controller):
    max_commands = MAX_COMMANDS
    def step(self, tick, time_s, frame):
        if time_s < 0.4:
            return [ChannelCommand(4, 300.0, 40.0, 40.0)]
        if time_s < 0.8:
            self.max_commands = "many"
            return commands()
        return [Loud(4, 300.0, 40.0, 40.0)]
"""


def test_plugin_faults_inside_its_return_are_counted_and_the_watchdog_decides(tmp_path, config_over):
    (tmp_path / "plugin.py").write_text(BROKEN_PLUGIN.replace("MAX_COMMANDS", "2"))
    cfg = config_over("elbow-hold.toml", """
        [metrics]
        enabled = false
        [[driver]]
        type = "loopback"
        controller = "plugin.py:Plugin"
        """)
    out = hil("run", "--config", cfg, "--duration", 1.5, "--json")
    assert out.returncode == 0 and not red_lines(out.stderr), out.stderr
    summary = json.loads(out.stdout)
    assert set(summary["commands_rejected"]) == {"0:controller_error"} and summary["watchdog_trips"] == 1
    assert summary["commands_rejected"]["0:controller_error"] >= 10                   # every call from 0.4 s on
    assert out.stderr.count("generator boom") == 1 and out.stderr.count("field boom") == 1, out.stderr
    (tmp_path / "plugin.py").write_text(BROKEN_PLUGIN.replace("MAX_COMMANDS", "10**10"))
    for command in ("check-config", "run"):
        out = hil(command, *(["--config"] if command == "run" else []), cfg, *(["--duration", 1] if command == "run" else []))
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert red_lines(out.stderr) == out.stderr.strip().splitlines() and len(red_lines(out.stderr)) == 1
        assert "driver[0].controller" in out.stderr and "max_commands = 10000000000 is outside 1..4096" in out.stderr


# --- the same rules at the engine, without processes --------------------------------------------------

def _engine(model, timeout_s=0.02, log_capacity=4096):
    from hil.rt.engine import TickEngine
    from hil.rt.sensor import SensorModel, SensorModelConfig
    from hil.safety.table import SafetyConfig
    from sim.das3.plant import Plant
    return TickEngine(Plant(model, step_s=0.004), None, SafetyConfig(watchdog_timeout_s=timeout_s),
                      SensorModel(SensorModelConfig()), 0.004, 1, ("bad_frame",), log_capacity=log_capacity)


def test_engine_forgets_latched_stimulation_when_the_watchdog_trips(model):
    engine = _engine(model)
    engine.begin(0)
    engine.excitation(0, 0, 5, 0.8)
    engine.step()
    assert engine.u[5] == 0.8
    for tick in range(1, 8):                 # silent: trips after 5 ticks
        engine.begin(tick)
        engine.step()
    assert engine.watchdog.tripped and engine.u[5] == 0.0
    engine.begin(8)
    engine.heartbeat(0, 0)                   # alive again, but no new command
    engine.step()
    assert not engine.watchdog.tripped and engine.u[5] == 0.0
    engine.begin(9)
    engine.excitation(0, 0, 5, 0.3)          # a new command switches it on
    engine.step()
    assert engine.u[5] == 0.3


def test_engine_lost_driver_zeroes_only_what_that_driver_latched(model):
    engine = _engine(model, timeout_s=1.0)
    engine.begin(0)
    engine.excitation(0, 0, 5, 0.8)
    engine.excitation(1, 0, 6, 0.4)
    engine.step()
    engine.begin(1)
    engine.driver_lost(0, 0)
    engine.step()
    assert engine.u[5] == 0.0 and engine.u[6] == 0.4 and engine.drivers_lost == {0: 1}
    assert engine.log[engine.n_log - 1]["kind"] == KIND_DRIVER_LOST


def test_commands_beyond_the_log_are_counted_and_replay_warns(model):
    from hil.recording.replay import completeness
    engine = _engine(model, log_capacity=3)
    engine.begin(0)
    for m in range(5):
        engine.excitation(0, 0, m, 0.1)
    engine.step()
    assert engine.n_log == 3 and engine.unlogged_tick == 2
    ticks = np.zeros(4, [("tick", "<i8"), ("commands_unrecorded", "<i8")])
    ticks["tick"] = (0, 1, 3, 4)
    ticks["commands_unrecorded"] = (0, 2, 0, 1)
    doc = completeness(ticks, [])
    assert doc["commands_unrecorded"] == 3 and doc["first_unrecorded_tick"] == 1 and doc["ticks_missing"] == 1
    assert len(doc["warnings"]) == 2


def test_log_is_sized_for_the_drivers_worst_case(model):
    from drivers.ipc.link import MAX_RECORDS_PER_FETCH, LinkDriver
    from hil.service.build import muscle_groups
    groups = muscle_groups(model.muscle_names)
    largest = max(len(g) for g in groups.values())

    class FakeLink:                           # only the sizing rule of LinkDriver, without a process
        group_names = tuple(groups)
        max_log_entries = LinkDriver.max_log_entries
    engine = _engine(model)
    engine.groups = groups
    engine.size_log([FakeLink(), FakeLink()])
    assert engine.log.shape[0] >= 2 * MAX_RECORDS_PER_FETCH * largest
