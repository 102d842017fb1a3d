"""ScienceMode4 codec, pulse mapping and P24 emulator (drivers/sciencemode4*.py) against the protocol as the
unmodified ``science_mode_4`` client uses it (``../shared/spec/sciencemode4.md``).

Host frames come from science_mode_4 itself (its packet classes and ``Protocol.packet_to_bytes``); device
replies are read back with its frame finder, extractor and acknowledgement classes, which decode every field
before they look at the result, so a short or out-of-range reply raises here as it would crash a script.
"""
from __future__ import annotations

import random

import pytest
from science_mode_4 import (  # a test dependency (pyproject [test]): never skipped
    ChannelPoint,
    MidLevelChannelConfiguration,
    PacketFactory,
    PacketGeneralGetDeviceId,
    PacketGeneralGetExtendedVersion,
    PacketGeneralGetStimStatus,
    PacketGeneralReset,
    PacketLowLevelChannelConfig,
    PacketLowLevelInit,
    PacketLowLevelStop,
    PacketMidLevelGetCurrentData,
    PacketMidLevelInit,
    PacketMidLevelStop,
    PacketMidLevelUpdate,
    Protocol,
    ResultAndError,
    StimStatus,
)

from drivers.stimulators.p24.codec import (
    CMD_GENERAL_ERROR,
    CMD_GET_STIM_STATUS,
    CMD_UNKNOWN_COMMAND,
    MAX_LEN,
    Frame,
    FrameError,
    FrameParser,
    crc16,
    encode_frame,
    stuff,
)
from drivers.stimulators.p24.device import ChannelCommand, KeepAlive, Notice, P24Emulator, Rejected, Settings
from drivers.stimulators.p24.pulse import Pulse, decode_points, encode_point

SPEC = {  # spec "Example frames"
    "stim_status": "f0 81 55 81 59 81 4e 81 0c 04 3e 0f",
    "stim_status_reply": "f0 81 55 81 5a 81 34 81 75 04 3f 00 00 01 0f",
    "ml_init": "f0 81 55 81 58 81 43 81 2b 1c 1e 00 0f",
    "ml_init_reply": "f0 81 55 81 58 81 70 81 1a 1c 1f 00 0f",
    "ml_update": "f0 81 55 81 72 81 cc 81 10 24 20 05 13 00 84 0c 85 50 00 0c 84 10 00 20 00 64 12 c5 c8 00 03 24 b0 "
                 "00 12 c3 98 00 0f",
    "current_data": "f0 81 55 81 58 81 f0 81 94 28 24 04 0f",
    "current_data_reply": "f0 81 55 81 46 81 cd 81 76 28 25 00 04 05 00 00 00 00 0f",
    "ll_config": "f0 81 55 81 4f 81 93 81 63 81 a5 02 82 0c 85 80 00 03 24 b0 00 0c 83 e0 00 0f",
    "ll_config_reply": "f0 81 55 81 45 81 56 81 3a 81 a5 03 00 00 00 0f",
    "bad_crc": "f0 81 55 81 59 81 08 81 13 18 3e 0f",
    "general_error_reply": "f0 81 55 81 58 81 c4 81 18 18 42 01 0f",
    "unknown_reply": "f0 81 55 81 58 81 3a 81 67 20 43 0b 0f",
    "ml_update_16_points_none_sent": "f0 81 55 81 44 81 34 81 94 30 20 01 81 a5 00 50 0f",
}


def raw(name: str) -> bytes:
    return bytes.fromhex(SPEC[name])


def host(packet, number: int) -> bytes:
    """A host frame exactly as science_mode_4 writes it."""
    packet.number = number
    return Protocol.packet_to_bytes(packet)


def read_reply(frame: bytes):
    """A device frame as the client reads it: found, extracted and decoded into its acknowledgement."""
    found = Protocol.find_packet_in_buffer(frame)
    assert found == (0, len(frame) - 1), frame.hex(" ")
    command, number, data = Protocol.extract_packet_data(frame)
    return PacketFactory().create_packet_with_data(command, number, data)


def update_packet(*channels) -> PacketMidLevelUpdate:
    """MlUpdate of (channel, ramp, period ms, [(µs, mA), ...]) tuples."""
    config: list = [None] * 8
    for n, ramp, period, points in channels:
        config[n - 1] = MidLevelChannelConfiguration(True, ramp, period, [ChannelPoint(d, i) for d, i in points])
    p = PacketMidLevelUpdate()
    p.channel_configuration = config
    return p


def pulse_packet(channel: int, points, execute: bool = True) -> PacketLowLevelChannelConfig:
    p = PacketLowLevelChannelConfig()
    p.execute_stimulation, p.channel, p.connector = execute, (channel - 1) % 4, (channel - 1) // 4
    p.points = [ChannelPoint(d, i) for d, i in points]
    return p


def ml_init(stop_all: bool = False) -> PacketMidLevelInit:
    p = PacketMidLevelInit()
    p.do_stop_on_all_errors = stop_all
    return p


def ll_init(measurement: int = 0, high_voltage: int = 0) -> PacketLowLevelInit:
    p = PacketLowLevelInit()
    p.mode, p.high_voltage_source = measurement, high_voltage
    return p


