"""ScienceMode2 codec and RehaStim2 emulator (drivers/stimulators/rehastim2/device.py) against the protocol as pysciencemode uses it.

PC-side frames come from pysciencemode 1.1.5 itself (``packet_construction`` and the ``Rehastim2`` packet
builders, called on an instance that never opens a port); device replies are checked with its reply
splitter (``RehastimGeneric._read_packet`` on a stub port) and its ack interpreters.
"""
from types import SimpleNamespace

import pysciencemode.utils as psm_utils  # a test dependency (pyproject [test]): never skipped
import pytest
from pysciencemode import Channel, Rehastim2, RehastimGeneric
from pysciencemode.acks import get_mode_ack, init_stimulation_ack, start_stimulation_ack, stop_stimulation_ack

from drivers.stimulators.rehastim2.codec import (
    CMD_GET_MODE,
    CMD_GET_MODE_ACK,
    CMD_INIT,
    CMD_INIT_ACK,
    CMD_INIT_CLM,
    CMD_INIT_CLM_ACK,
    CMD_START_CLM,
    CMD_START_CLM_ACK,
    CMD_STOP_CLM,
    CMD_STOP_CLM_ACK,
    CMD_UNKNOWN,
    CMD_WATCHDOG,
    MODE_INITIALISED,
    MODE_RUNNING,
    MODE_START,
    RESULT_OK,
    RESULT_PARAMETER_ERROR,
    RESULT_WRONG_MODE,
    Frame,
    FrameError,
    FrameParser,
    crc8,
    encode_frame,
    signed8,
    stuff,
)
from drivers.stimulators.rehastim2.device import (
    Activity,
    ChannelSetting,
    Connected,
    Rehastim2Emulator,
    Rejected,
    StimulationChanged,
)

packet_construction = psm_utils.packet_construction

SPEC_EXAMPLES = [  # (hex, counter, command, data) from spec "Frame"
    ("f0 81 49 81 57 00 04 0f", 0, CMD_WATCHDOG, b""),
    ("f0 81 bf 81 56 05 02 00 0f", 5, CMD_INIT_ACK, b"\x00"),
    ("f0 81 ae 81 57 01 22 0f", 1, CMD_STOP_CLM, b""),
    ("f0 81 00 81 5c 02 1e 00 05 00 01 00 30 00 0f", 2, CMD_INIT_CLM, bytes([0, 5, 0, 1, 0, 0x30, 0])),
    ("f0 81 ff 81 58 03 20 00 00 81 a5 81 5f 01 01 2c 81 00 0f", 3, CMD_START_CLM,
     bytes([0, 0, 240, 10, 1, 1, 44, 85])),
]
ALL_EXAMPLES = b"".join(bytes.fromhex(h) for h, *_ in SPEC_EXAMPLES)


def parse_one(raw: bytes):
    items = FrameParser().feed(raw)
    assert len(items) == 1, items
    return items[0]


def pysciencemode_split(stream: bytes) -> list[bytes]:
    """pysciencemode's own reply splitter, run on a stub port that holds ``stream``."""
    assert stream.endswith(b"\x0f")   # otherwise _read_packet spins forever
    chunks = [stream]
    port = SimpleNamespace(inWaiting=lambda: len(chunks[0]) if chunks else 0,
                           read=lambda n: chunks.pop(0) if chunks else b"")
    return RehastimGeneric._read_packet(SimpleNamespace(port=port, START_BYTE=0xF0, STOP_BYTE=0x0F))


def client(period_ms, channels, inter_pulse_interval=2, low_frequency_factor=0):
    """A pysciencemode Rehastim2 that never opens a port: only its packet builders are used."""
    c = Rehastim2.__new__(Rehastim2)
    c.packet_count = 0
    c.stimulation_interval = period_ms
    c.inter_pulse_interval = inter_pulse_interval
    c.low_frequency_factor = low_frequency_factor
    c.electrode_number = psm_utils.calc_electrode_number(channels)
    c.electrode_number_low_frequency = psm_utils.calc_electrode_number(channels, enable_low_frequency=True)
    c.list_channels = channels
    c.set_stimulation_signal(channels)
    return c


def channels(amp1=10, amp3=85):
    return [Channel(mode="Single", no_channel=1, amplitude=amp1, pulse_width=240, device_type="Rehastim2"),
            Channel(mode="Doublet", no_channel=3, amplitude=amp3, pulse_width=300, device_type="Rehastim2")]


