"""Seeded fuzz tests of the parsers that face external controllers: the ScienceMode2 frame parser and
RehaStim2 emulator (drivers/stimulators/rehastim2/device.py), CAN frame validation (drivers/can/driver.py) and the sensor stream
reader (drivers/stimulators/sensor_stream.py).

Every test draws from a fixed seed, so a failure reproduces; none depends on timing. Noise is random
bytes and mutations of valid traffic (bit flips, truncation, insertion, duplication), fed in chunks cut at
random read boundaries. The invariants: nothing raises, buffers stay bounded, every frame is accepted
or rejected with a reason of drivers.core.contract.REJECT_REASONS (counters add up), an intact frame is decoded
as soon as its last byte arrives whatever came before it, and clean traffic works after the noise.
"""
from __future__ import annotations

import random
from pathlib import Path

import can
import cantools
import numpy as np
import pytest

from drivers.can.dbc import FRAME_ID_EXCITATION, FRAME_ID_GROUP, FRAME_ID_HEARTBEAT, FRAME_ID_STIM
from drivers.can.driver import CanEndpoint
from drivers.core.contract import REJECT_REASONS, frame_dtype
from drivers.ipc.link import (
    AUX_FRAMES_IN,
    AUX_REJECTS_TOTAL,
    INBOUND_AUX_WORDS,
    KIND_CHANNEL,
    LINK_RECORD,
    Inbound,
    reject_counts,
)
from drivers.ipc.shm_ring import ShmRing
from drivers.stimulators.rehastim2.codec import (
    CMD_GET_MODE,
    CMD_INIT_ACK,
    CMD_INIT_CLM,
    CMD_START_CLM,
    CMD_STOP_CLM,
    CMD_UNKNOWN,
    CMD_WATCHDOG,
    MAX_FRAME_SIZE,
    MODE_RUNNING,
    Frame,
    FrameError,
    FrameParser,
    encode_frame,
)
from drivers.stimulators.rehastim2.device import (
    COUNTER_KEYS,
    Activity,
    Connected,
    Rehastim2Emulator,
    Rejected,
    StimulationChanged,
)
from drivers.stimulators.sensor_stream import SYNC, SensorStreamReader, encode_packet
from sim.das3.model import load_model

ROOT = Path(__file__).resolve().parents[2]
DBC = ROOT / "configs" / "fes-hil.dbc"
SEED = 20240611


def random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(n))


def mutate(rng: random.Random, raw: bytes, special: bytes) -> bytes:
    """One random corruption of ``raw``: bit flip, truncation, insertion (random or ``special`` bytes),
    duplication, a cut-off head, or plain random bytes."""
    b = bytearray(raw)
    op = rng.randrange(7)
    if op == 0:
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif op == 1:
        del b[rng.randrange(len(b)):]
    elif op == 2:
        i = rng.randrange(len(b) + 1)
        b[i:i] = random_bytes(rng, rng.randint(1, 6))
    elif op == 3:
        i = rng.randrange(len(b) + 1)
        b[i:i] = bytes(rng.choice(special) for _ in range(rng.randint(1, 3)))
    elif op == 4:
        b += bytes(b)
    elif op == 5:
        del b[rng.randint(1, 4):]          # a frame cut off after its first bytes ("F0 81", "A5 5A 01")
    else:
        b = bytearray(random_bytes(rng, rng.randint(1, 40)))
    return bytes(b)


def cut(rng: random.Random, stream: bytes, max_chunk: int):
    """``stream`` in chunks of random size (random read boundaries): (chunk, bytes fed so far)."""
    i = 0
    while i < len(stream):
        n = rng.randint(1, max_chunk)
        yield stream[i:i + n], min(i + n, len(stream))
        i += n


def check_intact_in_order(decoded: list, intact: list, fed: int, matched: int) -> int:
    """``intact`` lists (end offset, item) in stream order; every one whose last byte was fed must have
    been decoded, in order (``decoded`` may hold more: noise can contain valid frames). Returns the
    number matched so far."""
    pos = 0
    for i, (end, item) in enumerate(intact):
        if end > fed:
            break
        while pos < len(decoded) and decoded[pos] != item:
            pos += 1
        assert pos < len(decoded), f"intact item {i} (ends at byte {end}, {fed} fed) not decoded: {item}"
        pos += 1
        matched = max(matched, i + 1)
    return matched