class Session:
    """An emulator and a clock; ``send`` checks the one-reply rule and decodes the reply like the client."""

    def __init__(self, **settings) -> None:
        self.emu = P24Emulator(Settings(**settings))
        self.number = 0

    def send(self, packet, t: float):
        self.number = (self.number + 1) % 64
        replies, events = self.emu.receive(host(packet, self.number), t)
        assert len(replies) == 1, replies
        ack = read_reply(replies[0])
        assert (ack.command, ack.number) == (packet.command + 1, self.number)
        return ack, events

    def poll(self, t: float):
        replies, events = self.emu.poll(t)
        assert replies == []
        return events


def commands(events) -> dict[int, tuple]:
    """The last (pw, mA, Hz) per channel among the events."""
    return {e.channel: (e.pulse_width_us, e.current_ma, e.frequency_hz) for e in events if isinstance(e, ChannelCommand)}


# --- codec -----------------------------------------------------------------------------------------------

def test_crc_check_value_and_stuffing():
    assert crc16(b"123456789") == 0x31C3
    assert stuff(bytes([0xF0, 0x0F, 0x81, 0x55, 0x0A, 0x00])) == bytes.fromhex("81a5815a81d4550a00")


def test_spec_examples_and_client_frames_agree():
    assert host(PacketGeneralGetStimStatus(), 1) == raw("stim_status")
    assert host(ml_init(), 7) == raw("ml_init")
    spec_update = update_packet((1, 3, 33, [(200, 20), (200, -20)]), (3, 0, 25, [(300, 35), (50, 0), (300, -35)]))
    assert host(spec_update, 9) == raw("ml_update")
    assert host(PacketMidLevelGetCurrentData(), 10) == raw("current_data")
    assert host(pulse_packet(1, [(200, 26), (50, 0), (200, -26)]), 60) == raw("ll_config")
    assert host(update_packet((1, 0, 20, [])), 12) == raw("ml_update_16_points_none_sent")
    for reply, (number, command, data) in [("stim_status_reply", (1, 63, b"\0\0\1")),
                                           ("ml_init_reply", (7, 31, b"\0")),
                                           ("current_data_reply", (10, 37, bytes([0, 4, 5, 0, 0, 0, 0]))),
                                           ("ll_config_reply", (60, 3, b"\0\0\0")),
                                           ("general_error_reply", (6, CMD_GENERAL_ERROR, b"\1")),
                                           ("unknown_reply", (8, CMD_UNKNOWN_COMMAND, b"\x0b"))]:
        assert encode_frame(number, command, data) == raw(reply)
        assert FrameParser().feed(raw(reply), 0.0) == [Frame(number, command, data)]


def test_encode_frame_equals_the_client_for_every_packet_number():
    for number in range(64):
        for packet in (PacketGeneralGetStimStatus(), ml_init(True), PacketMidLevelGetCurrentData(),
                       pulse_packet(8, [(4095, 130), (10, -130)])):
            frame = host(packet, number)
            assert encode_frame(number, packet.command, packet.get_data()) == frame
            assert FrameParser().feed(frame, 0.0) == [Frame(number, packet.command, bytes(packet.get_data()))]
    for command in (0x100, 0x2AB, 0x3FF):          # the command's top 2 bits share byte 0 with the number
        assert FrameParser().feed(encode_frame(45, command, b"\x01"), 0.0) == [Frame(45, command, b"\x01")]


def _with(frame: bytes, offset: int, value: int) -> bytes:
    return frame[:offset] + bytes([value]) + frame[offset + 1:]


def _header(length: int, crc: int) -> bytes:
    return bytes([0xF0, 0x81, (length >> 8) ^ 0x55, 0x81, (length & 0xFF) ^ 0x55, 0x81, (crc >> 8) ^ 0x55, 0x81,
                  (crc & 0xFF) ^ 0x55])


GOOD = raw("stim_status")
STATUS6 = encode_frame(6, CMD_GET_STIM_STATUS)
BROKEN = [  # (bytes, reason, number of the General error reply or None for no reply)
    (raw("bad_crc"), "bad_checksum", 6),
    (_with(STATUS6, len(STATUS6) - 1, 0x00) + b"\x00", "bad_checksum", 6),      # stop byte wrong
    (_header(11, 0) + b"\x18\x3e\x0f", "bad_length", 0),                         # LEN below 12
    (_header(1201, crc16(b"\x18\x3e" + bytes(1189))) + b"\x18\x3e" + bytes(1189) + b"\x0f", "bad_length", 0),
                                                                                  # LEN above 1200, else whole
    (_header(14, crc16(b"\x18\x3e")) + b"\x18\x3e\x0f", "bad_length", 0),       # LEN too long: 0F early
    (_header(11 + 1, crc16(b"\x18\x3e\x00")) + b"\x18\x3e\x00\x0f", "bad_checksum", 6),   # LEN too short
    (STATUS6[:-1], "bad_length", 0),                                             # stop byte missing: cut short
    (STATUS6[:3] + b"\x00" + STATUS6[4:], "bad_frame", None),                     # 81 missing in the header
    (STATUS6[:5] + b"\x00" + STATUS6[6:], "bad_frame", None),
    (STATUS6[:7] + b"\x00" + STATUS6[8:], "bad_frame", None),
    (b"\x13\x37\x0f\x81", "bad_frame", None),                                    # garbage without F0
    (_header(13, crc16(b"\x18\x3e\x81")) + b"\x18\x3e\x81\x0f", "bad_checksum", 6),   # dangling escape
]


