"""ScienceMode4 pulse shapes: the 4-byte channel point and the mapping from points to stimulation.

Follows ``../shared/spec/sciencemode4.md`` ("the spec"). A point (spec "Mid level", point) is a big-endian
32-bit word: bits 31–20 duration in µs (below 10 µs counts as 10), bits 19–10 current code = 2·I_mA + 300,
bits 6–5 interpolation, the other bits 0. Currents are kept as integer half-milliamperes, so charges and the
charge balance are exact.

Mapping: a phase is the current of one sign until it changes sign; zero-current points are gaps, which
carry no current and do not end a phase (a gap reverses no charge).
The loop's command record holds one pulse width and one current per channel, so a pulse is recorded as its
envelope: the smallest symmetric biphasic rectangular pulse that contains it. Its current is the largest
magnitude of any point; its pulse width the longer of the widest phase and half the time current flows. No
point's current, no phase's width or charge and no pulse's total current-flow time exceeds the envelope's
(current, width, current × width, 2 × width), so the loop's amplitude and pulse-width limits bound all four;
a symmetric biphasic pulse is its own envelope. This departs from the spec's first-phase mapping, which let
later phases of up to 130 mA pass unchecked. A pulse is charge-balanced when the signed charge over all
points is zero.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

POINT_SIZE = 4
MAX_POINTS = 16
MIN_DURATION_US = 10
MAX_DURATION_US = 4095
CURRENT_OFFSET = 300                 # code = 2 * I_mA + 300
_RESERVED_BITS = 0x3FF & ~(0x3 << 5)  # bits 9..0 except the interpolation bits 6..5
_WORD = struct.Struct(">I")


@dataclass(frozen=True)
class Point:
    """One point: duration as sent (µs) and current in half-milliamperes (signed)."""
    duration_us: int
    half_ma: int

    @property
    def current_ma(self) -> float:
        return self.half_ma / 2.0

    @property
    def effective_us(self) -> int:
        """Duration the device runs (spec: below 10 µs counts as 10)."""
        return max(MIN_DURATION_US, self.duration_us)


def encode_point(duration_us: int, current_ma: float) -> bytes:
    """The 4 bytes of a point (interpolation 0; current rounded to 0.5 mA as the Python client does)."""
    code = round(2.0 * current_ma + CURRENT_OFFSET)
    if not (0 <= duration_us <= MAX_DURATION_US and 0 <= code <= 0x3FF):
        raise ValueError(f"point {duration_us} us / {current_ma} mA out of range")
    return _WORD.pack(duration_us << 20 | code << 10)


def decode_points(data: bytes, count: int) -> tuple[Point, ...] | None:
    """``count`` points from ``data`` (exactly ``count`` × 4 bytes); None if the length does not match or a
    point has reserved bits set or an interpolation other than 0 (hold) or 1 (linear, which the device runs
    as hold: spec "not yet implemented")."""
    if len(data) != POINT_SIZE * count:
        return None
    points = []
    for (word,) in _WORD.iter_unpack(data):
        if word & _RESERVED_BITS or (word >> 5) & 0x3 > 1:
            return None
        points.append(Point(word >> 20, ((word >> 10) & 0x3FF) - CURRENT_OFFSET))
    return tuple(points)


@dataclass(frozen=True)
class Pulse:
    """A pulse shape and what it means as stimulation (the module docstring's envelope)."""
    points: tuple[Point, ...]

    def phases(self) -> list[tuple[int, int]]:
        """(width µs, charge in half-mA·µs) of each phase, in order. A phase runs until the current changes
        sign: a gap inside it does not end it (it reverses no charge), and its width counts only the time
        current flows."""
        out: list[tuple[int, int]] = []
        sign = 0
        for p in self.points:
            if p.half_ma == 0:
                continue
            charge = abs(p.half_ma) * p.effective_us
            if sign and (p.half_ma > 0) == (sign > 0):
                width, total = out[-1]
                out[-1] = (width + p.effective_us, total + charge)
            else:
                out.append((p.effective_us, charge))
            sign = 1 if p.half_ma > 0 else -1
        return out

    @property
    def current_ma(self) -> float:
        """The envelope's current: the largest magnitude of any point, mA (0 for a pulse without current)."""
        return self.peak_ma

    @property
    def pulse_width_us(self) -> float:
        """The envelope's pulse width: the widest phase, or half the time current flows if longer, µs."""
        widths = [w for w, _ in self.phases()]
        return float(max(max(widths, default=0), sum(widths) / 2.0))

    @property
    def charge_nc(self) -> float:
        """Largest charge of one phase, Σ |I| · duration over it, nC (mA · µs)."""
        return max((q for _, q in self.phases()), default=0) / 2.0

    @property
    def net_charge_nc(self) -> float:
        """Signed charge over all points, nC: 0 for a charge-balanced pulse."""
        return sum(p.half_ma * p.effective_us for p in self.points) / 2.0

    @property
    def balanced(self) -> bool:
        return sum(p.half_ma * p.effective_us for p in self.points) == 0

    @property
    def peak_ma(self) -> float:
        """Largest current magnitude of any point, mA."""
        return max((abs(p.half_ma) for p in self.points), default=0) / 2.0

    @property
    def duration_us(self) -> int:
        """How long the device is busy with the pulse, µs."""
        return sum(p.effective_us for p in self.points)