# --- ScienceMode2 ---------------------------------------------------------------------------------------

SM2_SPECIAL = bytes([0xF0, 0x0F, 0x81, 0x55, 0x0A, 0x5F, 0x00])
ACKS = {CMD_GET_MODE: 11, CMD_INIT_CLM: 31, CMD_START_CLM: 33, CMD_STOP_CLM: 35}


def rare(rng: random.Random, usual: int, *unusual: int) -> int:
    """``usual`` mostly, else one of ``unusual`` (limit values and just beyond them)."""
    return rng.choice(unusual) if rng.random() < 0.15 else usual


def random_command(rng: random.Random, active: int | None = None) -> bytes:
    """A well-formed PC-side frame: any counter, mostly known commands with plausible data (with
    ``active``, an InitChannelListMode for that channel mask or a StartChannelListMode of that many
    channels), sometimes values at or beyond the limits, wrong lengths or unknown ids. InitAcks use
    counter 0, which no Init carries."""
    counter = rng.randrange(256)
    if active is not None:
        cmd = CMD_INIT_CLM if rng.random() < 0.3 else CMD_START_CLM
    else:
        cmd = rng.choice([CMD_WATCHDOG, CMD_WATCHDOG, CMD_GET_MODE, CMD_INIT_CLM, CMD_START_CLM, CMD_STOP_CLM,
                          CMD_INIT_ACK, rng.randrange(256)])
    if cmd == CMD_INIT_ACK:
        return encode_frame(0, cmd, b"\x00")
    if cmd == CMD_INIT_CLM and (active is not None or rng.random() < 0.7):
        active = active or rng.randint(1, 255)
        period = rare(rng, rng.randint(14, 2048), 13, 14, 2048, 2049)      # 8 .. 1025 ms
        data = bytes([rare(rng, rng.randint(0, 7), 8), active, active & rng.getrandbits(8),
                      rare(rng, rng.randint(1, 255), 0), period >> 8, period & 0xFF, rare(rng, 0, 1)])
    elif cmd == CMD_START_CLM and (active is not None or rng.random() < 0.7):
        n = bin(active).count("1") if active is not None else rng.randint(1, 8)
        data = b""
        for _ in range(rare(rng, n, n - 1, n + 1) if active is not None else n):
            pulse_width = rare(rng, rng.randint(0, 500), 500, 501, 1000)
            data += bytes([rare(rng, rng.randint(0, 2), 3), pulse_width >> 8, pulse_width & 0xFF,
                           rare(rng, rng.randint(0, 130), 130, 131)])
    else:
        data = random_bytes(rng, rng.choice([0, 0, 1, 2, 7, rng.randint(0, 40)]))
    return encode_frame(counter, cmd, data)


def random_session(rng: random.Random) -> list[bytes]:
    """What a client sends for one stimulation: Stop, InitChannelListMode, StartChannelListMode updates."""
    active = rng.choice([0b1, 0b101, 0b1111, rng.randint(1, 255)])
    frames = [encode_frame(rng.randrange(256), CMD_STOP_CLM), random_command(rng, active)]
    frames[1:1] = [random_command(rng, active) for _ in range(rng.randint(0, 1))]
    return frames + [random_command(rng, active) for _ in range(rng.randint(1, 4))]


def sm2_stream(rng: random.Random, n_segments: int) -> tuple[bytes, list[tuple[int, Frame]]]:
    """Intact frames, each unique (its data starts with a serial number), between noise segments:
    (stream, [(end offset, decoded frame)] of the intact ones)."""
    out, intact = bytearray(), []
    for k in range(n_segments):
        if rng.random() < 0.5:
            counter, cmd = rng.randrange(256), rng.choice([CMD_WATCHDOG, CMD_STOP_CLM, CMD_GET_MODE, 0x77])
            data = k.to_bytes(2, "big") + random_bytes(rng, rng.randint(0, 8))
            raw = encode_frame(counter, cmd, data)
            out += raw
            intact.append((len(out), FrameParser().feed(raw)[0]))
        else:
            out += mutate(rng, random_command(rng), SM2_SPECIAL)
    return bytes(out), intact