@pytest.mark.parametrize("frame,reason,number", BROKEN)
def test_broken_frames_are_reported_and_the_next_frame_is_parsed(frame, reason, number):
    items = FrameParser().feed(frame + GOOD, 0.0)
    assert [type(i) for i in items] == [FrameError, Frame], items
    assert (items[0].reason, items[0].number) == (reason, number)
    assert items[1] == Frame(1, CMD_GET_STIM_STATUS, b"")
    parser = FrameParser()      # byte by byte (garbage is reported per read)
    reasons = [getattr(i, "reason", None) for b in frame + GOOD for i in parser.feed(bytes([b]), 0.0)]
    assert reasons[-1] is None and set(reasons[:-1]) == {reason}


def test_emulator_answers_broken_frames_with_a_general_error():
    emu = P24Emulator()
    for frame, reason, number in BROKEN:
        replies, events = emu.receive(frame + GOOD, 0.0)
        assert events[0] == Rejected(reason, None)
        assert read_reply(replies.pop()).command == 63
        if number is None:
            assert replies == []
        else:
            [reply] = replies
            ack = read_reply(reply)
            assert (ack.command, ack.number, ack.result_error) == (CMD_GENERAL_ERROR, number,
                                                                   ResultAndError.TRANSFER_ERROR)
    assert emu.counters["bad_checksum"] == 4 and emu.counters["bad_length"] == 4 and emu.counters["bad_frame"] == 4
    replies, _ = emu.receive(GOOD, 0.0)      # the link stays usable
    assert read_reply(replies[0]).stim_status == StimStatus.NO_LEVEL_INITIALIZED


def test_a_stop_byte_before_len_says_ends_the_frame_at_once():
    """A 0F inside the LEN window cannot be in a valid BODY: the error (and its General error) comes at once,
    not when the next frame starts or the frame times out."""
    too_long = _header(14, crc16(b"\x18\x3e")) + b"\x18\x3e\x0f"
    assert FrameParser().feed(too_long, 0.0) == [FrameError("bad_length", 0, too_long)]


def test_incomplete_frame_expires_after_300_ms():
    emu = P24Emulator()
    assert emu.receive(GOOD[:7], 1.0) == ([], [])
    assert emu.poll(1.29) == ([], [])
    [reply], events = emu.poll(1.31)
    assert events == [Rejected("bad_length", None)] and read_reply(reply).number == 0
    replies, _ = emu.receive(GOOD, 1.4)
    assert len(replies) == 1 and read_reply(replies[0]).command == 63


def test_an_expired_frame_holding_broken_starts_gives_one_general_error():
    """What follows the F0 of an expired frame is parsed again (a header value may be F0); a broken frame
    start in it gets no reply."""
    emu = P24Emulator()
    assert emu.receive(bytes([0xF0, 0x81, 0x55, 0x81, 0x70, 0x81, 0xF0, 0x81, 0x00, 0x18]), 0.0) == ([], [])
    replies, events = emu.poll(0.31)
    assert [read_reply(r).command for r in replies] == [CMD_GENERAL_ERROR]
    assert [e.reason for e in events] == ["bad_length", "bad_frame"]
    assert read_reply(emu.receive(GOOD, 0.4)[0][0]).command == 63


def test_frame_cut_off_inside_the_header_does_not_hide_the_next():
    for cut in range(2, 9):
        items = FrameParser().feed(STATUS6[:cut] + GOOD, 0.0)
        assert items[-1] == Frame(1, CMD_GET_STIM_STATUS, b""), (cut, items)


def test_buffer_stays_bounded():
    parser = FrameParser()
    assert parser.feed(bytes(100_000), 0.0) == [FrameError("bad_frame", None, bytes(100_000))]
    big = encode_frame(5, 32, bytes(range(1, 120)) * 9 + bytes(range(1, 65)))
    assert len(big) <= MAX_LEN
    pending = []
    items = []
    for b in big:
        items += parser.feed(bytes([b]), 0.0)
        pending.append(parser.pending)
    assert items == [FrameParser().feed(big, 0.0)[0]] and max(pending) == len(big) - 1 and parser.pending == 0
    with pytest.raises(ValueError):
        encode_frame(0, 32, bytes(1200))
    with pytest.raises(ValueError):
        encode_frame(64, 32)


def test_parser_fuzz_random_bytes_mixed_with_valid_frames():
    """Seeded random bytes and mangled frames between valid frames, random read boundaries: no exception, the
    buffer stays under one frame, and every valid frame is decoded in order."""
    rng = random.Random(2024)
    valid = [encode_frame(rng.randrange(64), rng.choice([62, 52, 68, 36, 32, 2, 0, 4]),
                          bytes(rng.randrange(256) for _ in range(rng.randrange(40)))) for _ in range(400)]
    for trial in range(20):
        stream = bytearray()
        for f in valid:
            stream += _mangled(rng.choice(valid), rng) + f
        parser, got, t = FrameParser(), [], 0.0
        pos = 0
        while pos < len(stream):
            n = rng.randrange(1, 64)
            got += parser.feed(bytes(stream[pos:pos + n]), t)
            assert parser.pending <= MAX_LEN
            pos += n
        frames = [encode_frame(i.number, i.command, i.data) for i in got if isinstance(i, Frame)]
        it = iter(frames)
        assert all(any(f == g for g in it) for f in valid), trial      # a subsequence: all of them, in order


