"""ScienceMode4 (P24) payloads the emulated device (:mod:`drivers.stimulators.p24.device`) reads and writes beyond
the frame codec: the MlUpdate channel list (spec "Mid level") and a low-level measurement's samples (spec "Low
level"), with the device-side limits they are checked against."""
from __future__ import annotations

import math
from fractions import Fraction

from drivers.stimulators.p24.pulse import POINT_SIZE, Pulse, decode_points

N_CHANNELS = 8
MAX_CURRENT_MA = 130.0            # spec "Mid level", device-side validity
MAX_PERIOD_MS = 16383
PULSE_OVERHEAD_US = 60            # spec "Mid level": occupancy term per channel
MEASUREMENT_SAMPLES = 128


def parse_ml_update(data: bytes) -> dict[int, tuple[Pulse, float, int]] | str:
    """MlUpdate data (spec "Mid level"): enabled-channel mask, then per enabled channel ``(points-1) << 4 |
    ramp``, ``period_code << 1 | accuracy`` (uint16 BE) and the points. Returns channel -> (pulse, period ms,
    ramp), or the reject reason: "bad_length" when the payload does not match the declared point counts,
    "out_of_range" for a period outside (0, 16383] ms, a current above 130 mA, a bad point, or a total pulse
    occupancy of 100 % or more."""
    if not data:
        return "bad_length"
    channels: dict[int, tuple[Pulse, float, int]] = {}
    pos = 1
    for n in range(1, N_CHANNELS + 1):
        if not data[0] >> (n - 1) & 1:
            continue
        if pos + 3 > len(data):
            return "bad_length"
        end = pos + 3 + POINT_SIZE * ((data[pos] >> 4) + 1)
        if end > len(data):
            return "bad_length"
        word = int.from_bytes(data[pos + 1:pos + 3], "big")
        period_ms = (word >> 1) / (4.0 if word & 1 else 2.0)
        points = decode_points(data[pos + 3:end], (end - pos - 3) // POINT_SIZE)
        if points is None or not 0 < period_ms <= MAX_PERIOD_MS or any(
                abs(p.current_ma) > MAX_CURRENT_MA for p in points):
            return "out_of_range"
        channels[n] = (Pulse(points), period_ms, data[pos] & 0xF)
        pos = end
    if pos != len(data):
        return "bad_length"
    occupancy = sum(Fraction(p.duration_us + PULSE_OVERHEAD_US) / Fraction(period) for p, period, _ in
                    channels.values())
    return channels if math.ceil(occupancy) < 1000 else "out_of_range"


def measurement_samples(pulse: Pulse | None, measurement: int, high_voltage_v: float) -> bytes:
    """Sampling time (µs, uint16 BE) and 128 samples (uint16 BE, the client divides by 100) of a low-level
    measurement (spec "Low level"): 1 stimulation current in mA and 2 voltage in V, sampled over the pulse that
    flowed (magnitudes, as the device measures; a 1 kΩ load; zeros when no current flowed), 3 the high
    voltage."""
    step = 1 if pulse is None else max(1, math.ceil(pulse.duration_us / MEASUREMENT_SAMPLES))
    values = [high_voltage_v if measurement == 3 else _current_at(pulse, i * step) for i in range(MEASUREMENT_SAMPLES)]
    return step.to_bytes(2, "big") + b"".join(min(0xFFFF, round(v * 100)).to_bytes(2, "big") for v in values)


def _current_at(pulse: Pulse | None, t_us: int) -> float:
    """|I| in mA at ``t_us`` after the pulse's start (0 after its end or without a pulse)."""
    for p in pulse.points if pulse is not None else ():
        if t_us < p.effective_us:
            return abs(p.current_ma)
        t_us -= p.effective_us
    return 0.0