def test_sciencemode2_parser_fuzz_decodes_every_intact_frame_at_once():
    """Noise and intact frames, split at random read boundaries: no exception, the buffer stays under one
    frame, every error reason is a REJECT_REASONS entry, and every intact frame is decoded, in order, as
    soon as its last byte arrived (none is held back or swallowed by the noise before it)."""
    rng = random.Random(SEED)
    for trial in range(300):
        stream, intact = sm2_stream(rng, rng.randint(1, 30))
        parser, decoded, matched = FrameParser(), [], 0
        for chunk, fed in cut(rng, stream, rng.choice([1, 7, 64, 400])):
            for item in parser.feed(chunk):
                if isinstance(item, FrameError):
                    assert item.reason in REJECT_REASONS and item.raw, item
                else:
                    assert isinstance(item, Frame) and 0 <= item.counter <= 255 and 0 <= item.command <= 255
                    decoded.append(item)
            assert parser.pending < MAX_FRAME_SIZE
            matched = check_intact_in_order(decoded, intact, fed, matched)
        assert matched == len(intact), trial


def test_sciencemode2_parser_result_does_not_depend_on_read_boundaries():
    """The same bytes give the same frames and the same frame errors whether read at once or in random
    chunks (garbage before an F0 may be reported in several pieces, but the same bytes)."""
    rng = random.Random(SEED + 1)

    def normalised(items):
        garbage = b"".join(i.raw for i in items if isinstance(i, FrameError) and i.raw[0] != 0xF0)
        return [i if isinstance(i, Frame) else i.reason for i in items
                if isinstance(i, Frame) or i.raw[0] == 0xF0], garbage

    for _ in range(300):
        stream, _ = sm2_stream(rng, rng.randint(1, 30))
        whole = FrameParser().feed(stream)
        parser = FrameParser()
        pieces = [i for chunk, _ in cut(rng, stream, rng.choice([1, 5, 50])) for i in parser.feed(chunk)]
        assert normalised(pieces) == normalised(whole)


def test_sciencemode2_frame_after_a_cut_off_frame_head_is_decoded_at_once():
    """Regression (found by the fuzz tests): a frame cut off after "F0 81" followed by a whole frame, whose
    F0 then sits where the CRC byte goes (the CRC byte may be F0). The frame was held back until more
    bytes came (its CRC read as LEN), or swallowed with them as a bad CRC; now it is decoded at once."""
    for counter in range(256):
        frame = encode_frame(counter, CMD_WATCHDOG)
        for chunks in ([b"\xf0\x81" + frame], [b"\xf0\x81", frame], [bytes([b]) for b in b"\xf0\x81" + frame]):
            parser = FrameParser()
            items = [i for c in chunks for i in parser.feed(c)]
            assert [type(i) for i in items] == [FrameError, Frame], (counter, items)
            assert items[1] == FrameParser().feed(frame)[0] and items[0].raw.startswith(b"\xf0\x81")
            assert parser.pending == 0


def check_reply(raw: bytes) -> Frame:
    """A device reply: one whole frame of >= 9 bytes, F0 only first and 0F only last (from byte 3 on)."""
    assert len(raw) >= 9 and raw[0] == 0xF0 and raw[-1] == 0x0F
    assert 0x0F not in raw[3:-1] and 0xF0 not in raw[3:-1]
    [frame] = FrameParser().feed(raw)
    assert isinstance(frame, Frame)
    return frame