def _mangled(frame: bytes, rng: random.Random) -> bytes:
    """A frame with a flipped byte, cut short, or with a byte doubled; or random bytes."""
    kind, i = rng.randrange(4), rng.randrange(len(frame))
    if kind == 0:
        return frame[:i] + bytes([frame[i] ^ (1 << rng.randrange(8))]) + frame[i + 1:]
    if kind == 1:
        return frame[:i]
    if kind == 2:
        return frame[:i] + frame[i:i + 1] * 2 + frame[i + 1:]
    return bytes(rng.choice([0xF0, 0x0F, 0x81, rng.randrange(256)]) for _ in range(rng.randrange(50)))


def test_emulator_fuzz_answers_every_valid_command():
    """Mangled frames and random bytes, each followed by a valid command: no exception, every reply decodes in
    the client, and the valid command is answered."""
    rng = random.Random(7)
    emu = P24Emulator()
    sources = [host(PacketGeneralGetStimStatus(), 9), host(update_packet((2, 1, 30, [(100, 5), (100, -5)])), 33),
               host(pulse_packet(3, [(100, 5)]), 60), host(ml_init(), 4)]
    for k in range(600):
        number = k % 64
        junk = b"".join(_mangled(rng.choice(sources), rng) for _ in range(rng.randrange(1, 4)))
        replies, _ = emu.receive(junk + host(PacketGeneralGetStimStatus(), number), k * 0.01)
        acks = [read_reply(r) for r in replies]
        assert (acks[-1].command, acks[-1].number) == (63, number), k
        emu.poll(k * 0.01 + 0.5)          # nothing incomplete lingers into the next round
    assert emu.counters["bad_checksum"] > 50 and emu.counters["bad_length"] > 50


def test_emulator_fuzz_valid_frames_with_random_data():
    """Well-formed frames of every known command with random data, at random times: one reply each, in a
    layout the client decodes, and the device's time-driven part never fails."""
    rng = random.Random(3)
    emu = P24Emulator(Settings(fault_after_s={1: 0.0, 5: 0.2}))
    commands_ = [0, 2, 4, 30, 32, 34, 36, 52, 58, 62, 68]
    t = 0.0
    for k in range(1500):
        command = rng.choice(commands_)
        n = rng.choice([0, 1, 2, 5, 9, 13, rng.randrange(80)])
        data = bytes(rng.randrange(256) for _ in range(n))
        if command == 30 or (command == 0 and rng.random() < 0.5):
            data = bytes([rng.randrange(2) if command == 30 else rng.randrange(4) << 4])
        t += rng.choice([0.0, 0.001, 0.03, 0.5, 3.0])
        replies, _ = emu.receive(encode_frame(k % 64, command, data), t)
        assert len(replies) == 1
        ack = read_reply(replies[0])
        assert ack.number == k % 64 and ack.command in (command + 1, CMD_UNKNOWN_COMMAND)
        emu.poll(t + 0.01)
        assert emu.status in (0, 1, 2, 3)


# --- pulses ----------------------------------------------------------------------------------------------

def test_point_encoding_matches_the_client_and_the_spec_mapping_examples():
    for d, i in [(0, 0), (200, 20), (4095, -150), (10, 130.5), (7, 0.25)]:
        assert encode_point(d, i) == ChannelPoint(d, i).get_data()
    ch1 = Pulse(decode_points(encode_point(200, 20) + encode_point(200, -20), 2))
    ch3 = Pulse(decode_points(encode_point(300, 35) + encode_point(50, 0) + encode_point(300, -35), 3))
    assert (ch1.current_ma, ch1.pulse_width_us, ch1.charge_nc, ch1.balanced) == (20, 200, 4000, True)
    assert (ch3.current_ma, ch3.pulse_width_us, ch3.charge_nc, ch3.balanced) == (35, 300, 10500, True)
    multi = Pulse(decode_points(b"".join(encode_point(d, i) for d, i in [(0, 0), (100, 10), (5, 30), (100, -40)]), 4))
    assert (multi.current_ma, multi.pulse_width_us, multi.charge_nc) == (40, 110, 4000)   # 5 µs counts as 10
    assert not multi.balanced and multi.net_charge_nc == 1300 - 4000
    assert decode_points(encode_point(10, 1)[:3], 1) is None
    assert decode_points((int.from_bytes(encode_point(10, 1), "big") | 1).to_bytes(4, "big"), 1) is None
    assert decode_points((int.from_bytes(encode_point(10, 1), "big") | 0x40).to_bytes(4, "big"), 1) is None


def shape(points) -> Pulse:
    return Pulse(decode_points(b"".join(encode_point(d, i) for d, i in points), len(points)))


@pytest.mark.parametrize("points,envelope", [
    ([(390, 100), (300, -130)], (130, 390)),                       # issue 34: the later phase is the stronger
    ([(10, 0.5)] + [(4095, -130)] * 15, (130, 15 * 4095)),          # issue 34: 61 ms at 130 mA after 10 µs
    ([(400, 100), (10, 0), (400, 100), (200, -100)], (100, 800)),  # a gap does not end a phase
    ([(200, 60), (200, -60)] * 8, (60, 1600)),                     # 16 phases: half the 3.2 ms of current
    ([(300, 35), (50, 0), (300, -35)], (35, 300)),                  # a symmetric pulse is its own envelope
    ([(200, 0), (100, 0)], (0, 0)),
])
def test_every_point_counts_in_the_recorded_envelope(points, envelope):
    """The record's current is the largest of any point and its width covers the widest phase and half the
    time current flows, so the loop's amplitude and pulse-width limits bound every point, phase and pulse."""
    pulse = shape(points)
    assert (pulse.current_ma, pulse.pulse_width_us) == envelope
    widths = [w for w, _ in pulse.phases()]
    assert all(abs(i) <= pulse.current_ma for _, i in points)
    assert max(widths, default=0) <= pulse.pulse_width_us and sum(widths) <= 2 * pulse.pulse_width_us
    assert pulse.charge_nc <= pulse.current_ma * pulse.pulse_width_us


