"""The sensor-feedback byte stream of serial setups: framed, checksummed sensor frames.

Every published sensor frame becomes one packet on the sensor serial device (a tty from the config or an
announced pseudo-terminal)::

    offset  size  field
    0       2     sync            0xA5 0x5A
    2       1     version         1
    3       2     payload length  N, uint16 little endian
    5       N     payload         echo_seq (int32 LE: the COUNTER of the newest stimulator command applied,
                                  -1 before the first) + the sensor frame record (drivers.core.contract.frame_dtype,
                                  little endian, packed: tick, time, q[11], qdot[11], ... status)
    5+N     2     crc             CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF) over version, length
                                  and payload, uint16 little endian

A reader resynchronises on the sync bytes after a bad CRC or length, counting the error. At 460800 baud a
physical line carries about 130 full frames a second: set ``sensor_every`` in the config accordingly; a
pseudo-terminal has no such limit. :class:`SensorStreamReader` is the reader shipped for controllers.
"""
from __future__ import annotations

import binascii
import struct

import numpy as np

from drivers.core.contract import frame_dtype

SYNC = b"\xa5\x5a"
VERSION = 1
_HEAD = struct.Struct("<2sBH")
_ECHO = struct.Struct("<i")
MAX_PAYLOAD = 4096


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE (check value of b"123456789" is 0x29B1)."""
    return binascii.crc_hqx(data, 0xFFFF)


def encode_packet(frame_bytes: bytes, echo_seq: int) -> bytes:
    """One packet for a sensor frame given as its raw record bytes."""
    payload = _ECHO.pack(echo_seq) + frame_bytes
    head = _HEAD.pack(SYNC, VERSION, len(payload))
    return head + payload + struct.pack("<H", crc16(head[2:] + payload))


class SensorStreamReader:
    """Incremental decoder: ``feed(bytes)`` returns the complete packets as ``(echo_seq, frame)`` pairs,
    ``frame`` a 0-d record of :func:`drivers.core.contract.frame_dtype`. Counts ``crc_errors``, ``length_errors``
    and ``skipped_bytes`` (garbage between packets)."""

    def __init__(self, dtype: np.dtype | None = None) -> None:
        self.dtype = np.dtype(dtype or frame_dtype())
        self.payload_size = _ECHO.size + self.dtype.itemsize
        self._buf = bytearray()
        self.crc_errors = self.length_errors = self.skipped_bytes = self.packets = 0

    @property
    def pending(self) -> int:
        """Bytes held back until the packet they start is complete (less than one packet)."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[tuple[int, np.void]]:
        self._buf += chunk
        out = []
        buf = self._buf
        while True:
            start = buf.find(SYNC)
            if start < 0:
                keep = 1 if buf[-1:] == SYNC[:1] else 0
                self.skipped_bytes += len(buf) - keep
                del buf[:len(buf) - keep]
                break
            if start:
                self.skipped_bytes += start
                del buf[:start]
            if len(buf) < _HEAD.size:
                break
            _, version, n = _HEAD.unpack_from(buf)
            if version != VERSION or n != self.payload_size:
                self.length_errors += 1
                del buf[:1]
                continue
            total = _HEAD.size + n + 2
            if len(buf) < total:
                break
            body = bytes(buf[2:_HEAD.size + n])
            (crc,) = struct.unpack_from("<H", buf, _HEAD.size + n)
            if crc != crc16(body):
                self.crc_errors += 1
                del buf[:1]
                continue
            (echo,) = _ECHO.unpack_from(body, 3)
            frame = np.frombuffer(body, self.dtype, count=1, offset=3 + _ECHO.size)[0]
            out.append((echo, frame))
            self.packets += 1
            del buf[:total]
        return out


def read_frames(port, n: int, timeout_s: float = 5.0, dtype=None) -> list[tuple[int, np.void]]:
    """Read ``n`` packets from an open pyserial port (helper for scripts and tests)."""
    import time
    reader = SensorStreamReader(dtype)
    out: list = []
    t_end = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < t_end:
        chunk = port.read(max(1, port.in_waiting))
        if chunk:
            out += reader.feed(chunk)
    return out
