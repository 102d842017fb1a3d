"""The emulated P24 (``type = "sciencemode4"``) over a real pseudo-terminal, driven by the unmodified PyPI client
``science_mode_4`` (pyproject [test]): the link endpoint in this process with the client, the error paths the
client sees, a parser fuzz on the pty, and a whole ``hil run`` with a client killed mid-run, recorded and
replayed bit-identically."""
from __future__ import annotations

import asyncio
import json
import os
import random
import select
import signal
import subprocess
import sys
import termios
import threading
import time
import tty
from pathlib import Path

import numpy as np
import pytest
import serial
from helpers import SensorFrames, wait_for_port_file
from science_mode_4 import (
    ChannelPoint,
    DeviceP24,
    LowLevelHighVoltageSource,
    LowLevelMode,
    MidLevelChannelConfiguration,
    Packet,
    ProtocolError,
    ResultAndError,
    SerialPortConnection,
    StimStatus,
)

from drivers.core.contract import KIND_CHANNEL, KIND_HEARTBEAT
from drivers.ipc.link import INBOUND_AUX_WORDS, LINK_RECORD, Inbound, reject_counts
from drivers.ipc.shm_ring import ShmRing
from drivers.stimulators import serial_port
from drivers.stimulators.p24.codec import FrameParser, encode_frame
from drivers.stimulators.p24.driver import P24Endpoint

ROOT = Path(__file__).resolve().parents[2]


class UnknownPacket(Packet):
    """A command the P24 does not know (76)."""

    def __init__(self):
        super().__init__()
        self._command = 76


class CorruptingConnection(SerialPortConnection):
    """The client's serial connection, with one CRC byte flipped in the next frame it writes."""
    corrupt_next = False

    def write(self, data: bytes):
        if self.corrupt_next:
            self.corrupt_next = False
            data = data[:6] + bytes([data[6] ^ 0x01]) + data[7:]
        super().write(data)


class Link:
    """The P24 link endpoint in a thread on a pty, writing into a shared-memory ring as in the service."""

    def __init__(self, **kwargs) -> None:
        self.ring = ShmRing.create(LINK_RECORD, 8192, INBOUND_AUX_WORDS)
        self.endpoint = P24Endpoint("pty", None, channel_map=list(range(8)), client_timeout_s=1.0, **kwargs)
        self.port = self.endpoint.open()["stimulator"]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.endpoint.receive_forever, args=(Inbound(self.ring), self.stop),
                                       daemon=True)
        self.thread.start()

    def channel_commands(self, settle_s: float = 0.05) -> list[tuple[int, int, tuple]]:
        """(loop channel, seq, (pw, mA, Hz, mode)) of every channel record since the last call."""
        time.sleep(settle_s)
        rec = self.ring.pop_available()
        self.last_heartbeats = int(np.sum(rec["kind"] == KIND_HEARTBEAT))
        return [(int(r["index"]), int(r["seq"]), tuple(float(v) for v in r["values"]))
                for r in rec if r["kind"] == KIND_CHANNEL]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.endpoint.close()
        self.ring.release()


@pytest.fixture
def link():
    made = []

    def make(**kwargs) -> Link:
        made.append(Link(**kwargs))
        return made[-1]
    yield make
    for lk in made:
        lk.close()


def client(port: str, connection_cls=SerialPortConnection) -> DeviceP24:
    connection = connection_cls(port)
    connection.open()
    return DeviceP24(connection)


def biphasic(ma: float, us: int = 200) -> list[ChannelPoint]:
    return [ChannelPoint(us, ma), ChannelPoint(50, 0), ChannelPoint(us, -ma)]


def mid_config(channel: int, ma: float, period_ms: int = 25, ramp: int = 0) -> list:
    config: list = [None] * 8
    config[channel - 1] = MidLevelChannelConfiguration(True, ramp, period_ms, biphasic(ma))
    return config