def check_emulator_chunk(emu, chunk: bytes, items: list, now_s: float) -> list:
    """Feed one chunk; check that every item of the reference parse is accounted for. Returns the events."""
    before = dict(emu.counters)
    replies, events = emu.receive(chunk, now_s)
    frames = [i for i in items if isinstance(i, Frame)]
    errors = [i for i in items if isinstance(i, FrameError)]
    delta = {k: emu.counters[k] - before[k] for k in COUNTER_KEYS}
    assert delta["frames_in"] == len(frames) and delta["replies_out"] == len(replies)
    assert delta["watchdogs"] == sum(f.command == CMD_WATCHDOG for f in frames)
    rejected = [e for e in events if isinstance(e, Rejected)]
    assert all(e.reason in REJECT_REASONS for e in rejected)
    assert [e.reason for e in rejected if e.command is None] == [e.reason for e in errors]
    reject_keys = ("bad_frame", "bad_checksum", "bad_length", "unknown_command", "wrong_mode", "out_of_range")
    assert sum(delta[k] for k in reject_keys) == len(rejected)
    # one reply per command (none for Watchdog and InitAck), in order, with the request's COUNTER byte;
    # besides, at most one transfer error (result -1) per frame with a bad CRC
    decoded = [check_reply(r) for r in replies]
    transfer = [r for r in decoded if r.data == b"\xff" and r.command in ACKS.values()]
    answers = [r for r in decoded if not (r.data == b"\xff" and r.command in ACKS.values())]
    assert len(transfer) <= sum(e.reason == "bad_checksum" for e in errors)
    expected = [f for f in frames if f.command not in (CMD_WATCHDOG, CMD_INIT_ACK)]
    assert len(answers) == len(expected)
    for request, reply in zip(expected, answers):
        assert encode_frame(reply.counter, 0)[5] == encode_frame(request.counter, 0)[5]
        if request.command in ACKS:
            assert reply.command == ACKS[request.command]
        else:
            assert (reply.command, reply.data) == (CMD_UNKNOWN, bytes([request.command]))
    # state: running exactly when a stimulation is applied, and that stimulation within the limits
    assert (emu.mode == MODE_RUNNING) == (emu.stimulation is not None)
    if emu.stimulation is not None:
        s = emu.stimulation
        assert 8 <= s.period_ms <= 1025 and 2 <= s.inter_pulse_interval_ms <= 129
        assert all(c.mode <= 2 and c.pulse_width_us <= 500 and c.amplitude_ma <= 130 for c in s.channels)
    assert emu._parser.pending < MAX_FRAME_SIZE
    return events


def test_sciencemode2_emulator_fuzz_accounts_for_every_frame_and_a_clean_session_follows():
    """Random commands and noise at random read boundaries: every frame is counted, answered once (or
    rejected with a reason), the state stays consistent; afterwards, without a reset, a client's
    Init/InitAck, Stop, InitChannelListMode and StartChannelListMode are each answered at once."""
    rng = random.Random(SEED + 2)
    started = 0
    for trial in range(300):
        emu = Rehastim2Emulator()
        reference = FrameParser()
        now = 0.0
        emu.poll(now)
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            frames = random_session(rng) if r < 0.3 else [random_command(rng)]
            parts += [mutate(rng, f, SM2_SPECIAL) if r > 0.7 or rng.random() < 0.1 else f for f in frames]
        for chunk, _ in cut(rng, b"".join(parts), rng.choice([1, 9, 80, 1000])):
            now += 0.01
            emu.poll(now)
            events = check_emulator_chunk(emu, chunk, reference.feed(chunk), now)
            started += sum(isinstance(e, StimulationChanged) and e.stimulation is not None for e in events)
        assert not emu.connected
        # the client (re)connects: it takes the newest Init, writes a Watchdog, then InitAck, then commands
        [init] = emu.poll(now + 1.0)
        counter = rng.randrange(256)
        watchdog = encode_frame(counter, CMD_WATCHDOG)
        events = check_emulator_chunk(emu, watchdog, reference.feed(watchdog), now + 1.01)
        assert [e for e in events if not isinstance(e, Rejected)] == [Activity()], (trial, events)   # + the tail
        init_ack = encode_frame(init[5], CMD_INIT_ACK, b"\x00")
        events = check_emulator_chunk(emu, init_ack, reference.feed(init_ack), now + 1.02)
        assert emu.connected and events == [Connected(init[5])], (trial, events)
        session = [(encode_frame((counter + 1) % 256, CMD_STOP_CLM), 35),
                   (encode_frame((counter + 2) % 256, CMD_INIT_CLM, bytes([0, 0b101, 0, 1, 0, 48, 0])), 31),
                   (encode_frame((counter + 3) % 256, CMD_START_CLM, bytes([0, 0, 240, 10, 1, 1, 44, 85])), 33)]
        for frame, ack in session:
            replies, events = emu.receive(frame, now + 1.1)
            reference.feed(frame)
            assert [(r.command, r.data) for r in map(check_reply, replies)] == [(ack, b"\x00")], trial
            assert not any(isinstance(e, Rejected) for e in events)
        assert isinstance(events[-1], StimulationChanged)
        assert [(c.channel, c.mode, c.pulse_width_us, c.amplitude_ma) for c in emu.stimulation.channels] == [
            (1, 0, 240, 10), (3, 1, 300, 85)]
        assert emu.stimulation.period_ms == 25.0 and emu._parser.pending == 0
    assert started > 100          # the fuzz reached the running mode, not only the error paths


