"""Lab Streaming Layer transport with real pylsl on localhost: stream layouts and meta-data, the inlet's
rules (refusal, validation, a lost and returning stream), outlets and markers, the driver's link process,
and `hil run` with an LSL controller in this process, replayed bit for bit.

liblsl is kept on this machine (no multicast or broadcast on the network) by a config file written here
and named in LSLAPICFG before this process first uses LSL; the service's processes inherit it."""
from __future__ import annotations

import collections
import json
import math
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from helpers import wait_for_port_file

from drivers.core.contract import STATUS_GH_UNSTABLE, STATUS_WATCHDOG, frame_dtype
from drivers.ipc.link import AUX_CONNECTED, INBOUND_AUX_WORDS, LINK_RECORD, Inbound, reject_counts
from drivers.ipc.shm_ring import ShmRing
from drivers.lsl.inlet import RESOLVE_INTERVAL_S, CommandInlet
from drivers.lsl.streams import (
    ARM_STREAM,
    EVENTS_STREAM,
    STIM_STREAM,
    StatusEvents,
    arm_channels,
    desc_channels,
    stim_channels,
    stim_values,
)
from sim.das3.model import DOF_NAMES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pylsl(lsl_config):
    import pylsl
    return pylsl


def wait_for(condition, timeout: float = 10.0, step=None) -> None:
    """Call ``step`` (if any) until ``condition()`` holds; fail after ``timeout`` s."""
    t_end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < t_end, "timed out"
        step() if step else time.sleep(0.01)


def open_inlet(pylsl, name: str):
    """An inlet on the stream called ``name``, connected; it raises LostError once the stream is gone (with
    recovery on, liblsl's pulls can block past their timeout while it tries to reconnect)."""
    found = pylsl.resolve_byprop("name", name, 1, 10.0)
    assert found, f"no stream {name}"
    inlet = pylsl.StreamInlet(found[0], recover=False)
    inlet.open_stream(5.0)
    return inlet


def pull_all(inlet, n: int, timeout: float = 5.0):
    """At least ``n`` samples (values, timestamps) from an inlet."""
    values, stamps, t_end = [], [], time.monotonic() + timeout
    while len(stamps) < n and time.monotonic() < t_end:
        v, ts = inlet.pull_chunk(timeout=0.1)
        values += v
        stamps += ts
    return values, stamps


def markers_during(pylsl, inlet, action, timeout: float = 30.0) -> list[str]:
    """The markers an events inlet receives while ``action`` runs in a thread, up to ``run_stop`` (the
    outlets go away right after it)."""
    from pylsl.util import LostError
    thread = threading.Thread(target=action)
    thread.start()
    got, t_end = [], time.monotonic() + timeout
    try:
        while not any(m.startswith("run_stop") for m in got) and time.monotonic() < t_end:
            v, _ = inlet.pull_chunk(timeout=0.1)
            got += [s[0] for s in v]
    except LostError:
        pass
    thread.join(timeout)
    return got


# -- layouts ------------------------------------------------------------------------------------
def test_stream_layouts_and_status_markers():
    arm = arm_channels(DOF_NAMES)
    assert [c.label for c in arm] == [*DOF_NAMES, "th_plane_of_elevation", "th_elevation", "th_axial_rotation",
                                      "hand_x", "hand_y", "hand_z", "gh_stability"]
    assert {c.unit for c in arm[:14]} == {"radians"} and [c.unit for c in arm[14:17]] == ["meters"] * 3
    assert [c.type for c in arm[14:17]] == ["PositionX", "PositionY", "PositionZ"]
    stim = stim_channels(["biceps", "triceps"])
    assert [c.label for c in stim] == ["biceps_current_ma", "biceps_pulse_width_us", "biceps_frequency_hz",
                                       "triceps_current_ma", "triceps_pulse_width_us", "triceps_frequency_hz"]
    assert [c.unit for c in stim[:3]] == ["milliamperes", "microseconds", "hertz"]
    applied = np.array([[[250.0, 30.0, 40.0], [0.0, 0.0, 0.0]]])         # pulse width, current, frequency
    assert stim_values(applied, np.zeros((4, 6), np.float32)).tolist() == [[30, 250, 40, 0, 0, 0]]
    ev = StatusEvents()
    status = np.array([STATUS_WATCHDOG, STATUS_WATCHDOG, 0, STATUS_GH_UNSTABLE, 0, STATUS_WATCHDOG])
    assert ev.markers(np.arange(3), status[:3]) == [(2, "watchdog_clear tick=2")]      # the first frame: reference
    assert ev.markers(np.arange(3, 6), status[3:]) == [(0, "gh_alarm tick=3"), (1, "gh_alarm_clear tick=4"),
                                                        (2, "watchdog_trip tick=5")]


