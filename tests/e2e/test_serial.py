"""Serial transport: the ScienceMode2 emulator on a pseudo-terminal, driven by an unmodified pysciencemode
Rehastim2 client in its own process, and the sensor stream with its reader."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import serial
from helpers import SensorFrames, wait_for_port_file

from drivers.core.contract import frame_dtype
from drivers.stimulators.rehastim2.codec import CMD_INIT, CMD_START_CLM_ACK, FrameParser, encode_frame
from drivers.stimulators.rehastim2.driver import ScienceModeEndpoint
from drivers.stimulators.sensor_stream import SensorStreamReader, crc16, encode_packet, read_frames

ROOT = Path(__file__).resolve().parents[2]


def test_crc16_check_value():
    assert crc16(b"123456789") == 0x29B1


def test_sensor_stream_round_trip_resync_and_errors():
    frames = np.zeros(3, frame_dtype())
    frames["tick"] = (5, 6, 7)
    frames["q"][:, 9] = (0.1, 0.2, 0.3)
    packets = [encode_packet(f.tobytes(), 40 + i) for i, f in enumerate(frames)]
    corrupt = bytearray(packets[1])
    corrupt[40] ^= 0xFF
    stream = b"junk\xa5" + packets[0] + bytes(corrupt) + b"\xa5\x5a\x01\x05\x00" + packets[2]
    reader = SensorStreamReader()
    got = [item for i in range(0, len(stream), 7) for item in reader.feed(stream[i:i + 7])]
    assert [(e, int(f["tick"])) for e, f in got] == [(40, 5), (42, 7)]
    assert got[1][1]["q"][9] == 0.3 and got[1][1].tobytes() == frames[2].tobytes()
    assert reader.crc_errors == 1 and reader.length_errors == 1 and reader.skipped_bytes > 0


def test_endpoint_on_a_pty_answers_and_streams(tmp_path):
    """The link-side endpoint in this process: Init on the pty, a raw ScienceMode2 session, sensor packets."""
    from drivers.ipc.link import INBOUND_AUX_WORDS, KIND_CHANNEL, LINK_RECORD, Inbound
    from drivers.ipc.shm_ring import ShmRing
    ring = ShmRing.create(LINK_RECORD, 1024, INBOUND_AUX_WORDS)
    ep = ScienceModeEndpoint("pty", "pty", channel_map=[0, 1, 2, 3, -1, -1, -1, -1], client_timeout_s=0.5)
    ports = ep.open()
    stop = threading.Event()
    thread = threading.Thread(target=ep.receive_forever, args=(Inbound(ring), stop), daemon=True)
    thread.start()
    client = serial.Serial(ports["stimulator"], timeout=0.5)
    sensors = serial.Serial(ports["sensors"], timeout=0.5)
    try:
        parser = FrameParser()
        init = None
        while init is None:
            init = next((f for f in parser.feed(client.read(9)) if f.command == CMD_INIT), None)
        client.write(encode_frame(init.counter, 2, b"\x00"))                       # InitAck
        client.write(encode_frame(1, 30, bytes([0, 0b1001, 0, 1, 0, 38, 0])))       # ch1+ch4, T = 20 ms
        client.write(encode_frame(2, 32, bytes([0, 1, 44, 40, 1, 0, 200, 70])))     # ch1 300us 40mA, ch4 doublet
        replies = []
        while len(replies) < 2:
            replies += parser.feed(client.read(1))
        assert [r.command for r in replies] == [31, CMD_START_CLM_ACK] and all(r.data == b"\x00" for r in replies)
        time.sleep(0.1)
        rec = ring.pop_available()
        chans = rec[rec["kind"] == KIND_CHANNEL]
        last = {int(r["index"]): tuple(r["values"]) for r in chans}
        assert last[0] == (300, 40, 50, 0) and last[3] == (200, 70, 50, 1) and last[1] == (0, 0, 0, 0)
        assert ring.aux[0] == 1
        client.write(encode_frame(3, 32, bytes([0, 1, 44, 30, 1, 0, 200, 60])))     # an update of the same list:
        while not parser.feed(client.read(1)):                                    # commands for ch1 and ch4 only
            pass
        time.sleep(0.05)
        rec = ring.pop_available()
        assert [(int(r["index"]), r["values"][1]) for r in rec if r["kind"] == KIND_CHANNEL] == [(0, 30), (3, 60)]
        time.sleep(0.7)                                                           # client silent: gone
        rec = ring.pop_available()
        assert ring.aux[0] == 0 and all(tuple(r["values"]) == (0, 0, 0, 0) for r in rec if r["kind"] == KIND_CHANNEL)
        again = None
        while again is None:                                                      # offered again ...
            again = next((f for f in parser.feed(client.read(9)) if f.command == CMD_INIT), None)
        client.write(encode_frame(again.counter, 2, b"\x00"))                      # ... and a new client
        client.write(encode_frame(3, 30, bytes([0, 0b0010, 0, 1, 0, 48, 0])))      # ch2, T = 25 ms
        client.write(encode_frame(4, 32, bytes([2, 0, 250, 20])))                  # triplet 250 us 20 mA
        replies = []
        while len(replies) < 2:
            replies += [f for f in parser.feed(client.read(1)) if f.command != CMD_INIT]
        assert [r.data for r in replies] == [b"\x00", b"\x00"]
        time.sleep(0.1)
        rec = ring.pop_available()
        last = {int(r["index"]): tuple(r["values"]) for r in rec if r["kind"] == KIND_CHANNEL}
        assert last[1] == (250, 20, 40, 2) and ring.aux[0] == 1                   # the link is usable again
        out = np.zeros(2, [("echo_seq", "<i4"), ("frame", frame_dtype())])
        out["frame"]["tick"] = (1, 2)
        out["echo_seq"] = 2
        ep.send_feedback(out, ring.aux)
        got = read_frames(sensors, 2, timeout_s=5.0)
        assert [(e, int(f["tick"])) for e, f in got] == [(2, 1), (2, 2)]
    finally:
        stop.set()
        thread.join(2)
        client.close()
        sensors.close()
        ep.close()
        ring.release()


def test_unmodified_pysciencemode_client_flexes_the_elbow(tmp_path, config_over):
    cfg = config_over("serial.toml", """
        [metrics]
        enabled = false
        """)
    ports_file = tmp_path / "ports.json"
    rec = tmp_path / "run.hilrec"
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "6", "--json",
                            "--record", str(rec), "--port-file", str(ports_file)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    ports = wait_for_port_file(ports_file, hil)["0:sciencemode2"]
    stream = SensorFrames(ports["sensors"], hil)
    client = subprocess.run([sys.executable, str(ROOT / "examples" / "rehastim2_client.py"), "--port-file",
                             str(ports_file), "--channel", "4", "--amplitude", "60", "--hold", "1.0"],
                            capture_output=True, text=True, timeout=60)
    out, err = hil.communicate(timeout=60)
    stream.close()
    frames, reader = stream.frames, stream.reader
    assert client.returncode == 0, client.stderr
    steps = [s for s, _ in json.loads(client.stdout.splitlines()[-1])]
    assert steps == ["connected", "initialised", "ramped", "hold done", "paused", "resumed", "stopped"]
    assert hil.returncode == 0, err
    summary = json.loads(out)
    assert not summary["commands_rejected"], summary["commands_rejected"]
    # every update of the channel list (channel 4 only) is one recorded command for that channel: the
    # five ramp updates and the one after the pause
    from drivers.core.contract import KIND_CHANNEL
    from hil.recording.hilrec import RecordingReader
    cmds = RecordingReader(str(rec)).read("commands")
    stimulated = cmds[(cmds["kind"] == KIND_CHANNEL) & (cmds["values"][:, 1] > 0)]
    assert stimulated["values"][:, 1].tolist() == [12, 24, 36, 48, 60, 60]
    assert set(stimulated["index"].tolist()) == {3}
    # the sensor stream: every frame, in order, intact, and the elbow flexes while channel 4 (biceps) is on
    ticks = np.array([int(f["tick"]) for _, f in frames])
    assert len(ticks) > 1000 and np.all(np.diff(ticks) == 1) and reader.crc_errors == 0
    elbow = np.degrees([float(f["elbow_flexion"]) for _, f in frames])
    assert elbow.max() > elbow[0] + 30
    assert max(e for e, _ in frames) >= 0                       # COUNTER of the applied commands echoed
    from hil.recording.hilrec import RecordingReader
    r = RecordingReader(str(rec))
    ticks_rec = r.read("ticks")
    assert np.array_equal(ticks_rec["frame"][ticks[0]:ticks[-1] + 1].tobytes(),
                          np.array([f for _, f in frames]).tobytes())  # the stream carries the recorded frames
    amp = ticks_rec["applied"][:, 3, 1]
    assert amp.max() == 60 and amp[-1] == 0                      # ramped to 60 mA, stopped at the end
    assert math.isclose(ticks_rec["applied"][np.argmax(amp), 3, 2], 40.0)   # 25 ms channel-list period


def test_config_errors_name_the_key(config_over):
    from hil.config import load_service_config
    from hil.service.build import build_engine
    from sim.das3.config import ConfigError
    for extra, key in [('channel_map = [1, 2]', "channel_map"), ('client_timeout_ms = 500', "client_timeout_ms"),
                       ('client_timeout_ms = inf', "client_timeout_ms"),
                       ('colour = "red"', "colour"), ('sensor_every = 0', "sensor_every")]:
        cfg = config_over("serial.toml", f"""
            [[driver]]
            type = "sciencemode2"
            {extra}
            """)
        with pytest.raises(ConfigError, match=key):
            build_engine(load_service_config(cfg))


def test_a_port_that_cannot_be_opened_is_a_one_line_error_naming_the_driver(tmp_path, config_over):
    """``hil run`` opens the port and fails with one line; ``hil check-config`` opens nothing and passes."""
    cfg = config_over("serial.toml", f"""
        [metrics]
        enabled = false
        [[driver]]
        type = "sciencemode2"
        port = "{tmp_path / 'ttyNONE'}"
        """)
    out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{cfg}, driver[0] (sciencemode2)" in out.stderr and "ttyNONE" in out.stderr
    out = subprocess.run([sys.executable, "-m", "hil", "check-config", str(cfg)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_rehastim2_client_ends_in_one_line_when_the_service_stops(tmp_path, config_over):
    """The service stops while the example client holds: one line on stderr, exit 1, no traceback from
    the client's threads or its main thread."""
    cfg = config_over("serial.toml", """
        [metrics]
        enabled = false
        """)
    ports_file = tmp_path / "ports.json"
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "3",
                            "--port-file", str(ports_file)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_for_port_file(ports_file, hil)
        client = subprocess.run([sys.executable, str(ROOT / "examples" / "rehastim2_client.py"), "--port-file",
                                 str(ports_file), "--hold", "20"], capture_output=True, text=True, timeout=60)
    finally:
        hil.communicate(timeout=60)
    lines = client.stderr.strip().splitlines()
    assert client.returncode == 1 and len(lines) == 1, client.stderr
    assert "went away" in lines[0] and "Traceback" not in client.stderr