# --- emulator: general layer and the client's initialize() -------------------------------------------------

def test_general_layer_replies_decode_in_the_client():
    s = Session()
    ack, _ = s.send(PacketGeneralGetStimStatus(), 0.0)
    assert (ack.successful, ack.stim_status, ack.high_voltage_on) == (True, StimStatus.NO_LEVEL_INITIALIZED, False)
    ack, _ = s.send(PacketGeneralGetDeviceId(), 0.0)
    assert (ack.result_error, ack.device_id) == (ResultAndError.NO_ERROR, "EMUP24-001")
    ack, _ = s.send(PacketGeneralGetExtendedVersion(), 0.0)
    assert (ack.successful, ack.firmware_version, ack.science_mode_version) == (True, "1.0.0", "4.0.0")
    s.send(ml_init(), 0.0)
    ack, _ = s.send(PacketGeneralGetStimStatus(), 0.0)
    assert (ack.stim_status, ack.high_voltage_on) == (StimStatus.MID_LEVEL_INITIALIZED, True)
    ack, events = s.send(PacketGeneralReset(), 0.0)
    assert ack.result_error == ResultAndError.NO_ERROR and s.emu.status == 0


@pytest.mark.parametrize("packet,layout", [(PacketGeneralGetStimStatus, 3), (PacketGeneralGetDeviceId, 11),
                                           (PacketGeneralGetExtendedVersion, 13), (PacketGeneralReset, 1),
                                           (PacketMidLevelStop, 1), (PacketLowLevelStop, 1)])
def test_data_on_a_command_without_data_is_a_parameter_error_in_the_full_layout(packet, layout):
    emu = P24Emulator()
    command = packet().command
    replies, events = emu.receive(encode_frame(5, command, b"\x01"), 0.0)
    assert events == [Rejected("bad_length", command)]
    _, _, data = Protocol.extract_packet_data(replies[0])
    assert data[0] == ResultAndError.PARAMETER_ERROR and len(data) == layout
    read_reply(replies[0])                             # every field decodes in the client


def test_unknown_commands_get_invalid_command_with_the_number_echoed():
    emu = P24Emulator()
    for number, command in [(8, 76), (0, 50), (63, 1023), (1, 66), (2, 67), (3, 1)]:
        replies, events = emu.receive(encode_frame(number, command), 0.0)
        ack = read_reply(replies[0])
        assert (ack.command, ack.number, ack.result_error) == (67, number, ResultAndError.INVALID_CMD_ERROR)
        assert events == [Rejected("unknown_command", command)]
    assert emu.receive(encode_frame(8, 76), 0.0)[0][0] == raw("unknown_reply")


# --- mid level -------------------------------------------------------------------------------------------

def test_mid_level_flow_maps_pulses_to_stimulation():
    s = Session()
    ack, _ = s.send(update_packet((1, 0, 25, [(200, 20)])), 0.0)
    assert ack.result_error == ResultAndError.NOT_INITIALIZED                  # before MlInit
    s.send(ml_init(), 0.0)
    ack, events = s.send(update_packet((1, 0, 33, [(200, 20), (200, -20)]), (3, 0, 25, [(300, 35), (50, 0),
                                                                                         (300, -35)])), 0.1)
    assert ack.result_error == ResultAndError.NO_ERROR and s.emu.status == 3
    assert commands(events) == {1: (200, 20, 1000 / 33), 3: (300, 35, 40.0)}
    assert all(e.number == s.number for e in events if isinstance(e, ChannelCommand))
    ack, events = s.send(PacketMidLevelGetCurrentData(), 0.2)
    assert ack.is_stimulation_active_per_channel == [True, False, True] + [False] * 5
    assert ack.channel_error == [ResultAndError.NO_ERROR] * 8 and events == [KeepAlive(s.number)]
    ack, events = s.send(update_packet((3, 0, 20, [(100, 10), (100, -10)])), 0.3)   # channel 1 leaves
    assert commands(events) == {1: (0, 0, 0), 3: (100, 10, 50.0)}
    ack, events = s.send(update_packet((3, 0, 20, [(100, 0), (100, 0)])), 0.4)       # all points 0 mA
    assert commands(events) == {3: (0, 0, 0)}
    ack, events = s.send(PacketMidLevelStop(), 0.5)
    assert s.emu.status == 0 and commands(events) == {}                               # nothing was on any more
    ack, _ = s.send(PacketMidLevelStop(), 0.6)                                       # answered 0 in every state
    assert ack.result_error == ResultAndError.NO_ERROR