@pytest.mark.parametrize("driver, key, words", [
    ("arm_every = 0", "driver[0].arm_every", "integer in [1, 1000000]"),
    ("[driver.inlet]\nname = \"it's\"", "driver[0].inlet.name", "without quotes"),
    ("[driver.inlet]\nkind = \"x\"", "driver[0].inlet.kind", "unknown key"),
    ("[driver.inlet]\nsource_id = 7", "driver[0].inlet.source_id", "must be a stream source_id"),
    ("api_config = \"nowhere.cfg\"", "driver[0].api_config", "not found"),
    ("every = 2", "driver[0].every", "unknown key"),
])
def test_config_errors_name_the_key(config_over, driver, key, words):
    from hil.config import load_service_config
    from hil.service.build import build_tick_engine, parse_drivers
    from sim.das3.config import ConfigError
    cfg = load_service_config(config_over("lsl.toml", f"[[driver]]\ntype = \"lsl\"\n{driver}\n"))
    model, engine = build_tick_engine(cfg)
    with pytest.raises(ConfigError) as err:
        parse_drivers(cfg, model, engine)
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_config_needs_channels_and_builds_the_inlet_predicate(config_over):
    from drivers.core.interface import driver_names
    from hil.config import load_service_config
    from hil.service.build import build_tick_engine, parse_drivers
    from sim.das3.config import ConfigError
    assert "lsl" in driver_names()
    cfg = load_service_config(config_over("loopback.toml", "[[driver]]\ntype = \"lsl\"\n"))
    with pytest.raises(ConfigError, match='mode = "channels"'):
        parse_drivers(cfg, *build_tick_engine(cfg))
    for inlet, predicate in [("", "type='FESCommand'"), ('name = "dec"', "name='dec'"),
                             ('name = "dec"\ntype = "BCI"', "name='dec' and type='BCI'"),
                             ('source_id = "pc1"', "type='FESCommand' and source_id='pc1'"),
                             ('name = "dec"\nsource_id = "pc1"', "name='dec' and source_id='pc1'")]:
        cfg = load_service_config(config_over("lsl.toml", f"[[driver]]\ntype = \"lsl\"\n[driver.inlet]\n{inlet}\n"))
        (_, spec, _), = parse_drivers(cfg, *build_tick_engine(cfg))
        assert spec.endpoint_args["predicate"] == predicate
        assert spec.endpoint_args["channel_names"][3] == "biceps" and spec.endpoint_args["arm_every"] == 1