def connected_emulator(**kwargs):
    emu = Rehastim2Emulator(**kwargs)
    init = emu.poll(0.0)[0]
    replies, events = emu.receive(
        packet_construction(0, "Watchdog") + RehastimGeneric._init_ack(init[5]), 0.01)
    assert replies == [] and events[-1] == Connected(init[5]) and emu.connected
    return emu


def send(emu, frame, now_s=1.0):
    """Send one command; exactly one reply must come back. Returns (decoded reply, raw reply, events)."""
    replies, events = emu.receive(frame, now_s)
    assert len(replies) == 1, replies
    reply = parse_one(replies[0])
    assert isinstance(reply, Frame) and reply.counter == parse_one(frame).counter
    return reply, replies[0], events


def check_reply_bytes(raw: bytes):
    """What pysciencemode needs from a reply: one frame of >= 9 bytes, F0 only first, 0F only last.
    The CRC byte (index 2) may be 0F/F0 (spec "Frame"); pysciencemode only splits at a 0F from byte 8 on."""
    assert len(raw) >= 9 and raw[0] == 0xF0 and raw[-1] == 0x0F
    assert 0x0F not in raw[3:-1] and 0xF0 not in raw[3:-1]
    assert pysciencemode_split(raw) == [raw]


# --- codec ---------------------------------------------------------------------------------------------

def test_crc_check_value():
    assert crc8(b"123456789") == 0xF4
    assert crc8(b"") == 0


@pytest.mark.parametrize("hex_frame,counter,command,data", SPEC_EXAMPLES)
def test_spec_examples_decode_and_encode(hex_frame, counter, command, data):
    raw = bytes.fromhex(hex_frame)
    assert parse_one(raw) == Frame(counter, command, data)
    assert encode_frame(counter, command, data) == raw


def test_example_frames_match_pysciencemode():
    assert packet_construction(0, "Watchdog") == bytes.fromhex(SPEC_EXAMPLES[0][0])
    assert RehastimGeneric._init_ack(5) == bytes.fromhex(SPEC_EXAMPLES[1][0])
    assert packet_construction(1, "StopChannelListMode") == bytes.fromhex(SPEC_EXAMPLES[2][0])
    c = client(25, channels())
    c.packet_count = 2
    assert c._packet_init_stimulation() == bytes.fromhex(SPEC_EXAMPLES[3][0])
    c.packet_count = 3
    assert c._packet_start_stimulation() == bytes.fromhex(SPEC_EXAMPLES[4][0])


def test_stuffing():
    assert stuff(bytes([10])) == b"\x81\x5f"
    assert stuff(bytes([0xF0, 0x0F, 0x81, 0x55, 0x0A, 0x00, 0x5F])) == bytes.fromhex("81a5815a81d4810081 5f005f")


def test_counter_and_command_quirk_round_trip():
    """encode_frame equals the client's encoding for every counter, and decode/encode is lossless."""
    for counter in range(256):
        for name, command, data in (("Watchdog", CMD_WATCHDOG, None), ("InitAck", CMD_INIT_ACK, [0]),
                                    ("GetStimulationMode", CMD_GET_MODE, None)):
            raw = packet_construction(counter, name, data)
            assert encode_frame(counter, command, bytes(data or [])) == raw
            frame = parse_one(raw)
            assert frame.command == command and encode_frame(frame.counter, frame.command, frame.data) == raw


def test_get_stimulation_mode_arrives_as_5f():
    raw = packet_construction(0, "GetStimulationMode")
    assert raw[6] == 0x5F and 0x0A not in raw
    assert parse_one(raw) == Frame(0, CMD_GET_MODE, b"")
    # a properly escaped CMD is accepted too
    payload = bytes([0x07, 0x81, 0x5F])
    escaped = bytes([0xF0, 0x81, crc8(payload) ^ 0x55, 0x81, len(payload) ^ 0x55]) + payload + b"\x0f"
    assert parse_one(escaped) == Frame(7, CMD_GET_MODE, b"")


def test_split_byte_by_byte_and_several_frames_per_read():
    expected = [Frame(c, cmd, d) for _, c, cmd, d in SPEC_EXAMPLES]
    assert FrameParser().feed(ALL_EXAMPLES) == expected
    parser = FrameParser()
    items = []
    for b in ALL_EXAMPLES:
        items += parser.feed(bytes([b]))
    assert items == expected and parser.pending == 0


