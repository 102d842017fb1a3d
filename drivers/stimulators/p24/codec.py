"""ScienceMode4 (HasomedScience P24) frame codec and protocol constants, as pure Python.

Everything follows ``../shared/spec/sciencemode4.md`` ("the spec": the protocol as the PyPI client
``science_mode_4`` uses it); section names below are the spec's. Both sides use this module: the device
emulator (:mod:`drivers.stimulators.p24.device`) and controllers written against the wire format (``hil bench link``'s
P24 peer, the tests).

Frame (spec "Frame")::

    F0 | 81 LEN_hi^55 | 81 LEN_lo^55 | 81 CRC_hi^55 | 81 CRC_lo^55 | BODY (stuffed) | 0F

BODY is the big-endian word ``packet_number * 1024 + command`` followed by the data; inside it F0, 0F and 81
are sent as ``81, b ^ 55`` (0x55 and 0x0A are not stuffed). LEN counts the whole frame on the wire; the CRC
(CRC-16/XMODEM) covers the stuffed BODY as sent.
"""
from __future__ import annotations

import binascii
from dataclasses import dataclass

from drivers.stimulators.byte_stuffing import STUFFING_BYTE, STUFFING_KEY
from drivers.stimulators.byte_stuffing import stuff as stuff_bytes

START_BYTE, STOP_BYTE = 0xF0, 0x0F
STUFFED_BYTES = frozenset({START_BYTE, STOP_BYTE, STUFFING_BYTE})
HEADER_SIZE = 9                     # F0 and the four escaped header values
MIN_LEN, MAX_LEN = 12, 1200         # spec "Frame": LEN of a command without data .. the largest frame
INCOMPLETE_TIMEOUT_S = 0.3          # spec "Errors": a frame left incomplete this long is a transfer error
MAX_NUMBER = 63                     # packet numbers are 6 bits

# General layer (spec "General layer")
CMD_GET_DEVICE_ID, CMD_GET_DEVICE_ID_ACK = 52, 53
CMD_RESET, CMD_RESET_ACK = 58, 59
CMD_GET_STIM_STATUS, CMD_GET_STIM_STATUS_ACK = 62, 63
CMD_GENERAL_ERROR, CMD_UNKNOWN_COMMAND = 66, 67
CMD_GET_EXTENDED_VERSION, CMD_GET_EXTENDED_VERSION_ACK = 68, 69
# Mid level (spec "Mid level")
CMD_ML_INIT, CMD_ML_INIT_ACK = 30, 31
CMD_ML_UPDATE, CMD_ML_UPDATE_ACK = 32, 33
CMD_ML_STOP, CMD_ML_STOP_ACK = 34, 35
CMD_ML_GET_CURRENT_DATA, CMD_ML_GET_CURRENT_DATA_ACK = 36, 37
# Low level (spec "Low level")
CMD_LL_INIT, CMD_LL_INIT_ACK = 0, 1
CMD_LL_CHANNEL_CONFIG, CMD_LL_CHANNEL_CONFIG_ACK = 2, 3
CMD_LL_STOP, CMD_LL_STOP_ACK = 4, 5