# -- the inlet, in this process ---------------------------------------------------------------------
def test_inlet_refuses_a_wrong_layout_validates_samples_and_resolves_a_returning_stream(pylsl, capfd):
    from drivers.lsl.inlet import AUX_SUPERSEDED, CommandInlet

    kind = f"FESCommandTest{uuid.uuid4().hex[:8]}"
    ring = ShmRing.create(LINK_RECORD, 4096, INBOUND_AUX_WORDS)
    inbound, events = Inbound(ring), collections.deque()
    inlet = CommandInlet(pylsl, f"type='{kind}'", ["ch1", "ch2", "ch3"], events)
    poll = lambda: inlet.poll(inbound, 0.05)      # noqa: E731
    wrong = pylsl.StreamOutlet(pylsl.StreamInfo("bad-decoder", kind, 4, 0, "double64", "bad"))   # noqa: F841
    try:
        wait_for(lambda: inlet.refused, step=poll)
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "refused LSL stream 'bad-decoder'" in err[0] and "4 double64 channels" in err[0]
        assert "expected 9 float32 channels: [current_ma, pulse_width_us, frequency_hz]" in err[0]
        assert reject_counts(ring) == {"wrong_stream": 1}
        good = pylsl.StreamOutlet(pylsl.StreamInfo("decoder", kind, 9, 0, "float32", "good"))
        wait_for(lambda: inlet.inlet is not None, step=poll)
        assert ring.aux[AUX_CONNECTED] == 1 and capfd.readouterr().err == ""      # refused once, not again
        good.push_sample([10, 200, 40, 0, 0, 0, 5.5, 100, 30])
        wait_for(lambda: ring.pending >= 3, step=poll)
        rec = ring.pop_available()
        assert rec["index"].tolist() == [0, 1, 2] and len(set(rec["seq"].tolist())) == 1
        assert rec["values"].tolist() == [[200, 10, 40, 0], [0, 0, 0, 0], [100, 5.5, 30, 0]]
        good.push_sample([math.nan] + [0] * 8)
        good.push_sample([151] + [0] * 8)                          # above 150 mA
        good.push_sample([0, 1001] + [0] * 7)                      # above 1000 us
        wait_for(lambda: sum(reject_counts(ring).values()) == 4, step=poll)
        assert reject_counts(ring) == {"wrong_stream": 1, "non_finite": 1, "out_of_range": 2} and ring.pending == 0
        good.push_chunk([[k, 100, 20] + [0] * 6 for k in (1, 2, 3)])
        time.sleep(0.3)                                            # all three in before the next pull
        poll()
        assert ring.pop_available()["values"][:, 1].tolist() == [3, 0, 0] and ring.aux[AUX_SUPERSEDED] == 2
        del good                                                   # the controller goes away
        wait_for(lambda: inlet.inlet is None, step=poll)
        assert ring.aux[AUX_CONNECTED] == 0 and ring.pop_available()["values"].tolist() == [[0] * 4] * 3
        assert [e for _, e in events][-1] == "controller_lost"
        back = pylsl.StreamOutlet(pylsl.StreamInfo("decoder", kind, 9, 0, "float32", "good2"))
        wait_for(lambda: inlet.inlet is not None, step=poll)
        back.push_sample([7] + [0] * 8)
        wait_for(lambda: ring.pending >= 3, step=poll)
        assert ring.pop_available()["values"][0, 1] == 7
        assert [e.split()[0] for _, e in events] == ["controller_refused", "controller_connected", "controller_lost",
                                                     "controller_connected"]
    finally:
        inlet.close()
        ring.release()