def test_garbage_before_a_frame():
    parser = FrameParser()
    frame = bytes.fromhex(SPEC_EXAMPLES[2][0])
    assert parser.feed(b"\x00\x0f\x81junk" + frame) == [FrameError("bad_frame", b"\x00\x0f\x81junk"),
                                                          Frame(1, CMD_STOP_CLM, b"")]
    assert parser.feed(b"\x13\x37") == [FrameError("bad_frame", b"\x13\x37")]
    assert parser.feed(frame[:4]) == [] and parser.feed(frame[4:]) == [Frame(1, CMD_STOP_CLM, b"")]


@pytest.mark.parametrize("crc_byte", [0x0F, 0xF0])
def test_crc_byte_equal_to_0f_or_f0(crc_byte):
    counters = [c for c in range(256) if encode_frame(c, CMD_WATCHDOG)[2] == crc_byte]
    assert counters
    raw = encode_frame(counters[0], CMD_WATCHDOG)
    expected = Frame(counters[0], CMD_WATCHDOG, b"")
    assert parse_one(raw) == expected
    parser = FrameParser()
    items = []
    for b in b"\x0f\xf0\x00" + raw + raw:   # garbage, a broken frame start, then two frames, byte by byte
        items += parser.feed(bytes([b]))
    assert items == [FrameError("bad_frame", b"\x0f"), FrameError("bad_frame", b"\xf0\x00"), expected, expected]


def _with_payload(payload: bytes, crc=None, length=None) -> bytes:
    crc = crc8(payload) if crc is None else crc
    length = len(payload) if length is None else length
    return bytes([0xF0, 0x81, crc ^ 0x55, 0x81, length ^ 0x55]) + payload + b"\x0f"


GOOD = bytes.fromhex(SPEC_EXAMPLES[0][0])
STOP = bytes.fromhex(SPEC_EXAMPLES[2][0])
BROKEN = {
    "bad_checksum": [STOP[:2] + bytes([STOP[2] ^ 1]) + STOP[3:]],
    "bad_length": [_with_payload(b"\x01\x22", length=1), _with_payload(b"\x01\x22", length=200),
                   _with_payload(b"\x01\x22", length=3),                     # 0F then the next F0
                   _with_payload(bytes([2, 0x1E, 0, 5, 0, 1, 0, 0x30, 0]), length=8)],   # 00 where 0F is due
    "bad_frame": [STOP[:1] + b"\x00" + STOP[2:], STOP[:3] + b"\x00" + STOP[4:],         # missing 81 escapes
                  STOP[:-1],                                                 # 0F missing, cut by next F0
                  _with_payload(bytes([1, 0x20, 0x0A])),                     # unstuffed 0A in DATA
                  _with_payload(bytes([1, 0x20, 0x81])),                     # dangling escape
                  _with_payload(bytes([1, 0x20, 0x81, 0x01]))],              # escape of a normal byte
}


@pytest.mark.parametrize("reason,raw", [(r, x) for r, xs in BROKEN.items() for x in xs])
def test_errors_are_reported_and_parser_recovers(reason, raw):
    items = FrameParser().feed(raw + GOOD)
    assert [type(i) for i in items] == [FrameError, Frame]
    assert items[0].reason == reason and items[1] == Frame(0, CMD_WATCHDOG, b"")
    parser = FrameParser()   # same, byte by byte
    items = [i for b in raw + GOOD for i in parser.feed(bytes([b]))]
    assert [getattr(i, "reason", None) for i in items] == [reason, None]


def test_errors_in_emulator_are_counted_and_a_readable_command_gets_a_transfer_error():
    emu = connected_emulator()
    before = dict(emu.counters)
    stream = b"".join(x for xs in BROKEN.values() for x in xs) + GOOD
    replies, events = emu.receive(stream, 2.0)
    [reply] = replies                      # only the Stop with a bad CRC: StopChannelListModeAck [-1]
    assert parse_one(reply) == Frame(1, CMD_STOP_CLM_ACK, bytes([0xFF]))
    assert stop_stimulation_ack(reply) != "Stimulation stopped"
    assert events[-1] == Activity()
    assert {r: sum(1 for e in events if e == Rejected(r, None)) for r in BROKEN} == {
        r: len(xs) for r, xs in BROKEN.items()}
    for reason, xs in BROKEN.items():
        assert emu.counters[reason] - before[reason] == len(xs)
    assert emu.last_activity_s == 2.0 and emu.connected
    reply, _, _ = send(emu, packet_construction(3, "GetStimulationMode"))
    assert reply.data == bytes([0, MODE_START])