def test_mid_level_ramp_rises_over_the_first_pulses():
    s = Session()
    s.send(ml_init(), 0.0)
    _, events = s.send(update_packet((2, 3, 10, [(200, 40), (200, -40)])), 1.0)
    assert commands(events) == {2: (200, 10, 100.0)}
    assert commands(s.poll(1.005)) == {}
    assert commands(s.poll(1.0101)) == {2: (200, 20, 100.0)}
    assert commands(s.poll(1.05)) == {2: (200, 40, 100.0)}
    _, events = s.send(update_packet((2, 3, 10, [(200, 30), (200, -30)])), 1.06)     # running: no new ramp
    assert commands(events) == {2: (200, 30, 100.0)}


@pytest.mark.parametrize("update,reason", [
    (update_packet((1, 0, 0, [(200, 20)])), "out_of_range"),                 # period 0 (the default config)
    (update_packet((1, 0, 0, [])), "bad_length"),                            # "16 points", none sent
    (update_packet((1, 0, 25, [(200, 140)])), "out_of_range"),              # above 130 mA
    (update_packet((1, 0, 25, [(200, -130.5)])), "out_of_range"),
    (update_packet(*[(n, 0, 2, [(4095, 10)] * 4) for n in range(1, 9)]), "out_of_range"),   # occupancy >= 100 %
    (update_packet((1, 0, 16384, [(200, 20)])), "out_of_range"),            # period above 16383 ms
])
def test_mid_level_update_out_of_range_keeps_the_running_stimulation(update, reason):
    s = Session()
    s.send(ml_init(), 0.0)
    s.send(update_packet((4, 0, 25, [(300, 30), (300, -30)])), 0.0)
    ack, events = s.send(update, 0.1)
    assert ack.result_error == ResultAndError.PARAMETER_ERROR
    assert events == [Rejected(reason, 32)] and s.emu.counters[reason] == 1 and s.emu.status == 3
    ack, _ = s.send(PacketMidLevelGetCurrentData(), 0.2)
    assert ack.is_stimulation_active_per_channel[3]


def test_mid_level_occupancy_just_below_100_percent_is_accepted():
    s = Session()
    s.send(ml_init(), 0.0)
    # 2 channels of (4095 * 2 + 60) µs at 17 ms: 2 * 8250 / 17 = 970.6 per mille
    ack, _ = s.send(update_packet(*[(n, 0, 17, [(4095, 10), (4095, -10)]) for n in (1, 2)]), 0.0)
    assert ack.result_error == ResultAndError.NO_ERROR


def test_current_data_with_a_bad_selection_or_length():
    s = Session()
    s.send(ml_init(), 0.0)
    for data, reason in [(b"\x02", "out_of_range"), (b"", "bad_length"), (b"\x04\x00", "bad_length")]:
        replies, events = s.emu.receive(encode_frame(3, 36, data), 0.0)
        ack = read_reply(replies[0])
        assert ack.result_error == ResultAndError.PARAMETER_ERROR and events == [Rejected(reason, 36)]


def test_keep_alive_lapse_stops_stimulation_and_reports_it():
    s = Session()
    s.send(ml_init(), 0.0)
    s.send(update_packet((4, 0, 25, [(300, 30), (300, -30)])), 10.0)
    for t in (11.9, 13.8):                                 # MlGetCurrentData within 2 s keeps it running
        s.send(PacketMidLevelGetCurrentData(), t)
        assert commands(s.poll(t + 0.1)) == {}
    s.send(update_packet((4, 0, 25, [(300, 40), (300, -40)])), 15.0)   # an update is not a keep-alive
    assert commands(s.poll(15.8)) == {}
    events = s.poll(15.81)
    assert commands(events) == {4: (0, 0, 0)} and any(isinstance(e, Notice) for e in events)
    assert s.emu.status == 2 and s.emu.counters["keepalive_lapses"] == 1
    ack, _ = s.send(PacketMidLevelGetCurrentData(), 16.0)
    assert ack.result_error == ResultAndError.NO_ERROR and not any(ack.is_stimulation_active_per_channel)
    ack, events = s.send(update_packet((4, 0, 25, [(300, 30), (300, -30)])), 16.1)   # a new update restarts
    assert commands(events) == {4: (300, 30, 40.0)} and s.emu.status == 3
    assert commands(s.poll(18.09)) == {} and commands(s.poll(18.11)) == {4: (0, 0, 0)}


def test_level_rules():
    s = Session()
    for packet, field in [(PacketMidLevelGetCurrentData(), "result_error"),
                          (pulse_packet(1, [(100, 10)]), "result")]:
        ack, events = s.send(packet, 0.0)
        assert getattr(ack, field) == ResultAndError.NOT_INITIALIZED and events[0].reason == "wrong_mode"
    s.send(ml_init(), 0.0)
    ack, _ = s.send(ll_init(), 0.0)
    assert ack.result_error == ResultAndError.NOT_INITIALIZED
    ack, _ = s.send(PacketLowLevelStop(), 0.0)              # another level's stop: answered 0, mid level stays
    assert ack.result_error == ResultAndError.NO_ERROR and s.emu.status == 2
    s.send(PacketMidLevelStop(), 0.0)
    s.send(ll_init(), 0.0)
    ack, _ = s.send(ml_init(), 0.0)
    assert ack.result_error == ResultAndError.NOT_INITIALIZED and s.emu.status == 1
    ack, _ = s.send(update_packet((1, 0, 25, [(100, 10)])), 0.0)
    assert ack.result_error == ResultAndError.NOT_INITIALIZED
    for bad in (0x80, 0x01, 0x40):                          # reserved bits, measurement 4
        replies, events = s.emu.receive(encode_frame(9, 0, bytes([bad])), 0.0)
        assert read_reply(replies[0]).result_error == ResultAndError.PARAMETER_ERROR
        assert events == [Rejected("out_of_range", 0)]
    replies, events = s.emu.receive(encode_frame(9, 30, b"\x02"), 0.0)
    assert events == [Rejected("wrong_mode", 30)]