def test_two_streams_of_the_same_name_and_type_are_refused_on_the_events_stream_until_one_is_chosen(pylsl, capfd):
    from drivers.lsl.driver import LslEndpoint, tick_record

    kind = f"FESCommandTest{uuid.uuid4().hex[:8]}"
    a = pylsl.StreamOutlet(pylsl.StreamInfo("decoder", kind, 6, 0, "float32", f"{kind}-a"))
    b = pylsl.StreamOutlet(pylsl.StreamInfo("decoder", kind, 6, 0, "float32", f"{kind}-b"))
    ring, chosen_ring = (ShmRing.create(LINK_RECORD, 4096, INBOUND_AUX_WORDS) for _ in range(2))
    ep = LslEndpoint(list(DOF_NAMES), ["biceps", "triceps"], 0.01, f"name='decoder' and type='{kind}'")
    chosen = None
    try:
        ep.open()
        found = pylsl.resolve_bypred(f"uid='{ep.markers.get_info().uid()}'", 1, 10.0)    # this endpoint's events
        events = pylsl.StreamInlet(found[0], recover=False)
        events.open_stream(5.0)
        capfd.readouterr()
        inbound = Inbound(ring)
        wait_for(lambda: ep.inlet.ambiguous, step=lambda: ep.receive(inbound, 0.05))
        for _ in range(3):                                                  # later attempts: refused, not reported
            ep.receive(inbound, 0.05)
            time.sleep(RESOLVE_INTERVAL_S)
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "refused 2 LSL streams" in err[0] and "source_id" in err[0], err
        assert f"{kind}-a" in err[0] and f"{kind}-b" in err[0] and f"on host {a.get_info().hostname()}" in err[0]
        assert ep.inlet.inlet is None and ring.aux[AUX_CONNECTED] == 0 and reject_counts(ring) == {"wrong_stream": 1}
        ep.send_feedback(np.zeros(0, tick_record(frame_dtype(), 2)), np.zeros(INBOUND_AUX_WORDS, np.uint64))
        got, _ = pull_all(events, 1)
        assert len(got) == 1 and got[0][0].startswith("controller_ambiguous streams=2 sources="), got
        assert {f"{kind}-a@{a.get_info().hostname()}", f"{kind}-b@{a.get_info().hostname()}"} == set(
            got[0][0].split("sources=")[1].split(","))
        # source_id selects one of them
        chosen = CommandInlet(pylsl, f"name='decoder' and type='{kind}' and source_id='{kind}-b'", ["biceps", "triceps"],
                              collections.deque())
        chosen_in = Inbound(chosen_ring)
        wait_for(lambda: chosen.inlet is not None, step=lambda: chosen.poll(chosen_in, 0.05))
        b.push_sample([12, 200, 30, 0, 0, 0])
        wait_for(lambda: chosen_ring.pending >= 2, step=lambda: chosen.poll(chosen_in, 0.05))
        assert chosen_ring.pop_available()["values"][0, 1] == 12 and reject_counts(chosen_ring) == {}
        del a                                                               # one left: no longer a choice
        wait_for(lambda: ep.inlet.inlet is not None, step=lambda: ep.receive(inbound, 0.05))
        assert [e.split()[0] for _, e in ep.events] == ["controller_connected"]
        assert f"host={b.get_info().hostname()}" in ep.events[0][1]
    finally:
        if chosen is not None:
            chosen.close()
        ep.close()
        ring.release()
        chosen_ring.release()


# -- the outlets, in this process -------------------------------------------------------------------
def test_outlets_carry_meta_data_tick_timestamps_every_nth_and_markers(pylsl):
    from drivers.lsl.driver import LslEndpoint, tick_record

    ep = LslEndpoint(list(DOF_NAMES), ["biceps", "triceps"], 0.001, f"type='None{uuid.uuid4().hex}'", arm_every=2)
    ep.open()
    try:
        arm, stim, events = (open_inlet(pylsl, n) for n in (ARM_STREAM, STIM_STREAM, EVENTS_STREAM))
        info = arm.info(5.0)
        assert (info.type(), info.channel_count(), info.nominal_srate()) == ("MoCap", 18, 500.0)
        assert desc_channels(info) == list(arm_channels(DOF_NAMES))
        assert [c.label for c in desc_channels(stim.info(5.0))][:3] == ["biceps_current_ma", "biceps_pulse_width_us",
                                                                        "biceps_frequency_hz"]
        recs = np.zeros(11, tick_record(frame_dtype(), 2))
        t0 = time.monotonic_ns()
        recs["start_ns"] = t0 + np.arange(11) * 1_000_000
        recs["frame"]["tick"] = np.arange(11)
        recs["frame"]["q"][:, 9] = np.arange(11) * 0.01
        recs["frame"]["status"][:3] = STATUS_WATCHDOG
        recs["frame"]["status"][5:] = STATUS_GH_UNSTABLE
        recs["applied"][:, 0] = [250.0, 30.0, 40.0]
        recs["failed"][10] = 1
        stats = np.zeros(INBOUND_AUX_WORDS, np.uint64)
        ep.send_feedback(recs[:6], stats)
        ep.send_feedback(recs[6:], stats)
        values, stamps = pull_all(arm, 5)
        expected = recs["start_ns"][:10:2] * 1e-9 + ep.offset_s
        assert np.allclose(stamps, expected, rtol=0, atol=1e-9) and np.all(np.diff(stamps) > 0)
        assert [round(v[9], 6) for v in values] == [0.0, 0.02, 0.04, 0.06, 0.08]
        values, stamps = pull_all(stim, 10)
        assert len(values) == 10 and values[0] == [30, 250, 40, 0, 0, 0]
        got = markers_during(pylsl, events, ep.close)
        assert got == ["run_start tick=0 status=watchdog", "watchdog_clear tick=3", "gh_alarm tick=5",
                       "plant_error tick=10", "run_stop tick=9"]
    finally:
        ep.close()