# Results (spec "Results and states")
RESULT_OK, RESULT_TRANSFER_ERROR, RESULT_PARAMETER_ERROR = 0, 1, 2
RESULT_NOT_INITIALISED, RESULT_ELECTRODE_ERROR, RESULT_INVALID_COMMAND = 7, 10, 11
# Stim status (spec "Results and states")
STATUS_NONE, STATUS_LOW_LEVEL, STATUS_MID_LEVEL, STATUS_MID_LEVEL_RUNNING = 0, 1, 2, 3


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM (poly 0x1021, init 0, no reflection, no final XOR; spec "Frame"): 0x31C3 for "123456789"."""
    return binascii.crc_hqx(data, 0)


def stuff(body: bytes) -> bytes:
    """Byte-stuff BODY: each of F0, 0F, 81 becomes ``81, b ^ 55`` (spec "Frame")."""
    return stuff_bytes(body, STUFFED_BYTES)


def unstuff(stuffed: bytes) -> bytes | None:
    """Undo :func:`stuff`; any ``81, x`` stands for ``x ^ 55`` (as both clients read it). None on a
    dangling 81 at the end."""
    out = bytearray()
    i = 0
    while i < len(stuffed):
        b = stuffed[i]
        if b == STUFFING_BYTE:
            if i + 1 >= len(stuffed):
                return None
            out.append(stuffed[i + 1] ^ STUFFING_KEY)
            i += 2
        else:
            out.append(b)
            i += 1
    return bytes(out)


def _escaped(value: int) -> bytes:
    return bytes((STUFFING_BYTE, (value & 0xFF) ^ STUFFING_KEY))


def encode_frame(number: int, command: int, data: bytes = b"") -> bytes:
    """One whole frame (spec "Frame"), host or device side. ValueError for a packet number outside 0..63, a
    command outside 0..1023 or a frame longer than 1200 bytes."""
    if not (0 <= number <= MAX_NUMBER and 0 <= command <= 0x3FF):
        raise ValueError(f"packet number {number} / command {command} out of range")
    body = stuff(bytes(((number << 2) | (command >> 8), command & 0xFF)) + bytes(data))
    length = len(body) + HEADER_SIZE + 1
    if length > MAX_LEN:
        raise ValueError(f"frame of {length} bytes exceeds {MAX_LEN}")
    crc = crc16(body)
    head = (bytes((START_BYTE,)) + _escaped(length >> 8) + _escaped(length) + _escaped(crc >> 8)
            + _escaped(crc))
    return head + body + bytes((STOP_BYTE,))


@dataclass(frozen=True)
class Frame:
    """A valid frame: packet number, command and the un-stuffed data."""
    number: int
    command: int
    data: bytes


@dataclass(frozen=True)
class FrameError:
    """A rejected byte sequence (spec "Errors and electrode faults").

    ``reason``: "bad_frame" (garbage or a broken header: no reply), "bad_length" (LEN out of 12..1200, not
    matching, or the frame left incomplete) or "bad_checksum" (CRC or stop byte wrong, or a dangling escape).
    ``number``: the packet number for the General error reply (0 when unreadable), None for no reply.
    """
    reason: str
    number: int | None
    raw: bytes


def _readable_number(frame: bytes) -> int:
    """The packet number in a frame's first BODY byte (spec "Errors": "if readable"), else 0."""
    if len(frame) <= HEADER_SIZE + 1:
        return 0
    first = frame[HEADER_SIZE]
    if first == STUFFING_BYTE:
        first = frame[HEADER_SIZE + 1] ^ STUFFING_KEY
    elif first in STUFFED_BYTES:
        return 0
    return first >> 2


def _header_value(buf: bytearray, s: int, k: int) -> int:
    """Header value k (0: LEN, 1: CRC) of the frame at ``s``, from its two escaped bytes."""
    return ((buf[s + 2 + 4 * k] ^ STUFFING_KEY) << 8) | (buf[s + 4 + 4 * k] ^ STUFFING_KEY)