# --- CAN ------------------------------------------------------------------------------------------------

MODEL = load_model()
CONTROLLER_IDS = (FRAME_ID_STIM, FRAME_ID_EXCITATION, FRAME_ID_GROUP, FRAME_ID_HEARTBEAT)
RESET_NS = 500_000_000


@pytest.fixture(scope="module")
def db():
    return cantools.database.load_file(str(DBC))


class Log:
    """Stands in for drivers.ipc.link.Inbound: records what the endpoint hands over."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def reject(self, now: int, reason: str, seq: int = -1) -> None:
        assert reason in REJECT_REASONS
        self.calls.append(("reject", reason))

    def channel(self, now, seq, channel, pulse_width_us, amplitude_ma, frequency_hz, mode) -> None:
        assert 0 <= channel < 8 and 0 <= pulse_width_us <= 1000 and 0 <= amplitude_ma <= 150
        assert 0 <= frequency_hz <= 200 and 0 <= mode <= 2 and 0 <= seq <= 255
        self.calls.append(("channel", seq, channel, pulse_width_us, amplitude_ma, frequency_hz, mode))

    def excitation(self, now, seq, muscle, value) -> None:
        assert 0 <= muscle < MODEL.n_muscles and 0 <= value <= 1
        self.calls.append(("excitation", seq, muscle, value))

    def group_excitation(self, now, seq, group, value) -> None:
        assert 0 <= group < 28 and 0 <= value <= 1
        self.calls.append(("group", seq, group, value))

    def heartbeat(self, now, seq=-1) -> None:
        self.calls.append(("heartbeat", seq))


def counter_key(db, fid: int, data: bytes) -> tuple[int, int]:
    values = db.get_message_by_frame_id(fid).decode(data, decode_choices=False)
    return fid, int(values.get("channel", values.get("block", values.get("group", 0))))


def valid_payload(rng: random.Random, db, fid: int, counter: int = 0) -> bytes:
    """A payload of message ``fid`` with every signal inside its DBC range."""
    msg = db.get_message_by_frame_id(fid)
    if fid == FRAME_ID_EXCITATION:
        block = rng.randrange(-(-MODEL.n_muscles // 6))
        signals = [s for s in msg.signals if s.multiplexer_ids == [block]]
        values = {"block": block, **{s.name: rng.randint(0, 250) * s.scale for s in signals}}
    else:
        values = {s.name: rng.randint(round(s.minimum / s.scale), round(s.maximum / s.scale)) * s.scale
                  for s in msg.signals}
    values["counter"] = counter
    return bytes(msg.encode(values))


def random_can_message(rng: random.Random, db, accepted: dict, now: int) -> tuple[can.Message, str | None]:
    """A random frame, and the verdict it must get (None: accepted; "" : no expectation)."""
    r = rng.random()
    if r < 0.25:         # any id (in and outside 0x200-0x2FF), DLC 0..8, random data
        fid = rng.choice([rng.randrange(0x800), rng.randrange(0x200, 0x300), *CONTROLLER_IDS])
        return can.Message(arbitration_id=fid, data=random_bytes(rng, rng.randint(0, 8)), is_extended_id=False), ""
    if r < 0.30:
        return can.Message(arbitration_id=rng.randrange(0x200, 0x300), is_error_frame=True,
                           data=random_bytes(rng, rng.randint(0, 8)), is_extended_id=False), "bad_frame"
    if r < 0.35:
        return can.Message(arbitration_id=rng.choice(CONTROLLER_IDS), is_remote_frame=True,
                           dlc=rng.randint(0, 8), is_extended_id=False), "bad_frame"
    if r < 0.40:
        return can.Message(arbitration_id=rng.choice(CONTROLLER_IDS), data=random_bytes(rng, 8),
                           is_extended_id=True), "unknown_id"
    fid = rng.choice(CONTROLLER_IDS)
    length = db.get_message_by_frame_id(fid).length
    if r < 0.50:         # a valid id with a random payload of its length
        return can.Message(arbitration_id=fid, data=random_bytes(rng, length), is_extended_id=False), ""
    if r < 0.55:         # a valid payload with a wrong DLC
        data = valid_payload(rng, db, fid, rng.randrange(256))
        n = rng.choice([k for k in range(9) if k != length])
        return can.Message(arbitration_id=fid, data=(data + bytes(8))[:n], is_extended_id=False), "bad_length"
    recent = [(k, v) for k, v in accepted.items() if now - v[1] < RESET_NS]
    if r < 0.75 and recent:     # a duplicated or stale counter of a recently accepted frame
        key, (counter, _, data) = rng.choice(recent)
        back = 0 if rng.random() < 0.5 else rng.randint(1, 127)
        data = bytearray(data)
        data[1] = (counter - back) % 256          # the counter is byte 1 of every controller message
        verdict = "duplicate_counter" if back == 0 else "stale_counter"
        return can.Message(arbitration_id=key[0], data=bytes(data), is_extended_id=False), verdict
    # a valid frame with a fresh counter (any counter once the key has been silent for the reset time)
    data = bytearray(valid_payload(rng, db, fid))
    last = accepted.get(counter_key(db, fid, bytes(data)))
    if last is None or now - last[1] >= RESET_NS:
        data[1] = rng.randrange(256)
    else:
        data[1] = (last[0] + rng.randint(1, 127)) % 256
    return can.Message(arbitration_id=fid, data=bytes(data), is_extended_id=False), None


@pytest.fixture
def endpoint(request):
    ep = CanEndpoint("virtual", f"fuzz-{request.node.name}-{random.random()}", str(DBC), list(MODEL.muscle_names),
                     counter_reset_s=RESET_NS / 1e9)
    ep.open()
    yield ep
    ep.close()


def test_can_fuzz_every_frame_is_accepted_or_rejected_with_a_reason(endpoint, db):
    """Random ids, DLCs, payloads, error/remote/extended frames, duplicated and stale counters, handed to
    the endpoint with explicit receive times: handle() never raises, a rejected frame gives exactly one
    reject with its reason, an accepted one only commands within the DBC ranges; duplicates, stale and
    fresh counters get their verdicts; the counter table stays bounded; a fresh FES_StimCmd is accepted."""
    rng = random.Random(SEED + 3)
    accepted: dict[tuple[int, int], tuple[int, int, bytes]] = {}   # key -> (counter, time, payload)
    verdicts: dict[str, int] = {}
    now = 10**12
    for _ in range(6000):
        now += rng.choice([1_000, 1_000_000, 30_000_000, RESET_NS + 1])
        msg, expected = random_can_message(rng, db, accepted, now)
        log = Log()
        ok = endpoint.handle(msg, now, log)
        rejects = [c[1] for c in log.calls if c[0] == "reject"]
        if ok:
            assert not rejects and log.calls, (msg, log.calls)
            data = bytes(msg.data)
            accepted[counter_key(db, msg.arbitration_id, data)] = (data[1], now, data)
        else:
            assert len(rejects) == 1 and len(log.calls) == 1, (msg, log.calls)
        verdict = None if ok else rejects[0]
        if expected != "":
            assert verdict == expected, (msg, expected, log.calls)
        if not msg.is_extended_id and msg.arbitration_id not in CONTROLLER_IDS and not msg.is_error_frame \
                and not msg.is_remote_frame:
            assert verdict == "unknown_id", msg
        verdicts[str(verdict)] = verdicts.get(str(verdict), 0) + 1
    assert len(endpoint.counters) <= 8 + 23 + 28 + 1
    assert {"None", "bad_frame", "unknown_id", "bad_length", "out_of_range", "duplicate_counter",
            "stale_counter"} <= set(verdicts), verdicts
    key = (FRAME_ID_STIM, 2)
    counter = (accepted[key][0] + 1) % 256 if key in accepted else 0
    log = Log()
    stim = db.get_message_by_name("FES_StimCmd")
    data = stim.encode(dict(channel=2, mode=1, enable=1, counter=counter, pulse_width=250, amplitude=30, frequency=40))
    assert endpoint.handle(can.Message(arbitration_id=FRAME_ID_STIM, data=data, is_extended_id=False), now + 1, log)
    assert log.calls == [("channel", counter, 1, 250.0, 30.0, 40.0, 1)]


class CountingInbound(Inbound):
    """The real Inbound, also noting which records belong to which received frame."""

    def __init__(self, ring: ShmRing) -> None:
        super().__init__(ring)
        self.frames: list[list[str]] = []

    def count_in(self, n: int = 1) -> None:
        super().count_in(n)
        self.frames += [[] for _ in range(n)]

    def _push(self, receive_ns, seq, kind, index, *values) -> None:
        super()._push(receive_ns, seq, kind, index, *values)
        self.frames[-1].append("accepted")

    def reject(self, receive_ns, reason, seq=-1) -> None:
        super().reject(receive_ns, reason, seq)
        self.frames[-1].append(reason)


def test_can_fuzz_over_the_virtual_bus_counts_every_received_frame(db):
    """The endpoint on python-can's in-process virtual bus (receive() called in this thread, no timing):
    frames outside 0x200-0x2FF and extended frames are filtered out, every other frame is counted once
    and gives exactly one reject (a REJECT_REASONS entry) or only accepted records; nothing is dropped;
    afterwards a valid FES_StimCmd with a fresh counter is accepted."""
    rng = random.Random(SEED + 4)
    channel = f"fuzz-bus-{random.random()}"
    ring = ShmRing.create(LINK_RECORD, 4096, INBOUND_AUX_WORDS)
    inbound = CountingInbound(ring)
    ep = CanEndpoint("virtual", channel, str(DBC), list(MODEL.muscle_names), counter_reset_s=1e6)
    ep.open()
    peer = can.Bus(interface="virtual", channel=channel)
    try:
        sent_ours, last_counter, accepted = 0, {}, {}
        for _ in range(150):
            batch = [random_can_message(rng, db, accepted, 0)[0] for _ in range(rng.randint(1, 20))]
            for msg in batch:
                peer.send(msg)
                if not msg.is_extended_id and 0x200 <= msg.arbitration_id <= 0x2FF:
                    sent_ours += 1
            for _ in batch:          # each call reads at least one queued frame
                ep.receive(inbound, 0.0)
            records = ring.pop_available()
            for r in records[records["kind"] == KIND_CHANNEL]:      # the newest counter of each channel
                last_counter[int(r["index"])] = int(r["seq"])
        assert int(ring.aux[AUX_FRAMES_IN]) == len(inbound.frames) == sent_ours and ring.dropped == 0
        rejected = [r[0] for r in inbound.frames if r[0] != "accepted"]
        assert sum(reject_counts(ring).values()) == len(rejected) == int(ring.aux[AUX_REJECTS_TOTAL])
        for records in inbound.frames:
            assert records, "a received frame gave no record"
            if records[0] == "accepted":
                assert set(records) == {"accepted"}, records
            else:
                assert len(records) == 1 and records[0] in REJECT_REASONS, records
        kinds = {r[0] for r in inbound.frames}
        assert {"accepted", "bad_frame", "unknown_id", "bad_length", "duplicate_counter"} <= kinds, kinds
        counter = (last_counter.get(4, -1) + 1) % 256
        stim = db.get_message_by_name("FES_StimCmd")
        peer.send(can.Message(arbitration_id=FRAME_ID_STIM, is_extended_id=False, data=stim.encode(
            dict(channel=5, mode=0, enable=1, counter=counter, pulse_width=300, amplitude=20, frequency=35))))
        ep.receive(inbound, 0.0)
        [rec] = ring.pop_available()
        assert rec["kind"] == KIND_CHANNEL and rec["index"] == 4 and rec["seq"] == counter
        np.testing.assert_allclose(rec["values"], [300, 20, 35, 0])
    finally:
        ep.close()
        peer.shutdown()
        ring.release()


# --- sensor stream ----------------------------------------------------------------------------------------

def test_sensor_stream_fuzz_resynchronises_and_accounts_for_every_byte():
    """Noise (random bytes, sync fragments, false headers, corrupted, cut and duplicated packets) between
    intact packets, at random read boundaries: no exception; every byte fed is in a decoded packet,
    skipped, counted as a length/CRC error or pending, and less than one packet is pending; only real
    packets are decoded; each intact packet as soon as its last byte arrived; clean packets afterwards."""
    rng = random.Random(SEED + 5)
    frames = np.zeros(64, frame_dtype())
    frames["tick"] = np.arange(64)
    frames["q"] = np.random.default_rng(SEED).normal(size=frames["q"].shape)
    packets = [encode_packet(f.tobytes(), 1000 + i) for i, f in enumerate(frames)]
    size = len(packets[0])
    false_header = SYNC + bytes([1]) + (size - 7).to_bytes(2, "little")     # right version and length
    special = SYNC + bytes([1, 0xA5, 0x5A])
    for trial in range(100):
        reader = SensorStreamReader()
        stream, intact = bytearray(), []
        for _ in range(rng.randint(1, 25)):
            k = rng.randrange(len(packets))
            r = rng.random()
            if r < 0.4:
                stream += packets[k]
                intact.append((len(stream), (1000 + k, k)))
            elif r < 0.5:
                stream += false_header + random_bytes(rng, rng.randint(0, size))
            else:
                stream += mutate(rng, packets[k], special)
        decoded, matched = [], 0
        for chunk, fed in cut(rng, bytes(stream), rng.choice([1, 13, 200, 5000])):
            for echo, frame in reader.feed(chunk):
                k = int(frame["tick"])
                assert echo == 1000 + k and frame.tobytes() == frames[k].tobytes()
                decoded.append((echo, k))
            pending = reader.pending
            assert pending < size
            assert fed == (reader.packets * size + reader.skipped_bytes + reader.length_errors
                           + reader.crc_errors + pending)
            matched = check_intact_in_order(decoded, intact, fed, matched)
        assert matched == len(intact) and reader.packets == len(decoded)
        clean = [reader.feed(p) for p in packets[:3]]
        assert [[(e, int(f["tick"])) for e, f in got] for got in clean] == [[(1000, 0)], [(1001, 1)], [(1002, 2)]]
        assert reader.pending == 0


# -- recording headers: a valid CRC over any content is read or refused with a RecordingError ------------------

FIXTURE_RECORDING = ROOT / "tests" / "data" / "elbow-hold-v0.4.hilrec"
ODD_VALUES = (0, -1, 0.0, 1e308, float("nan"), "x", "", [], {}, None, True, [[]], [["a", "<f8", [-1]]], 2 ** 64,
              [["a", "|O"]], [["a", "<f8", [1 << 40]]], "<f8", "|V0")


def _paths(doc, prefix=()):
    """Every (path, container) of a JSON document's values, to replace one of them."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from _paths(value, (*prefix, key))