def test_initialize_and_the_mid_level_flow(link):
    lk = link()

    async def session():
        device = client(lk.port)
        await device.initialize()
        general, mid = device.get_layer_general(), device.get_layer_mid_level()
        assert (general.device_id, general.firmware_version, general.science_mode_version) == (
            "EMUP24-001", "1.0.0", "4.0.0")
        await mid.init(False)
        await mid.update(mid_config(4, 30.0))
        data = await mid.get_current_data()
        assert data.is_stimulation_active_per_channel == [False] * 3 + [True] + [False] * 4
        assert data.channel_error == [ResultAndError.NO_ERROR] * 8
        assert lk.channel_commands() == [(3, 5, (200.0, 30.0, 40.0, 0.0))]   # the update's packet number
        assert lk.last_heartbeats == 1                                       # the keep-alive
        await mid.update(mid_config(4, 45.0, period_ms=20))
        assert lk.channel_commands() == [(3, 7, (200.0, 45.0, 50.0, 0.0))]
        status = await general.get_stim_status()
        assert (status.stim_status, status.high_voltage_on) == (StimStatus.MID_LEVEL_RUNNING, True)
        device.connection.close()
        again = client(lk.port)          # a new script: initialize() stops the running mid level first
        await again.initialize()
        assert lk.channel_commands() == [(3, -1, (0.0, 0.0, 0.0, 0.0))]
        status = await again.get_layer_general().get_stim_status()
        assert status.stim_status == StimStatus.NO_LEVEL_INITIALIZED
        again.connection.close()

    asyncio.run(session())
    assert lk.ring.aux[0] == 1 and not reject_counts(lk.ring)


def test_low_level_flow_at_30_hz_with_rising_current(link):
    lk = link()

    async def session():
        device = client(lk.port)
        await device.initialize()
        low = device.get_layer_low_level()
        await low.init(LowLevelMode.NO_MEASUREMENT, LowLevelHighVoltageSource.STANDARD)
        acks, t_next = [], time.monotonic()
        for k in range(16):                             # channel 7 = green connector, black
            low.send_channel_config(True, 2, 1, biphasic(2.5 * k + 2.5))
            t_next += 1 / 30
            while time.monotonic() < t_next:
                ack = low.packet_buffer.get_packet_from_buffer()
                if ack is not None:
                    acks.append(ack)
                await asyncio.sleep(0.002)
        assert len(acks) >= 15 and all(a.result == ResultAndError.NO_ERROR for a in acks)
        assert {(a.connector, a.channel) for a in acks} == {(1, 2)}
        cmds = lk.channel_commands()
        assert [c for c, _, _ in cmds] == [6] * 16
        currents = [v[1] for _, _, v in cmds]
        assert currents == [2.5 * k + 2.5 for k in range(16)]
        assert cmds[0][2][2] == 10.0 and 20 < np.median([v[2] for _, _, v in cmds[1:]]) < 40   # 1 / interval
        assert lk.channel_commands(0.2) == [(6, -1, (0.0, 0.0, 0.0, 0.0))]             # pulses stopped: zero
        await low.stop()

    asyncio.run(session())