class FrameParser:
    """Incremental device-side parser (spec "Frame", device-side parsing): find F0, require 81 at offsets
    1, 3, 5, 7, read LEN, take LEN bytes, require 0F last and a matching CRC.

    Feed arbitrary chunks with the time they arrived; :meth:`expire` reports a frame left incomplete for
    more than ``incomplete_timeout_s``. A valid BODY holds no raw F0 or 0F, so an F0 or 0F inside the LEN
    window ends the frame at once (LEN not matching): the buffer never holds more than one incomplete frame
    of at most 1200 bytes. After an error only the bytes of the broken frame are dropped; the bytes up to the
    next F0 are skipped without a second report.
    """

    def __init__(self, incomplete_timeout_s: float = INCOMPLETE_TIMEOUT_S) -> None:
        self.incomplete_timeout_s = incomplete_timeout_s
        self._buf = bytearray()
        self._resync = False          # skipping the rest of a broken frame
        self._since: float | None = None   # when the incomplete frame at the buffer's start began

    @property
    def pending(self) -> int:
        """Bytes buffered (one incomplete frame)."""
        return len(self._buf)

    def reset(self) -> None:
        self._buf.clear()
        self._resync = False
        self._since = None

    def feed(self, chunk: bytes, now_s: float) -> list[Frame | FrameError]:
        buf = self._buf
        buf += chunk
        out: list[Frame | FrameError] = []
        pos = 0
        while pos < len(buf):
            start = buf.find(START_BYTE, pos)
            skip_to = len(buf) if start < 0 else start
            if skip_to > pos:
                if not self._resync:
                    out.append(FrameError("bad_frame", None, bytes(buf[pos:skip_to])))
                pos = skip_to
            if start < 0:
                break
            self._resync = False
            result = self._parse_at(buf, start)
            if result is not None and isinstance(result[0], FrameError) and result[1] > 1:
                result = self._cut_off(buf, start, result)
            if result is None:
                break
            item, consumed, resync = result
            out.append(item)
            self._resync = resync
            pos = start + consumed
        if pos:
            del buf[:pos]
            self._since = None
        if buf and self._since is None:
            self._since = now_s
        return out

    def expire(self, now_s: float) -> list[FrameError]:
        """The incomplete frame as a "bad_length" error once it waited longer than the timeout (spec
        "Errors": General error, number 0); the bytes after its F0 are parsed again."""
        if not self._buf or self._since is None or now_s - self._since <= self.incomplete_timeout_s:
            return []
        raw = bytes(self._buf)
        del self._buf[:1]
        self._since, self._resync = None, True
        return [FrameError("bad_length", 0, raw), *self.feed(b"", now_s)]

    @staticmethod
    def _cut_off(buf: bytearray, s: int, result: tuple) -> tuple:
        """A broken frame whose header holds an F0 (a header value may be F0) may be a frame cut off after
        a few bytes and followed by a whole one: consume only up to that F0, so the next frame is parsed."""
        alt = buf.find(START_BYTE, s + 1, s + HEADER_SIZE)
        return result if alt < 0 else (result[0], alt - s, True)

    @staticmethod
    def _parse_at(buf: bytearray, s: int) -> tuple[Frame | FrameError, int, bool] | None:
        """Parse the frame whose F0 is at ``s``: (item, bytes consumed, resync after it), or None if
        incomplete."""
        n = len(buf) - s
        for k in (1, 3, 5, 7):
            if n > k and buf[s + k] != STUFFING_BYTE:
                return FrameError("bad_frame", None, bytes(buf[s:s + k + 1])), 1, True
        if n < HEADER_SIZE:
            return None
        length = _header_value(buf, s, 0)
        if not MIN_LEN <= length <= MAX_LEN:
            return FrameError("bad_length", 0, bytes(buf[s:s + HEADER_SIZE])), 1, True
        end = s + length - 1                                    # index of the stop byte
        early = [i for i in (buf.find(START_BYTE, s + HEADER_SIZE, min(end + 1, len(buf))),
                             buf.find(STOP_BYTE, s + HEADER_SIZE, min(end, len(buf)))) if i >= 0]
        if early:                      # the frame ends (0F) or a new one starts (F0) where LEN does not say
            cut = min(early)
            consumed = cut - s + (1 if buf[cut] == STOP_BYTE else 0)
            return FrameError("bad_length", 0, bytes(buf[s:s + consumed])), consumed, False
        if len(buf) <= end:
            return None
        raw = bytes(buf[s:end + 1])
        body = raw[HEADER_SIZE:-1]
        if raw[-1] != STOP_BYTE or crc16(body) != _header_value(buf, s, 1):
            return FrameError("bad_checksum", _readable_number(raw), raw), len(raw), True
        plain = unstuff(body)
        if plain is None:
            return FrameError("bad_checksum", _readable_number(raw), raw), len(raw), False
        if len(plain) < 2:
            return FrameError("bad_length", 0, raw), len(raw), False
        return Frame(plain[0] >> 2, ((plain[0] & 0x3) << 8) | plain[1], plain[2:]), len(raw), False