def _replaced(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def test_recording_header_fuzz_is_read_or_refused_with_a_recording_error(tmp_path):
    """Mutated header bytes and replaced header values, each with a valid CRC: the run reader either accepts the
    recording (and then every stream reads) or raises RecordingError; nothing else escapes."""
    import copy
    import json
    import struct

    from hil.recording.hilrec import MAGIC, RecordingError, encode_header, read_run_recording
    rng = random.Random(SEED)
    data = FIXTURE_RECORDING.read_bytes()
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    raw, body = data[len(MAGIC) + 4: len(MAGIC) + 4 + n], data[len(MAGIC) + 8 + n:]
    doc = json.loads(raw)
    paths = [p for p in _paths(doc) if p[0] != "config"]
    refused = 0
    for i in range(400):
        if i % 2:
            new = mutate(rng, raw, b'{}[]":,0-e\xff')
        else:
            new = json.dumps(_replaced(copy.deepcopy(doc), rng.choice(paths), rng.choice(ODD_VALUES))).encode()
        path = tmp_path / f"h{i}.hilrec"
        path.write_bytes(encode_header(new) + body)
        try:
            reader = read_run_recording(str(path))
        except RecordingError:
            refused += 1
            continue
        for name in reader.streams:
            reader.read(name)
    assert 0 < refused < 400