# -- the driver and its link process ---------------------------------------------------------------
class Sink:
    def __init__(self) -> None:
        self.channels = []

    def channel(self, *a):
        self.channels.append(a)
        return True

    def rejects(self, *a):
        raise AssertionError(f"unexpected rejects {a}")


def test_driver_applies_the_newest_sample_and_marks_a_failed_tick(pylsl):
    from drivers.lsl.driver import LslDriver
    from hil.rt.tick import tick_dtype

    name = f"decoder-{uuid.uuid4().hex[:8]}"
    args = dict(dof_names=list(DOF_NAMES), channel_names=["biceps", "triceps"], period_s=0.01,
                predicate=f"name='{name}'")
    drv = LslDriver(args, frame_dtype(), 2)
    try:
        events = open_inlet(pylsl, EVENTS_STREAM)
        ctl = pylsl.StreamOutlet(pylsl.StreamInfo(name, "FESCommand", 6, 0, "float32", name))
        wait_for(drv.connected)
        for k in range(1, 5):                                   # pulled one by one: four samples in the ring
            ctl.push_sample([k, 100, 20, 0, 0, 0])
            wait_for(lambda: drv.stats["link_frames_in"] == k)
        ctl.push_chunk([[5, 100, 20, 0, 0, 0], [6, 100, 20, 0, 0, 0]])  # one pull: the link keeps the newest
        wait_for(lambda: drv.stats["link_frames_in"] == 6)
        sink, t0 = Sink(), time.monotonic_ns()
        drv.fetch(0, t0, sink)                                  # the newest sample only reaches the loop
        assert [c[2:] for c in sink.channels] == [(0, 100.0, 6.0, 20.0, 0), (1, 0.0, 0.0, 0.0, 0)]
        assert drv.stats["samples_superseded"] == 5 and drv.max_log_entries(1) < 30
        rec = np.zeros(1, tick_dtype(2, 1, frame_dtype()))
        rec["start_ns"], rec["frame"]["tick"] = t0, 0
        rec["applied"][0, 0] = [100.0, 5.0, 20.0, 0.0]
        drv.on_tick(rec, None, 0)
        drv.fetch(1, t0 + 10_000_000, sink)                     # tick 1 never finishes: its engine step raised
        got = markers_during(pylsl, events, drv.shutdown)
        assert got[-3:] == ["run_start tick=0 status=none", "plant_error tick=1", "run_stop tick=0"], got
    finally:
        drv.shutdown()
    assert not drv.link_alive


# -- end to end ---------------------------------------------------------------------------------------
def read_until_run_stop(arm, events, timeout: float = 60.0):
    """(arm values, arm timestamps, markers) until the ``run_stop`` marker (the outlets then go away)."""
    from pylsl.util import LostError
    values, stamps, got, t_end = [], [], [], time.monotonic() + timeout
    try:
        while not any(m.startswith("run_stop") for m in got) and time.monotonic() < t_end:
            v, ts = arm.pull_chunk(max_samples=100000)
            values, stamps = values + v, stamps + ts
            m, _ = events.pull_chunk(timeout=0.05)
            got += [x[0] for x in m]
        v, ts = arm.pull_chunk(timeout=0.1, max_samples=100000)
        values, stamps = values + v, stamps + ts
    except LostError:
        pass
    return values, stamps, got