def test_buffer_stays_bounded():
    parser = FrameParser()
    items = parser.feed(bytes(100_000) + STOP[:6])
    assert items == [FrameError("bad_frame", bytes(100_000))] and parser.pending == 6
    big = _with_payload(bytes([1, 0x20]) + bytes(126))   # the largest frame, 134 bytes, byte by byte
    items, pending = [], []
    for b in big + big[:100]:
        items += parser.feed(bytes([b]))
        pending.append(parser.pending)
    assert items == [FrameError("bad_frame", STOP[:6]), Frame(1, 0x20, bytes(126))]
    assert max(pending) == 133 and parser.pending == 100


def test_encode_frame_rejects_bad_values():
    with pytest.raises(ValueError):
        encode_frame(256, 1)
    with pytest.raises(ValueError):
        encode_frame(0, 32, bytes([10]) * 64)     # 128 stuffed data bytes + 2 > 128


# --- emulator ------------------------------------------------------------------------------------------

def test_full_session_with_pysciencemode_frames():
    emu = Rehastim2Emulator()
    [init] = emu.poll(0.0)
    assert parse_one(init) == Frame(init[5], CMD_INIT, b"\x01") and len(init) >= 9
    assert pysciencemode_split(init)[-1] == init    # what the client's connect loop picks up
    replies, events = emu.receive(packet_construction(0, "Watchdog") + RehastimGeneric._init_ack(init[5]), 0.05)
    assert replies == [] and events == [Activity(), Connected(init[5])] and emu.connected
    assert emu.poll(0.3) == [] and emu.poll(5.0) == []

    c = client(25, channels())
    all_replies = []

    def command(frame, now_s):
        reply, raw, events = send(emu, frame, now_s)
        check_reply_bytes(raw)
        all_replies.append(raw)
        return reply, raw, events

    # init_channel: Stop (in the start mode), then InitChannelListMode
    c.packet_count = 1
    reply, raw, events = command(packet_construction(c.packet_count, "StopChannelListMode"), 0.1)
    assert (reply.command, reply.data, events) == (CMD_STOP_CLM_ACK, b"\x00", [])
    assert stop_stimulation_ack(raw) == "Stimulation stopped"
    c.packet_count = 2
    reply, raw, events = command(c._packet_init_stimulation(), 0.2)
    assert (reply.command, reply.data, events) == (CMD_INIT_CLM_ACK, b"\x00", [StimulationChanged(None)])
    assert init_stimulation_ack(raw) == "Stimulation initialized" and emu.mode == MODE_INITIALISED

    # start_stimulation
    c.packet_count = 3
    reply, raw, events = command(c._packet_start_stimulation(), 0.3)
    assert start_stimulation_ack(raw) == "Stimulation started" and emu.mode == MODE_RUNNING
    [changed] = events
    stim = changed.stimulation
    assert stim == emu.stimulation
    assert stim.channels == (ChannelSetting(1, 0, 240, 10), ChannelSetting(3, 1, 300, 85))
    assert (stim.period_ms, stim.frequency_hz, stim.inter_pulse_interval_ms) == (25.0, 40.0, 2.0)
    assert (stim.low_frequency_factor, stim.low_frequency_mask, stim.counter) == (0, 0, 3)

    # update, with counter 10 (the 5F quirk on COUNTER)
    c.set_stimulation_signal(channels(amp1=20, amp3=30))
    c.packet_count = 10
    frame = c._packet_start_stimulation()
    assert frame[5] == 0x5F
    reply, raw, events = command(frame, 0.4)
    assert raw[5] == 0x5F and reply.counter == 10
    assert events[0].stimulation.channels == (ChannelSetting(1, 0, 240, 20), ChannelSetting(3, 1, 300, 30))
    assert events[0].stimulation.counter == 10

    # pause: all amplitudes 0 (what pause_stimulation sends)
    c.amplitude = [0, 0]
    c.packet_count = 11
    reply, raw, events = command(c._packet_start_stimulation(), 0.5)
    assert [ch.amplitude_ma for ch in events[0].stimulation.channels] == [0, 0]
    assert emu.mode == MODE_RUNNING

    reply, raw, events = command(packet_construction(12, "GetStimulationMode"), 0.6)
    assert (reply.command, reply.data) == (CMD_GET_MODE_ACK, bytes([RESULT_OK, MODE_RUNNING]))
    assert get_mode_ack(raw) == "Stimulation started"

    # end_stimulation
    reply, raw, events = command(packet_construction(13, "StopChannelListMode"), 0.7)
    assert events == [StimulationChanged(None)] and emu.stimulation is None and emu.mode == MODE_START
    reply, raw, events = command(packet_construction(0, "GetStimulationMode"), 0.8)
    assert get_mode_ack(raw) == "Start Mode"

    assert emu.last_activity_s == 0.8
    assert emu.counters["frames_in"] == 2 + len(all_replies)
    assert emu.counters["replies_out"] == len(all_replies) and emu.counters["watchdogs"] == 1
    # all replies buffered together still split into the same frames with the client's splitter
    assert pysciencemode_split(b"".join(all_replies)) == all_replies


