"""ScienceMode2 (Hasomed RehaStim2) frame codec and protocol constants, as pure Python.

Everything follows the ScienceMode2 protocol as its Python client pysciencemode 1.1.5 uses it ("the spec":
Hasomed's RehaStim2 ScienceMode2 description, summarised in README "Serial"); section names below are the
spec's. Both sides use it: the device emulator (:mod:`drivers.stimulators.rehastim2.device`) and controllers written
against the wire format (``hil bench link``'s serial peer, the tests).

Byte conventions (spec "Frame"):

- DATA bytes in the stuffing set {F0, 0F, 81, 55, 0A} are sent as ``81, b ^ 55``.
- COUNTER and CMD follow the client quirk: a value in the stuffing set is sent as ``b ^ 55`` *without* the
  81 escape (GetStimulationMode 10 goes out as 5F). :func:`encode_frame` does the same for both sides, so
  its output equals ``pysciencemode.utils.packet_construction`` byte for byte, and a device reply never
  carries a raw 0F/F0 in COUNTER/CMD (pysciencemode splits replies at the first 0F after byte 8 and
  reads the command at byte 6, so a 81-escaped reply counter would break it).
- On receipt, an unescaped COUNTER/CMD byte 5F, 5A, A5 or D4 is mapped back to 0A, 0F, F0 or 81. The
  quirk makes 00 ambiguous (0 or 55) and likewise 5F (10 or 95), ...; 00 stays 0 and the others map to
  the stuffing-set value. Re-encoding a decoded frame always gives the bytes that were received, so a
  reply echoes the request's COUNTER byte exactly. A properly escaped COUNTER/CMD (81 xx) is accepted too.
"""
from __future__ import annotations

from dataclasses import dataclass

from drivers.stimulators.byte_stuffing import STUFFING_BYTE, STUFFING_KEY
from drivers.stimulators.byte_stuffing import stuff as stuff_bytes

BAUD_RATE = 460800
CMD_INIT, CMD_INIT_ACK, CMD_UNKNOWN, CMD_WATCHDOG = 1, 2, 3, 4
CMD_GET_MODE, CMD_GET_MODE_ACK = 10, 11
CMD_INIT_CLM, CMD_INIT_CLM_ACK = 30, 31
CMD_START_CLM, CMD_START_CLM_ACK = 32, 33
CMD_STOP_CLM, CMD_STOP_CLM_ACK = 34, 35
CMD_STIM_ERROR = 38
RESULT_OK, RESULT_TRANSFER_ERROR, RESULT_PARAMETER_ERROR, RESULT_WRONG_MODE, RESULT_BUSY = 0, -1, -2, -3, -8
MODE_START, MODE_INITIALISED, MODE_RUNNING = 0, 1, 2

START_BYTE, STOP_BYTE = 0xF0, 0x0F
STUFFED_BYTES = frozenset({0xF0, 0x0F, 0x81, 0x55, 0x0A})
MIN_LEN, MAX_LEN = 2, 2 * 64          # LEN counts COUNTER + CMD + stuffed DATA as sent
HEADER_SIZE = 5                       # F0 81 CRC^55 81 LEN^55
MAX_FRAME_SIZE = HEADER_SIZE + MAX_LEN + 1

# Unescaped COUNTER/CMD bytes that stand for a stuffing-set value (client quirk); 00 is kept as 0.
_UNQUIRK = {b ^ STUFFING_KEY: b for b in STUFFED_BYTES if b != STUFFING_KEY}
#: COUNTER values whose byte is ambiguous on receipt (00, the stuffing set and its XOR-55 images). The device
#: never uses them as Init counters, so that the client's raw echo (it copies byte 5 of the Init frame)
#: decodes to the same value without any ambiguity; a controller avoids them the same way.
AMBIGUOUS_COUNTERS = frozenset(STUFFED_BYTES | set(_UNQUIRK) | {0x00})


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc8(data: bytes) -> int:
    """CRC-8, polynomial 0x07, init 0, no reflection, no final XOR (spec "Frame"); crc8(b"123456789") == 0xF4."""
    crc = 0
    for b in data:
        crc = _CRC_TABLE[crc ^ b]
    return crc


def signed8(value: int) -> int:
    """A result byte (0..255) as the signed int8 of spec "Commands" (e.g. 0xFE -> -2)."""
    return value - 256 if value >= 128 else value


def stuff(data: bytes) -> bytes:
    """Byte-stuff DATA: every byte of the stuffing set becomes ``81, b ^ 55`` (spec "Frame")."""
    return stuff_bytes(data, STUFFED_BYTES)


def _quirk(value: int) -> int:
    return value ^ STUFFING_KEY if value in STUFFED_BYTES else value


def encode_frame(counter: int, command: int, data: bytes = b"") -> bytes:
    """One whole frame ``F0 81 CRC^55 81 LEN^55 COUNTER CMD DATA 0F`` (spec "Frame"), PC or device side.

    COUNTER and CMD use the client quirk (XOR 55 without escape), DATA is stuffed; CRC and LEN cover the
    payload as sent. Raises ValueError for values out of 0..255 or a payload longer than 128 bytes.
    """
    if not (0 <= counter <= 255 and 0 <= command <= 255):
        raise ValueError(f"counter {counter} / command {command} out of 0..255")
    payload = bytes((_quirk(counter), _quirk(command))) + stuff(bytes(data))
    if len(payload) > MAX_LEN:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_LEN}")
    return (bytes((START_BYTE, STUFFING_BYTE, crc8(payload) ^ STUFFING_KEY, STUFFING_BYTE,
                   len(payload) ^ STUFFING_KEY)) + payload + bytes((STOP_BYTE,)))