def test_hil_run_with_an_lsl_controller_records_and_replays_bit_identically(pylsl, lsl_config, tmp_path, config_over):
    """`hil run` on configs/lsl.toml; this process is the controller (biceps at 60 mA for 2 s, one NaN and
    one out-of-range sample), reads the arm's stream and the events, and then stops: the watchdog trips."""
    name = f"decoder-{uuid.uuid4().hex[:8]}"
    cfg = config_over("lsl.toml", f"""
        [metrics]
        enabled = false
        [[driver]]
        type = "lsl"
        api_config = "{lsl_config}"
        [driver.inlet]
        name = "{name}"
        """)
    ctl = pylsl.StreamOutlet(pylsl.StreamInfo(name, "FESCommand", 24, 0, "float32", name))
    rec, ports = tmp_path / "run.hilrec", tmp_path / "ports.json"
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "6", "--json",
                            "--record", str(rec), "--port-file", str(ports)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert wait_for_port_file(ports, hil)["0:lsl"] == {"inlet": f"name='{name}'",
                                                           "outlets": "fes-hil-arm, fes-hil-stim, fes-hil-events"}
        arm, events = open_inlet(pylsl, ARM_STREAM), open_inlet(pylsl, EVENTS_STREAM)
        labels = desc_channels(arm.info(5.0))
        assert [c.label for c in labels][9:11] == ["ELx", "PSy"] and labels[9].unit == "radians"
        assert [(c.label, c.unit) for c in labels[-4:-1]] == [("hand_x", "meters"), ("hand_y", "meters"),
                                                              ("hand_z", "meters")]
        first, _ = arm.pull_sample(timeout=10.0)                 # the run has started: then the controller
        assert first is not None
        sample = np.zeros(24, np.float32)
        sample[9:12] = [60, 250, 40]                              # biceps: 60 mA, 250 us, 40 Hz
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            ctl.push_sample(sample)
            time.sleep(0.02)
        ctl.push_sample([math.nan] * 24)
        ctl.push_sample(np.full(24, 500, np.float32))
        time.sleep(0.1)
        del ctl                                                   # the controller stops
        values, stamps, got = read_until_run_stop(arm, events)
        out, err = hil.communicate(timeout=60)
    finally:
        if hil.poll() is None:
            hil.kill()
    assert hil.returncode == 0, err
    summary = json.loads(out)
    names = [m.split()[0] for m in got]
    assert names.index("watchdog_clear") < names.index("controller_lost") < names.index("watchdog_trip")
    assert names[-1] == "run_stop" and summary["watchdog_trips"] == 1
    assert summary["commands_rejected"] == {"0:non_finite": 1, "0:out_of_range": 1}
    from drivers.core.contract import KIND_CHANNEL
    from hil.recording.hilrec import RecordingReader
    reader = RecordingReader(str(rec))
    ticks, commands = reader.read("ticks"), reader.read("commands")
    accepted = commands[commands["status"] == 0]
    assert len(accepted) == summary["commands_received"] > 100 and set(accepted["kind"].tolist()) == {KIND_CHANNEL}
    assert ticks["applied"][:, 3, 1].max() == 60 and ticks["applied"][-1, 3, 1] == 0
    # arm samples: one per tick from the inlet's connection on, stamped with the tick's start (LSL clock)
    starts = ticks["start_ns"] * 1e-9
    k = np.searchsorted(starts, stamps[0] - 1e-4)
    assert len(stamps) > 500 and np.all(np.diff(stamps) > 0)
    assert np.allclose(stamps, starts[k:k + len(stamps)], rtol=0, atol=1e-4)
    assert np.allclose(np.array(values)[:, 9], ticks["frame"]["q"][k:k + len(stamps), 9], rtol=1e-6, atol=1e-6)
    replay = subprocess.run([sys.executable, "-m", "hil", "replay", str(rec), "--json"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert replay.returncode == 0 and json.loads(replay.stdout)["identical"] is True, replay.stdout + replay.stderr