async def low_level_pulses(device: DeviceP24, channel: int, points: list, rate_hz: float, count: int) -> list:
    """``count`` pulses of ``points`` on stimulator channel ``channel`` at ``rate_hz``; their acks."""
    low = device.get_layer_low_level()
    await low.init(LowLevelMode.NO_MEASUREMENT, LowLevelHighVoltageSource.STANDARD)
    acks, t_next = [], time.monotonic()
    for _ in range(count):
        low.send_channel_config(True, (channel - 1) % 4, (channel - 1) // 4, points)
        t_next += 1 / rate_hz
        while time.monotonic() < t_next:
            ack = low.packet_buffer.get_packet_from_buffer()
            if ack is not None:
                acks.append(ack)
            await asyncio.sleep(0.002)
    await low.stop()
    return acks


def test_a_later_phase_above_the_first_is_what_the_loop_is_given(link):
    """Issue 34, both attacks through the unmodified client: the loop gets each pulse's envelope (largest
    current of any point, widest phase), so its limits see the 130 mA and the 61 ms phase."""
    lk = link()

    async def session():
        device = client(lk.port)
        await device.initialize()
        acks = await low_level_pulses(device, 4, [ChannelPoint(390, 100), ChannelPoint(300, -130)], 30, 3)
        assert [a.result for a in acks] == [ResultAndError.NO_ERROR] * 3
        cmds = lk.channel_commands()
        assert [(c, v[:2]) for c, _, v in cmds] == [(3, (390.0, 130.0))] * 3 + [(3, (0.0, 0.0))]
        mid = device.get_layer_mid_level()
        await mid.init(False)
        shape = [ChannelPoint(10, 0.5)] + [ChannelPoint(4095, -130)] * 15
        await mid.update([None] * 3 + [MidLevelChannelConfiguration(True, 0, 62, shape)])
        [(c, _, v)] = lk.channel_commands()
        assert (c, v) == (3, pytest.approx((15 * 4095, 130.0, 1000 / 62, 0.0)))
        await mid.stop()
        device.connection.close()

    asyncio.run(session())


def test_pulses_just_slower_than_the_minimum_frequency_reach_the_loop_with_their_rate(link):
    """Issue 34: 9.5 Hz low-level pulses (minimum 10 Hz) were each "the first of a train" at 0 Hz; now each
    carries its rate (the loop's frequency limits see it) and the first counts at the minimum frequency."""
    lk = link()

    async def session():
        device = client(lk.port)
        await device.initialize()
        await low_level_pulses(device, 4, [ChannelPoint(500, 100), ChannelPoint(500, -100)], 9.5, 12)
        device.connection.close()

    asyncio.run(session())
    pulses = [v for _, _, v in lk.channel_commands() if v[1] > 0]
    assert len(pulses) == 12 and pulses[0][2] == 10.0
    assert all(7 < v[2] < 13 for v in pulses[1:]) and 9.3 < np.median([v[2] for v in pulses[1:]]) < 9.7


@pytest.mark.parametrize("locked", [True, False], ids=["lock", "reset"])
def test_a_client_turning_echo_on_does_not_make_the_device_answer_itself(link, monkeypatch, locked):
    """Issue 34: with ECHO on for the pty, the link read its own replies and answered them without end. The
    raw bits (echo, canonical mode, ...) are locked off; where the lock is refused (no CAP_SYS_ADMIN) they are
    reset before every read and write."""
    if not locked:
        monkeypatch.setattr(serial_port, "lock_raw", lambda fd: False)
    lk = link()

    async def session():
        device = client(lk.port)
        fd = device.connection.ser.fileno()
        attrs = termios.tcgetattr(fd)
        attrs[3] |= termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        await device.initialize()
        assert device.get_layer_general().device_id == "EMUP24-001"
        status = await device.get_layer_general().get_stim_status()
        assert status.stim_status == StimStatus.NO_LEVEL_INITIALIZED
        assert not termios.tcgetattr(fd)[3] & termios.ECHO
        time.sleep(0.3)
        device.connection.close()

    asyncio.run(session())
    counters = lk.endpoint.emulator.counters
    assert counters["frames_in"] == counters["replies_out"] == 4       # initialize(): 3 frames, then 1
    assert not reject_counts(lk.ring)
    assert lk.endpoint.port.raw_guarded is not locked
    assert lk.endpoint.port.raw_resets == (0 if locked else 1)


def test_error_paths_seen_by_the_client(link):
    lk = link(electrode_faults={2: 0.0})

    async def session():
        device = client(lk.port, CorruptingConnection)
        general, mid, low = device.get_layer_general(), device.get_layer_mid_level(), device.get_layer_low_level()
        device.connection.corrupt_next = True
        with pytest.raises(ProtocolError, match="General error packet TRANSFER_ERROR"):
            await general.get_stim_status()
        with pytest.raises(ProtocolError, match="Unknown command packet INVALID_CMD_ERROR"):
            await general.send_packet_and_wait(UnknownPacket())
        with pytest.raises(ProtocolError, match="Error MidLevelUpdate NOT_INITIALIZED"):
            await mid.update(mid_config(1, 20.0))
        await mid.init(True)
        with pytest.raises(ProtocolError, match="Error MidLevelUpdate PARAMETER_ERROR"):
            await mid.update(mid_config(1, 140.0))
        with pytest.raises(ProtocolError, match="Error MidLevelUpdate PARAMETER_ERROR"):
            await mid.update([MidLevelChannelConfiguration(True)])           # the default config: period 0
        with pytest.raises(ProtocolError, match="Error LowLevelInit NOT_INITIALIZED"):
            await low.init(LowLevelMode.NO_MEASUREMENT, LowLevelHighVoltageSource.STANDARD)
        await mid.update(mid_config(2, 20.0))                                 # the injected electrode fault
        data = await mid.get_current_data()
        assert data.channel_error[1] == ResultAndError.ELECTRODE_ERROR and not data.is_stimulation_active_per_channel[1]
        await mid.stop()
        await low.init(LowLevelMode.NO_MEASUREMENT, LowLevelHighVoltageSource.STANDARD)
        low.send_channel_config(True, 1, 0, biphasic(20.0))
        ack = None
        while ack is None:
            ack = low.packet_buffer.get_packet_from_buffer()
            await asyncio.sleep(0.005)
        assert ack.result == ResultAndError.ELECTRODE_ERROR
        status = await general.get_stim_status()                          # the link stays usable
        assert status.stim_status == StimStatus.LOW_LEVEL_INITIALIZED

    asyncio.run(session())
    assert reject_counts(lk.ring) == {"bad_checksum": 1, "unknown_command": 1, "wrong_mode": 2, "out_of_range": 1,
                                      "bad_length": 1}
    assert all(v == (0.0, 0.0, 0.0, 0.0) for _, _, v in lk.channel_commands())     # channel 2 never stimulated


def test_keep_alive_lapse_sets_the_channels_to_zero(link):
    lk = link(keepalive_s=0.3)

    async def session():
        device = client(lk.port)
        mid = device.get_layer_mid_level()
        await mid.init(False)
        await mid.update(mid_config(1, 25.0))
        await asyncio.sleep(0.2)
        await mid.get_current_data()
        assert [v for _, _, v in lk.channel_commands()] == [(200.0, 25.0, 40.0, 0.0)]
        await asyncio.sleep(0.5)
        assert lk.channel_commands() == [(0, -1, (0.0, 0.0, 0.0, 0.0))]
        data = await mid.get_current_data()
        assert not any(data.is_stimulation_active_per_channel)
        status = await device.get_layer_general().get_stim_status()
        assert status.stim_status == StimStatus.MID_LEVEL_INITIALIZED

    asyncio.run(session())


def test_parser_fuzz_on_the_pty_valid_frames_are_still_answered(link):
    lk = link()
    rng = random.Random(11)
    port = serial.Serial(lk.port, timeout=0)
    frames = [encode_frame(k % 64, 62) for k in range(200)]
    stream = bytearray()
    for f in frames:
        stream += bytes(rng.choice([0xF0, 0x0F, 0x81, rng.randrange(256)]) for _ in range(rng.randrange(24))) + f
    parser, replies = FrameParser(), []
    for i in range(0, len(stream), 97):
        port.write(stream[i:i + 97])
        replies += parser.feed(port.read(65536), 0.0)
        time.sleep(0.001)
    t_end = time.monotonic() + 5
    while sum(getattr(r, "command", None) == 63 for r in replies) < len(frames) and time.monotonic() < t_end:
        replies += parser.feed(port.read(65536), 0.0)
        time.sleep(0.01)
    answered = [r.number for r in replies if getattr(r, "command", None) == 63]
    assert answered == [k % 64 for k in range(200)]
    port.close()
    assert sum(reject_counts(lk.ring).values()) > 0

    async def session():                # an unmodified script afterwards
        device = client(lk.port)
        await device.initialize()
        assert device.get_layer_general().device_id == "EMUP24-001"

    time.sleep(0.4)                     # an incomplete pseudo-frame from the fuzz has expired
    asyncio.run(session())


def test_a_tty_path_instead_of_a_pty(tmp_path):
    """``port = "/dev/tty..."``: the endpoint opens the device (here the slave of a pty this test owns, as a
    null-modem line would be) and answers on it; the controller's side is the master."""
    master, slave = os.openpty()
    tty.setraw(slave)
    ring = ShmRing.create(LINK_RECORD, 64, INBOUND_AUX_WORDS)
    endpoint = P24Endpoint(os.ttyname(slave), None, channel_map=list(range(8)), client_timeout_s=1.0)
    try:
        assert endpoint.open() == {"stimulator": os.ttyname(slave)}
        os.write(master, encode_frame(1, 52))                                   # GetDeviceId
        inbound = Inbound(ring)
        replies, t_end = [], time.monotonic() + 5
        while not replies and time.monotonic() < t_end:
            endpoint.receive(inbound, 0.05)
            if select.select([master], [], [], 0.05)[0]:
                replies = FrameParser().feed(os.read(master, 4096), 0.0)
        assert [(r.number, r.command, r.data) for r in replies] == [(1, 53, b"\x00EMUP24-001")]
    finally:
        endpoint.close()
        ring.release()
        os.close(master)
        os.close(slave)


def test_config_errors_name_the_key(config_over):
    from hil.config import load_service_config
    from hil.service.build import build_engine
    from sim.das3.config import ConfigError
    for extra, key in [('channel_map = [1, 2]', "channel_map"), ('min_frequency_hz = 0', "min_frequency_hz"),
                       ('min_frequency_hz = [10, 10]', "min_frequency_hz"), ('device_id = "short"', "device_id"),
                       ('electrode_fault_channels = [9]', "electrode_fault_channels"),
                       ('electrode_fault_after_ms = -1', "electrode_fault_after_ms"),
                       ('client_timeout_ms = inf', "client_timeout_ms"), ('colour = "red"', "colour")]:
        cfg = config_over("p24.toml", f"""
            [[driver]]
            type = "sciencemode4"
            {extra}
            """)
        with pytest.raises(ConfigError, match=key):
            build_engine(load_service_config(cfg))
    from drivers.stimulators.p24.driver import P24Driver
    from hil.service.build import build_tick_engine, driver_context
    service = load_service_config(config_over("p24.toml", """
        [[driver]]
        type = "sciencemode4"
        sensor_port = "none"
        min_frequency_hz = [10, 10, 10, 20, 10, 10, 10, 5]
        electrode_fault_channels = [4]
        electrode_fault_after_ms = 1500
        """))
    model, engine = build_tick_engine(service)
    spec = P24Driver.parse_config(service.drivers[-1], driver_context(service, model, engine,
                                                                     len(service.drivers) - 1))
    args = spec.endpoint_args
    assert args["sensor_port"] is None and args["min_frequency_hz"][3] == 20.0 and args["electrode_faults"] == {4: 1.5}


def test_unmodified_clients_drive_the_arm_survive_a_kill_and_the_run_replays(tmp_path, config_over):
    """``hil run`` with configs/p24.toml: a mid-level script is killed mid-run (its channel goes to zero when
    the keep-alive lapses, the service runs on), a low-level script then connects; the recording replays
    bit-identically."""
    cfg = config_over("p24.toml", """
        [metrics]
        enabled = false
        """)
    ports_file, rec = tmp_path / "ports.json", tmp_path / "run.hilrec"
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "7.5", "--json",
                            "--record", str(rec), "--port-file", str(ports_file)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    ports = wait_for_port_file(ports_file, hil)["0:sciencemode4"]
    stream = SensorFrames(ports["sensors"], hil)
    example = [sys.executable, str(ROOT / "examples" / "p24_client.py"), "--port", ports["stimulator"]]
    mid = subprocess.Popen(example + ["--level", "mid", "--current", "60", "--hold", "30"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    mid.send_signal(signal.SIGKILL)
    mid.communicate(timeout=10)
    time.sleep(2.6)                      # keep-alive lapse: 2 s after the last MlGetCurrentData
    low = subprocess.run(example + ["--level", "low", "--current", "40", "--rate", "30", "--hold", "1"],
                         capture_output=True, text=True, timeout=60)
    out, err = hil.communicate(timeout=60)
    stream.close()
    assert low.returncode == 0, low.stderr
    assert [s for s, _ in json.loads(low.stdout.splitlines()[-1])][2] == "30 pulses, 30 acks, 0 errors"
    assert hil.returncode == 0, err
    summary = json.loads(out)
    assert not summary["commands_rejected"], summary["commands_rejected"]
    assert summary["drivers"]["0:sciencemode4"]["keepalive_lapses"] == 1
    assert "keep-alive lapsed" in err
    from hil.recording.hilrec import RecordingReader
    reader = RecordingReader(str(rec))
    cmds, ticks = reader.read("commands"), reader.read("ticks")
    biceps = cmds[(cmds["kind"] == KIND_CHANNEL) & (cmds["index"] == 3)]
    values = biceps["values"]
    assert values[:, 1].max() == 60 and {12, 24, 36, 48, 60} <= set(values[values[:, 2] == 40.0, 1])
    lapse = biceps[(values[:, 1] == 0)][0]                               # the mid level's zero, device-timed
    assert lapse["tick"] * 0.004 > 2.5
    amp = ticks["applied"][:, 3, 1]
    assert amp.max() == 60 and amp[-1] == 0                              # and zero again after the low level
    low_level = values[(values[:, 1] > 0) & (values[:, 2] != 40.0)]
    assert len(low_level) == 29 and 20 < np.median(low_level[:, 2]) < 40
    elbow = np.degrees(ticks["frame"]["elbow_flexion"])
    assert elbow.max() > elbow[0] + 10
    assert max(e for e, _ in stream.frames) >= 0                          # packet numbers echoed
    replay = subprocess.run([sys.executable, "-m", "hil", "replay", str(rec), "--json"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert json.loads(replay.stdout)["identical"], replay.stdout + replay.stderr


ATTACK_CLIENT = """
import asyncio, sys, time
from science_mode_4 import (ChannelPoint, DeviceP24, LowLevelHighVoltageSource, LowLevelMode,
                            MidLevelChannelConfiguration, SerialPortConnection)

async def pulses(low, channel, points, rate_hz, count):
    t_next = time.monotonic()
    for _ in range(count):
        low.send_channel_config(True, (channel - 1) % 4, (channel - 1) // 4, points)
        t_next += 1 / rate_hz
        while time.monotonic() < t_next:
            low.packet_buffer.get_packet_from_buffer()
            await asyncio.sleep(0.002)

async def main(port):
    connection = SerialPortConnection(port)
    connection.open()
    device = DeviceP24(connection)
    await device.initialize()
    low = device.get_layer_low_level()
    await low.init(LowLevelMode.NO_MEASUREMENT, LowLevelHighVoltageSource.STANDARD)
    await pulses(low, 5, [ChannelPoint(390, 100), ChannelPoint(300, -130)], 20, 3)
    await pulses(low, 4, [ChannelPoint(500, 100), ChannelPoint(500, -100)], 9.5, 19)
    await low.stop()
    mid = device.get_layer_mid_level()
    await mid.init(False)
    shape = [ChannelPoint(10, 0.5)] + [ChannelPoint(4095, -130)] * 15
    await mid.update([None] * 4 + [MidLevelChannelConfiguration(True, 0, 62, shape)])
    await mid.get_current_data()
    await asyncio.sleep(0.3)
    await mid.stop()
    connection.close()
    print("done")

asyncio.run(main(sys.argv[1]))
"""


def test_pulse_shape_and_slow_train_attacks_are_clamped_or_rejected_and_counted(tmp_path, config_over):
    """Issue 34 end to end: the later 130 mA phase (low level) and the 61 ms phase (mid level) on a reject
    channel are rejected and counted by reason; a 9.5 Hz train on a clamp channel (minimum 10 Hz) is clamped
    to 10 Hz and counted, and its force and charge are in the run: one pulse's charge per pulse sent."""
    cfg = config_over("p24.toml", """
        [metrics]
        enabled = false

        [[stimulation.channel]]
        name = "biceps"
        muscles = { bicl = 1.0, bicb = 1.0, brachialis = 0.5 }
        max_amplitude_ma = 100
        min_frequency_hz = 10
        limit_policy = "clamp"

        [[stimulation.channel]]
        name = "triceps"
        muscles = { triclong = 1.0, triclat = 1.0, tricmed = 0.7, anconeus = 0.5 }
        max_amplitude_ma = 100
        min_frequency_hz = 10

        [[driver]]
        type = "sciencemode4"
        sensor_port = "none"
        channel_map = [0, 0, 0, "biceps", "triceps", 0, 0, 0]
        """)
    script, ports_file, rec = tmp_path / "attack.py", tmp_path / "ports.json", tmp_path / "run.hilrec"
    script.write_text(ATTACK_CLIENT)
    hil = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "6", "--json",
                            "--record", str(rec), "--port-file", str(ports_file)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    port = wait_for_port_file(ports_file, hil)["0:sciencemode4"]["stimulator"]
    attack = subprocess.run([sys.executable, str(script), port], capture_output=True, text=True, timeout=60)
    out, err = hil.communicate(timeout=60)
    assert attack.returncode == 0 and attack.stdout.strip() == "done", attack.stderr
    assert hil.returncode == 0, err
    summary = json.loads(out)
    assert summary["commands_rejected"] == {"0:amplitude_limit": 3, "0:pulse_width_limit": 1}
    assert summary["commands_clamped"].keys() == {"0:frequency_limit"}   # the first counts at 10 Hz; the others
    assert 9 <= summary["commands_clamped"]["0:frequency_limit"] <= 18   # unless the client's timing was early
    from hil.recording.hilrec import RecordingReader
    from hil.reports.run_metrics import delivered_charge_uc
    applied = RecordingReader(str(rec)).read("ticks")["applied"]
    assert applied[:, 1, 1].max() == 0                                   # triceps: nothing got through
    biceps = applied[:, 0]
    assert biceps[:, 1].max() == 100 and not np.any((biceps[:, 1] > 0) & (biceps[:, 2] == 0))
    assert np.all((biceps[biceps[:, 1] > 0, 2] >= 10.0) & (biceps[biceps[:, 1] > 0, 2] <= 100.0))
    charge = delivered_charge_uc(applied, 0.004)[0]
    assert 0.95 * 19 * 50 < charge < 1.1 * 19 * 50                      # 19 pulses of 500 µs at 100 mA


@pytest.mark.parametrize("transport", ["p24-mid", "p24-low"])
def test_bench_link_measures_updates_and_pulses(transport):
    """`hil bench link` covers the P24: mid-level update -> applied, low-level pulse -> applied (figures are
    printed, never asserted)."""
    out = subprocess.run([sys.executable, "-m", "hil", "bench", "link", "--transport", transport, "--rate", "250",
                          "--duration", "1.5", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    [run] = json.loads(out.stdout)["runs"]
    rejected = run["commands_rejected"]
    assert run["transport"] == transport and set(rejected) <= {"0:frequency_limit"}, rejected
    # A pulse's rate is 1 / the time since the channel's previous pulse arrived, as on the device: a stall of the
    # loaded test machine can bunch two paced pulses into one read (a rare frequency-limit rejection); the figures
    # are the benchmark's, never a test's.
    assert sum(rejected.values()) <= 0.05 * run["commands_sent"], rejected
    assert run["commands_sent"] > (300 if transport == "p24-mid" else 50)
    assert 1 <= run["round_trips"] <= run["commands_sent"]
    assert 0 < run["rtt_p50_ms"] <= run["rtt_p99_ms"] <= run["rtt_max_ms"]
    assert "keep-alive lapsed" not in out.stderr          # the peer stops its level at the end, as a script does