def test_every_reply_survives_pysciencemode_splitter():
    """Every reply kind for every request counter (some replies have a CRC byte of 0F or F0): the
    client's splitter and ack readers handle them."""
    for counter in range(256):
        _check_replies_for_counter(counter)


def _check_replies_for_counter(counter):
    emu = connected_emulator()
    c = client(25, channels())
    frames = [packet_construction(counter, "StopChannelListMode"),
              packet_construction(counter, "GetStimulationMode"),
              packet_construction(counter, "StartChannelListMode", [0, 0, 20, 10]),   # wrong mode
              packet_construction(counter, "InitChannelListMode", [0, 5, 0, 1, 0, 0x30, 0]),
              packet_construction(counter, "GetStimulationMode"),
              packet_construction(counter, "InitChannelListMode", [0, 5, 0, 1, 0, 0x30]),  # bad length
              packet_construction(counter, "StartChannelListMode", [0, 0, 20, 10]),   # bad length
              packet_construction(counter, "SinglePulse", [1]),                       # unknown
              encode_frame(counter, 0x0F)]                                            # unknown, sent as 5A
    c.packet_count = counter
    frames.append(c._packet_start_stimulation())
    frames.append(packet_construction(counter, "GetStimulationMode"))
    replies = []
    for frame in frames:
        _, raw, _ = send(emu, frame)
        check_reply_bytes(raw)
        assert raw[5] == frame[5]   # the COUNTER byte is echoed as received
        replies.append(raw)
    assert pysciencemode_split(b"".join(replies)) == replies
    assert [r[6] for r in replies] == [35, 11, 33, 31, 11, 31, 33, 3, 3, 33, 11]
    assert get_mode_ack(replies[-1]) == "Stimulation started"
    assert [signed8(r[7]) for r in replies[2:7]] == [RESULT_WRONG_MODE, 0, 0, RESULT_PARAMETER_ERROR,
                                                     RESULT_PARAMETER_ERROR]


def test_wrong_mode():
    emu = connected_emulator()
    c = client(25, channels())
    reply, raw, events = send(emu, c._packet_start_stimulation())
    assert (reply.command, signed8(reply.data[0])) == (CMD_START_CLM_ACK, RESULT_WRONG_MODE)
    assert events == [Rejected("wrong_mode", CMD_START_CLM)] and emu.counters["wrong_mode"] == 1
    assert start_stimulation_ack(raw) == "Wrong mode error" and emu.mode == MODE_START
    send(emu, c._packet_init_stimulation())
    send(emu, c._packet_start_stimulation())
    reply, _, events = send(emu, c._packet_init_stimulation())
    assert (reply.command, signed8(reply.data[0])) == (CMD_INIT_CLM_ACK, RESULT_WRONG_MODE)
    assert events == [Rejected("wrong_mode", CMD_INIT_CLM)] and emu.mode == MODE_RUNNING
    assert emu.stimulation.channels[0] == ChannelSetting(1, 0, 240, 10)
    # re-init is allowed while initialised (not running)
    send(emu, packet_construction(1, "StopChannelListMode"))
    send(emu, c._packet_init_stimulation())
    reply, _, events = send(emu, c._packet_init_stimulation())
    assert reply.data == b"\x00" and events == [StimulationChanged(None)] and emu.mode == MODE_INITIALISED