# --- low level -------------------------------------------------------------------------------------------

def test_low_level_frequency_from_pulse_intervals_and_the_minimum_frequency_timeout():
    s = Session(min_period_s=(0.1,) * 8)
    s.send(ll_init(), 0.0)
    biphasic = [(200, 26), (50, 0), (200, -26)]
    ack, events = s.send(pulse_packet(1, biphasic), 1.0)
    assert ack.result == ResultAndError.NO_ERROR and (ack.channel, ack.connector) == (0, 0)
    assert commands(events) == {1: (200, 26, 10.0)}              # the first pulse: one at the minimum frequency
    ack, events = s.send(pulse_packet(1, [(200, 30), (200, -30)]), 1.0 + 1 / 30)
    assert commands(events)[1] == pytest.approx((200, 30, 30.0))
    ack, events = s.send(pulse_packet(7, biphasic), 1.05)
    assert (ack.channel, ack.connector) == (2, 1) and commands(events) == {7: (200, 26, 10.0)}
    assert commands(s.poll(1.13)) == {}
    assert commands(s.poll(1.14)) == {1: (0, 0, 0)}              # channel 1: no pulse for 1/10 s
    assert commands(s.poll(1.16)) == {7: (0, 0, 0)}
    _, events = s.send(pulse_packet(1, biphasic), 1.3)           # after a pause: its true rate
    assert commands(events)[1] == pytest.approx((200, 26, 1 / (1.3 - 1.0 - 1 / 30)))
    _, events = s.send(pulse_packet(1, biphasic, execute=False), 1.31)   # no execute bit: no pulse
    assert commands(events) == {}
    replies, events = s.emu.receive(encode_frame(9, 2, bytes([0x00])), 1.32)   # C library: no points
    assert read_reply(replies[0]).result == ResultAndError.NO_ERROR and commands(events) == {}
    _, events = s.send(PacketLowLevelStop(), 1.35)
    assert commands(events) == {1: (0, 0, 0)} and s.emu.status == 0


def test_low_level_pulses_just_slower_than_the_minimum_frequency_carry_their_rate():
    """Issue 34: at 9.5 Hz (minimum 10 Hz) every pulse was "the first of a train" at 0 Hz: no force, no charge,
    no frequency limit. Now each carries its rate, and the channel goes to zero between them as before."""
    s = Session(min_period_s=(0.1,) * 8)
    s.send(ll_init(), 0.0)
    rates = []
    for k in range(20):
        t = 1.0 + k / 9.5
        _, events = s.send(pulse_packet(4, [(500, 100), (500, -100)]), t)
        rates.append(commands(events)[4][2])
        assert commands(s.poll(t + 0.102)) == {4: (0, 0, 0)}
    assert rates[0] == 10.0 and rates[1:] == pytest.approx([9.5] * 19)


def test_low_level_pulses_sent_together_run_one_after_the_other():
    s = Session()
    s.send(ll_init(), 0.0)
    s.send(pulse_packet(2, [(1000, 20), (1000, -20)]), 0.0)
    _, events = s.send(pulse_packet(2, [(1000, 20), (1000, -20)]), 0.0)
    assert commands(events)[2] == pytest.approx((1000, 20, 500.0))     # starts when the first has ended (2 ms)


@pytest.mark.parametrize("data,reason", [
    (bytes([0x80]) + encode_point(100, 10)[:3], "bad_length"),
    (bytes([0x81]) + encode_point(100, 10), "bad_length"),            # declares 2 points, sends 1
    (bytes([0x80]) + encode_point(100, 140), "out_of_range"),
    (bytes([0x80]) + (int.from_bytes(encode_point(100, 10), "big") | 0x60).to_bytes(4, "big"), "out_of_range"),
    (b"", "bad_length"),
    (bytes([0x80]) + encode_point(100, 10) + b"\x00", "bad_length"),    # a byte too many
])
def test_low_level_config_errors(data, reason):
    s = Session()
    s.send(ll_init(), 0.0)
    replies, events = s.emu.receive(encode_frame(4, 2, data), 0.0)
    ack = read_reply(replies[0])
    assert ack.result == ResultAndError.PARAMETER_ERROR and events == [Rejected(reason, 2)]


def test_low_level_measurement_reply_has_the_full_layout():
    s = Session()
    s.send(ll_init(measurement=1), 0.0)
    ack, _ = s.send(pulse_packet(1, [(640, 26), (640, -26)]), 0.0)
    assert ack.mode == 1 and ack.sampling_time_in_microseconds == 10
    assert ack.measurement_samples[:64] == [26.0] * 64 and ack.measurement_samples[64:] == [26.0] * 64
    replies, _ = s.emu.receive(encode_frame(5, 2, bytes([0x80]) + encode_point(100, 140)), 0.0)
    ack = read_reply(replies[0])                                      # on error too: zero samples
    assert ack.result == ResultAndError.PARAMETER_ERROR and ack.measurement_samples == [0.0] * 128
    s.send(ll_init(measurement=3), 0.0)
    ack, events = s.send(pulse_packet(1, [(100, 26), (100, -26)]), 1.0)
    assert ack.measurement_samples == [150.0] * 128
    s.send(ll_init(measurement=3, high_voltage=1), 0.0)
    ack, events = s.send(pulse_packet(1, [(100, 26), (100, -26)]), 2.0)
    assert ack.measurement_samples == [0.0] * 128
    assert commands(events) == {1: (0, 0, 0)}                         # high voltage off: no current


