"""The P24 (ScienceMode4) controller peer of ``hil bench link``: written against the wire format only (pyserial
and the frame codec, ``../shared/spec/sciencemode4.md``), reading the sensor stream.

``science_mode_4`` itself cannot keep up with a 1 kHz loop (each awaited call polls every 10 ms), so the peer
sends the frames the client would send. Mid level (``p24-mid``): MlInit, then one MlUpdate in answer to every
sensor frame, and an MlGetCurrentData keep-alive every 0.5 s. Low level (``p24-low``): LlInit, then one pulse
(LlChannelConfig) in answer to every N-th sensor frame, N chosen for about 40 pulses a second, within the
channel's frequency limits. The packet number of each update or pulse is the counter the HIL echoes.
"""
from __future__ import annotations

import math
import os
import select
import time

from drivers.ipc.link_process import link_scheduling
from drivers.stimulators.p24.codec import (
    CMD_LL_CHANNEL_CONFIG,
    CMD_LL_INIT,
    CMD_LL_STOP,
    CMD_ML_GET_CURRENT_DATA,
    CMD_ML_INIT,
    CMD_ML_STOP,
    CMD_ML_UPDATE,
    FrameParser,
    encode_frame,
)
from drivers.stimulators.p24.pulse import encode_point
from drivers.stimulators.sensor_stream import SensorStreamReader
from hil.bench.peers import AMPLITUDES_MA, STIM_CHANNEL, RoundTrips

PULSE_RATE_HZ = 40.0
MIN_PULSE_GAP_S = 1.0 / (1.5 * PULSE_RATE_HZ)
"""Least time between two low-level pulses the peer sends (a client paces its pulses by a clock: sensor frames
read in a burst after a stall must not become a burst of pulses, which the device would take as a high rate)."""
KEEPALIVE_EVERY_S = 0.5
PERIOD_MS = 25


def _update(number: int, current_ma: float) -> bytes:
    points = encode_point(200, current_ma) + encode_point(200, -current_ma)
    data = bytes((1 << (STIM_CHANNEL - 1), 1 << 4)) + (PERIOD_MS * 2 << 1).to_bytes(2, "big") + points
    return encode_frame(number, CMD_ML_UPDATE, data)


def _pulse(number: int, current_ma: float) -> bytes:
    n = STIM_CHANNEL - 1
    head = 0x80 | ((n % 4) << 5) | ((n // 4) << 4) | 1         # execute, colour, connector, 2 points
    return encode_frame(number, CMD_LL_CHANNEL_CONFIG, bytes((head,)) + encode_point(200, current_ma)
                        + encode_point(200, -current_ma))


def _await_reply(stim, parser, number: int, command: int, timeout_s: float = 10.0) -> bool:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        select.select([stim.fileno()], [], [], 0.1)
        if any(getattr(f, "number", None) == number and f.command == command + 1
               for f in parser.feed(stim.read(4096), time.monotonic())):
            return True
    return False


def p24_peer(level: str, stim_port: str, sensor_port: str, rate_hz: float, duration_s: float, out) -> None:
    """Closed loop at mid level ("mid": an update per sensor frame) or low level ("low": a pulse per N-th)."""
    n_cpus = os.cpu_count() or 1
    link_scheduling(60, n_cpus - 1 if n_cpus > 1 else None)     # as the other peers: FIFO 60, off the loop CPU
    import serial

    stim, sensors = serial.Serial(stim_port, timeout=0), serial.Serial(sensor_port, timeout=0)
    parser, reader, rt = FrameParser(), SensorStreamReader(), RoundTrips()
    init = CMD_ML_INIT if level == "mid" else CMD_LL_INIT
    try:
        stim.write(encode_frame(1, init, b"\x00"))
        if not _await_reply(stim, parser, 1, init):
            out.put({"error": f"no reply to {'MlInit' if level == 'mid' else 'LlInit'} within 10 s"})
            return
        every = 1 if level == "mid" else max(1, round(rate_hz / PULSE_RATE_HZ))
        number, replies = _closed_loop(level, stim, sensors, (parser, reader, rt), every, duration_s)
        stim.write(encode_frame(number, CMD_ML_STOP if level == "mid" else CMD_LL_STOP))   # clean up, as a script does
    finally:
        stim.close()
        sensors.close()
    out.put({**rt.summary(), "replies": replies, "stream_crc_errors": reader.crc_errors})


def _closed_loop(level: str, stim, sensors, readers, every: int, duration_s: float) -> tuple[int, int]:
    """One command in answer to every ``every``-th new sensor frame (and the mid level's keep-alive) for
    ``duration_s``; returns the next packet number and the replies read."""
    parser, reader, rt = readers
    build = _update if level == "mid" else _pulse
    frames = [build(c, AMPLITUDES_MA[c]) for c in range(64)]
    number, frames_seen, replies, t_keepalive, t_pulse = 2, 0, 0, time.monotonic(), -math.inf
    t_end, fds = time.monotonic() + duration_s, [stim.fileno(), sensors.fileno()]
    while time.monotonic() < t_end:
        readable, _, _ = select.select(fds, [], [], 0.5)
        if stim.fileno() in readable:
            replies += len(parser.feed(stim.read(4096), time.monotonic()))
        newest = _newest_frame(sensors, reader, rt) if sensors.fileno() in readable else None
        if newest is None:
            continue
        frames_seen += 1
        now = time.monotonic()
        if frames_seen % every == 0 and (level == "mid" or now - t_pulse >= MIN_PULSE_GAP_S):
            t_command = t_pulse = time.monotonic()
            stim.write(frames[number])
            rt.sent_now(number, t_command, newest)
            number = (number + 1) % 64
        if level == "mid" and now - t_keepalive > KEEPALIVE_EVERY_S:
            stim.write(encode_frame(number, CMD_ML_GET_CURRENT_DATA, b"\x04"))
            number, t_keepalive = (number + 1) % 64, now
    return number, replies


def _newest_frame(sensors, reader, rt) -> int | None:
    """Read the sensor stream, note every echo and tick; the newest new tick, or None."""
    now, newest = time.monotonic(), None
    for echo, frame in reader.feed(sensors.read(65536)):
        tick = int(frame["tick"])
        rt.echo(echo, now, tick)
        if rt.tick(tick):
            newest = tick
    return newest