@dataclass(frozen=True)
class Frame:
    """A valid frame: COUNTER and CMD decoded (quirk undone), DATA un-stuffed."""
    counter: int
    command: int
    data: bytes


@dataclass(frozen=True)
class FrameError:
    """A rejected byte sequence. ``reason``: "bad_frame" (garbage, missing 81 escapes, frame cut short
    without its 0F, bad stuffing), "bad_checksum", or "bad_length" (LEN outside 2..128, or no 0F where
    LEN puts the end)."""
    reason: str
    raw: bytes


def decode_payload(payload: bytes) -> Frame | None:
    """Un-stuff COUNTER, CMD and DATA; None on bad stuffing (raw stuffing-set byte, dangling or bad escape)."""
    out: list[int] = []
    i = 0
    while i < len(payload):
        b = payload[i]
        if b == STUFFING_BYTE:
            if i + 1 >= len(payload) or payload[i + 1] ^ STUFFING_KEY not in STUFFED_BYTES:
                return None
            out.append(payload[i + 1] ^ STUFFING_KEY)
            i += 2
            continue
        if b in STUFFED_BYTES:
            return None
        out.append(_UNQUIRK.get(b, b) if len(out) < 2 else b)
        i += 1
    if len(out) < 2:
        return None
    return Frame(out[0], out[1], bytes(out[2:]))


class FrameParser:
    """Incremental parser (spec "Frame": parse by structure, never by scanning for 0F).

    Feed arbitrary chunks; a frame split across feeds is waited for. Bytes before an F0 are skipped and
    reported as one "bad_frame". After a structural error (bad escapes, bad LEN, frame cut short by a new
    F0, no 0F at the end) only the F0 is dropped and parsing resumes silently at the next F0; after a bad
    CRC or bad stuffing inside a well-delimited frame the whole frame is dropped. A valid payload never
    contains a raw F0, so an F0 inside the LEN window ends the frame at once: the buffer never holds more
    than one incomplete frame (under 134 bytes), so no size cap is needed.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._resync = False   # skipping the rest of a broken frame: skipped bytes are not reported again

    @property
    def pending(self) -> int:
        """Bytes buffered (an incomplete frame)."""
        return len(self._buf)

    def reset(self) -> None:
        self._buf.clear()
        self._resync = False

    def feed(self, chunk: bytes) -> list[Frame | FrameError]:
        buf = self._buf
        buf += chunk
        out: list[Frame | FrameError] = []
        pos = 0
        while pos < len(buf):
            start = buf.find(START_BYTE, pos)
            skip_to = len(buf) if start < 0 else start
            if skip_to > pos:
                if not self._resync:
                    out.append(FrameError("bad_frame", bytes(buf[pos:skip_to])))
                pos = skip_to
            if start < 0:
                break
            self._resync = False
            result = self._parse_at(buf, start)
            if result is None:
                break
            item, consumed = result
            out.append(item)
            self._resync = consumed == 1
            pos = start + consumed
        del buf[:pos]
        return out

    @classmethod
    def _parse_at(cls, buf: bytearray, s: int) -> tuple[Frame | FrameError, int] | None:
        """Parse the frame whose F0 is at ``s``: (item, bytes consumed), or None if incomplete.

        The CRC byte may be F0, so a frame cut off after ``F0 81`` and followed by a frame reads as a
        header whose CRC byte is the next frame's F0: its LEN window would hold that frame back until
        more bytes arrive, or swallow it as a bad CRC. When the frame at ``s`` is not valid and a valid
        frame at ``s + 2`` is complete before the one at ``s`` was decided, the F0 81 is a cut-off frame.
        """
        result = cls._parse_one(buf, s)
        if ((result is None or not isinstance(result[0], Frame)) and len(buf) - s > 2
                and buf[s + 2] == START_BYTE):
            after = cls._parse_one(buf, s + 2)
            if (after is not None and isinstance(after[0], Frame)
                    and cls._parse_one(buf[s:s + 1 + after[1]], 0) is None):
                return FrameError("bad_frame", bytes(buf[s:s + 2])), 1
        return result

    @staticmethod
    def _parse_one(buf: bytearray, s: int) -> tuple[Frame | FrameError, int] | None:
        """:meth:`_parse_at` without the cut-off check."""
        n = len(buf) - s
        if (n >= 2 and buf[s + 1] != STUFFING_BYTE) or (n >= 4 and buf[s + 3] != STUFFING_BYTE):
            return FrameError("bad_frame", bytes(buf[s:s + min(n, HEADER_SIZE)])), 1
        if n < HEADER_SIZE:
            return None
        length = buf[s + 4] ^ STUFFING_KEY
        if not MIN_LEN <= length <= MAX_LEN:
            return FrameError("bad_length", bytes(buf[s:s + HEADER_SIZE])), 1
        end = s + HEADER_SIZE + length                     # index of the 0F
        stray = buf.find(START_BYTE, s + HEADER_SIZE, min(end + 1, len(buf)))
        if stray >= 0:   # a new frame starts first: LEN too long (0F just before it) or frame cut short
            ended_early = stray - 1 > s + HEADER_SIZE and buf[stray - 1] == STOP_BYTE
            reason = "bad_length" if ended_early else "bad_frame"
            return FrameError(reason, bytes(buf[s:stray])), 1
        if len(buf) <= end:
            return None
        raw = bytes(buf[s:end + 1])
        if raw[-1] != STOP_BYTE:
            return FrameError("bad_length", raw), 1
        payload = raw[HEADER_SIZE:-1]
        if crc8(payload) != raw[2] ^ STUFFING_KEY:
            return FrameError("bad_checksum", raw), len(raw)
        frame = decode_payload(payload)
        if frame is None:
            return FrameError("bad_frame", raw), len(raw)
        return frame, len(raw)