# --- electrode faults and charge balance -----------------------------------------------------------------

def test_injected_electrode_fault_at_low_level():
    s = Session(fault_after_s={3: 0.5})
    s.send(ll_init(), 0.0)
    ack, events = s.send(pulse_packet(3, [(200, 10), (200, -10)]), 0.0)       # below 15 mA: no onset yet
    assert ack.result == ResultAndError.NO_ERROR and commands(events) == {3: (200, 10, 10.0)}
    ack, events = s.send(pulse_packet(3, [(200, 20), (200, -20)]), 0.025)     # the fault starts 0.5 s later
    assert ack.result == ResultAndError.NO_ERROR
    ack, events = s.send(pulse_packet(3, [(200, 20), (200, -20)]), 0.6)
    assert ack.result == ResultAndError.ELECTRODE_ERROR and commands(events) == {3: (0, 0, 0)}
    ack, events = s.send(pulse_packet(3, [(200, 10), (200, -10)]), 0.65)      # undetected, and no current
    assert ack.result == ResultAndError.NO_ERROR and commands(events) == {3: (0, 0, 0)}
    ack, events = s.send(pulse_packet(4, [(200, 20), (200, -20)]), 0.7)       # other channels work
    assert commands(events) == {4: (200, 20, 10.0)} and s.emu.counters["electrode_errors"] == 1


@pytest.mark.parametrize("stop_all", [False, True])
def test_injected_electrode_fault_at_mid_level(stop_all):
    s = Session(fault_after_s={1: 1.0})
    s.send(ml_init(stop_all), 0.0)
    s.send(update_packet((1, 0, 25, [(200, 20), (200, -20)]), (2, 0, 25, [(200, 20), (200, -20)])), 0.0)
    assert commands(s.poll(0.99)) == {}
    events = s.poll(1.0)
    assert commands(events) == ({1: (0, 0, 0), 2: (0, 0, 0)} if stop_all else {1: (0, 0, 0)})
    assert any(isinstance(e, Notice) and "electrode" in e.text for e in events)
    ack, _ = s.send(PacketMidLevelGetCurrentData(), 1.1)
    assert ack.result_error == ResultAndError.NO_ERROR
    assert ack.is_stimulation_active_per_channel[:2] == ([False, False] if stop_all else [False, True])
    assert ack.channel_error[:2] == [ResultAndError.ELECTRODE_ERROR, ResultAndError.NO_ERROR]
    ack, events = s.send(update_packet((1, 0, 25, [(200, 20), (200, -20)])), 1.2)   # restarted: fails again
    assert commands(events) == {1: (0, 0, 0), 2: (0, 0, 0)} if not stop_all else commands(events) == {1: (0, 0, 0)}


def test_a_stronger_later_phase_is_what_the_emulator_reports():
    """Issue 34's two attacks at the emulator: the channel command is the envelope, not the first phase."""
    s = Session()
    s.send(ll_init(), 0.0)
    ack, events = s.send(pulse_packet(4, [(390, 100), (300, -130)]), 0.0)
    assert ack.result == ResultAndError.NO_ERROR and commands(events) == {4: (390, 130, 10.0)}
    assert s.emu.counters["unbalanced_pulses"] == 0                    # charge-balanced: no notice either
    s.send(PacketLowLevelStop(), 0.1)
    s.send(ml_init(), 0.1)
    ack, events = s.send(update_packet((4, 0, 62, [(10, 0.5)] + [(4095, -130)] * 15)), 0.2)
    assert ack.result_error == ResultAndError.NO_ERROR
    assert commands(events) == {4: pytest.approx((15 * 4095, 130, 1000 / 62))}


def test_charge_unbalanced_pulses_are_counted_and_reported_once_per_channel():
    s = Session()
    s.send(ll_init(), 0.0)
    for k in range(3):
        _, events = s.send(pulse_packet(5, [(200, 20)]), 0.03 * k)                # monophasic
        assert [e for e in events if isinstance(e, Notice)] == ([Notice(
            "channel 5: charge-unbalanced pulses (net charge 4000 nC per pulse)")] if k == 0 else [])
    s.send(pulse_packet(5, [(200, 20), (400, -10)]), 0.1)                         # balanced
    assert (s.emu.counters["pulses"], s.emu.counters["unbalanced_pulses"]) == (4, 3)
    s.send(PacketLowLevelStop(), 0.2)
    s.send(ml_init(), 0.2)
    s.send(update_packet((6, 0, 20, [(200, 20), (100, -20)])), 1.0)             # 50 Hz, unbalanced
    s.poll(1.999)                                                                  # pulses at 1.00 .. 1.98
    assert s.emu.counters["unbalanced_pulses"] == 3 + 50
    s.send(PacketMidLevelStop(), 2.0)                                              # the pulse at 2.00 ran
    assert s.emu.counters["unbalanced_pulses"] == 3 + 51