INIT_25MS = [0, 5, 0, 1, 0, 48, 0]


@pytest.mark.parametrize("init_data", [
    [0, 0, 0, 1, 0, 48, 0],        # no active channel
    [0, 5, 0, 1, 0, 8, 0],         # 5 ms period
    [0, 5, 0, 1, 8, 1, 0],         # 1025.5 ms period
    [8, 5, 0, 1, 0, 48, 0],        # low-frequency factor 8
    [0, 5, 2, 1, 0, 48, 0],        # low-frequency channel not active
    [0, 5, 0, 0, 0, 48, 0],        # IPI 1.5 ms
    [0, 5, 0, 1, 0, 48, 1],        # last byte not 0
])
def test_init_out_of_range(init_data):
    emu = connected_emulator()
    reply, raw, events = send(emu, packet_construction(1, "InitChannelListMode", init_data))
    assert (reply.command, signed8(reply.data[0])) == (CMD_INIT_CLM_ACK, RESULT_PARAMETER_ERROR)
    assert init_stimulation_ack(raw) == "Parameter error"
    assert events == [Rejected("out_of_range", CMD_INIT_CLM)] and emu.counters["out_of_range"] == 1
    assert emu.mode == MODE_START


def test_init_limits_and_channel_count():
    emu = connected_emulator(n_channels=4)
    reply, _, events = send(emu, packet_construction(1, "InitChannelListMode", [0, 0x10, 0, 1, 0, 48, 0]))
    assert signed8(reply.data[0]) == RESULT_PARAMETER_ERROR and events == [Rejected("out_of_range", 30)]
    # channels 1..4, lf on 2, IPI 129 ms, T 1025 ms, factor 7: all at the limits
    reply, _, _ = send(emu, packet_construction(2, "InitChannelListMode", [7, 0x0F, 0x02, 255, 8, 0, 0]))
    assert reply.data == b"\x00"
    reply, _, events = send(emu, packet_construction(3, "StartChannelListMode", [2, 1, 244, 130] * 4))
    stim = events[0].stimulation
    assert [ch.channel for ch in stim.channels] == [1, 2, 3, 4]
    assert (stim.period_ms, stim.inter_pulse_interval_ms, stim.low_frequency_factor,
            stim.low_frequency_mask) == (1025.0, 129.0, 7, 2)
    assert stim.channels[0] == ChannelSetting(1, 2, 500, 130)
    reply, _, events = send(emu, packet_construction(4, "InitChannelListMode", INIT_25MS[:6]))
    assert events == [Rejected("wrong_mode", 30)]   # the mode is checked before the length


@pytest.mark.parametrize("start_data,reason", [
    ([0, 2, 88, 10, 1, 1, 44, 85], "out_of_range"),     # pulse width 600 us
    ([0, 0, 240, 140, 1, 1, 44, 85], "out_of_range"),   # amplitude 140 mA
    ([3, 0, 240, 10, 1, 1, 44, 85], "out_of_range"),    # pulse mode 3
    ([0, 0, 240, 10], "bad_length"),                    # one channel of two
    ([0, 0, 240, 10, 1, 1, 44, 85, 0, 0, 0, 0], "bad_length"),
])
def test_start_rejected_applies_nothing(start_data, reason):
    emu = connected_emulator()
    send(emu, packet_construction(1, "InitChannelListMode", INIT_25MS))
    reply, raw, events = send(emu, packet_construction(2, "StartChannelListMode", start_data))
    assert (reply.command, signed8(reply.data[0])) == (CMD_START_CLM_ACK, RESULT_PARAMETER_ERROR)
    assert start_stimulation_ack(raw) == "Parameter error"
    assert events == [Rejected(reason, CMD_START_CLM)] and emu.counters[reason] == 1
    assert emu.mode == MODE_INITIALISED and emu.stimulation is None
    # while running, a rejected update keeps the running stimulation
    send(emu, packet_construction(3, "StartChannelListMode", [0, 0, 240, 10, 1, 1, 44, 85]))
    running = emu.stimulation
    send(emu, packet_construction(4, "StartChannelListMode", start_data))
    assert emu.stimulation == running and emu.mode == MODE_RUNNING


def test_unknown_command():
    emu = connected_emulator()
    reply, raw, events = send(emu, packet_construction(7, "SinglePulse", [1, 2]))
    assert reply == Frame(7, CMD_UNKNOWN, bytes([36])) and len(raw) >= 9
    assert events == [Rejected("unknown_command", 36)] and emu.counters["unknown_command"] == 1
    reply, raw, _ = send(emu, encode_frame(8, 0x0F))   # id 15 arrives as 5A, the reply carries 81 5A
    assert reply == Frame(8, CMD_UNKNOWN, bytes([15])) and 0x0F not in raw[3:-1]
    reply, _, _ = send(emu, encode_frame(9, CMD_INIT))   # device-to-PC commands are unknown here
    assert reply.data == bytes([CMD_INIT])


def test_commands_before_init_ack_are_served_but_do_not_connect():
    emu = Rehastim2Emulator()
    reply, _, events = send(emu, packet_construction(0, "StopChannelListMode"), 0.0)
    assert reply.data == b"\x00" and events == [] and not emu.connected
    assert len(emu.poll(0.0)) == 1


def test_init_resend_and_init_ack_counter():
    emu = Rehastim2Emulator(init_resend_s=0.2)
    times = [0.0, 0.1, 0.19, 0.2, 0.3, 0.4, 0.6, 0.79, 0.8]
    sent = {t: emu.poll(t) for t in times}
    assert [t for t in times if sent[t]] == [0.0, 0.2, 0.4, 0.6, 0.8]
    counters = [parse_one(sent[t][0]).counter for t in times if sent[t]]
    assert counters == [1, 2, 3, 4, 5]
    assert emu.counters["inits_sent"] == 5
    last = sent[0.8][0]

    _, events = emu.receive(RehastimGeneric._init_ack(last[5] + 1), 0.85)          # wrong counter
    assert events == [Rejected("out_of_range", CMD_INIT_ACK)] and not emu.connected
    _, events = emu.receive(RehastimGeneric._init_ack(counters[-3]), 0.86)        # an older Init
    assert events == [Rejected("out_of_range", CMD_INIT_ACK)] and not emu.connected
    assert emu.poll(1.0) and emu.counters["out_of_range"] == 2
    late = Rehastim2Emulator(init_resend_s=0.2)          # the InitAck of the Init sent just before the last
    [first], [_] = late.poll(0.0), late.poll(0.2)
    _, events = late.receive(RehastimGeneric._init_ack(first[5]), 0.21)
    assert events == [Connected(first[5])] and late.connected
    [init] = emu.poll(1.2)
    replies, events = emu.receive(RehastimGeneric._init_ack(init[5]), 1.25)
    assert replies == [] and events == [Connected(init[5])] and emu.connected
    assert emu.poll(1.4) == [] and emu.poll(10.0) == []
    _, events = emu.receive(RehastimGeneric._init_ack(init[5]), 1.5)               # duplicate: ignored
    assert events == []

    emu.reset()
    assert not emu.connected and emu.mode == MODE_START and emu.stimulation is None
    assert emu.last_activity_s is None
    [again] = emu.poll(10.0)
    assert parse_one(again).counter != parse_one(init).counter


def test_init_counters_are_never_ambiguous():
    emu = Rehastim2Emulator(init_resend_s=0.1)
    seen = set()
    for i in range(600):
        frames = emu.poll(i * 0.1)
        [init] = frames
        assert init[5] not in {0x00, 0x0A, 0x0F, 0x55, 0x81, 0xF0, 0x5F, 0x5A, 0xA5, 0xD4}
        assert parse_one(init).counter == init[5]
        check_reply_bytes(init)
        seen.add(init[5])
    assert len(seen) == 256 - 10


def test_reset_drops_a_partial_frame_and_stop_reports_change():
    emu = connected_emulator()
    send(emu, packet_construction(1, "InitChannelListMode", INIT_25MS))
    send(emu, packet_construction(2, "StartChannelListMode", [0, 0, 240, 10, 1, 1, 44, 85]))
    assert emu.receive(STOP[:5], 2.0) == ([], [])
    emu.reset()
    assert emu.mode == MODE_START and emu.stimulation is None
    replies, events = emu.receive(STOP, 3.0)   # a whole Stop after the reset: no leftovers, no error
    assert len(replies) == 1 and events == []
