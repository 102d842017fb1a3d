"""The Lab Streaming Layer streams of the ``lsl`` driver: fixed names and types, channel layouts with the
XDF meta-data of every channel (``desc/channels/channel``: label, unit, type), one tick's values, and the
event markers derived from the sensor frame's status bits.

Layouts (float32; values in SI units, as the frame carries them, except the stimulation's own units):

- ``fes-hil-arm`` (``MoCap``): the model's joint angles (``SCy`` ... ``PSy``, radians), the thoracohumeral
  angles (radians), the hand position ``hand_x``/``hand_y``/``hand_z`` (meters, thorax frame) and
  ``gh_stability`` (dimensionless; above ``[safety] gh_threshold`` the joint counts as unstable).
  With lab sensors configured (``[sensor.imu]``, ``[sensor.encoder]``, ``[sensor.emg]``) their values follow, in
  frame order: ``imu_<segment>_q<w|x|y|z>`` (dimensionless), ``imu_<segment>_gyro_<x|y|z>`` (radians/second,
  sensor frame), ``encoder_<DOF>`` (counts), ``<channel>_mwave`` (volts).
- ``fes-hil-stim`` (``Stimulation``): per ``[[stimulation.channel]]`` the applied current (mA), pulse width
  (us) and frequency (Hz), after limits and safety; the controller's ``FESCommand`` stream has the same
  layout.
- ``fes-hil-events`` (``Markers``, one string channel, irregular rate): ``<event> tick=<k>`` markers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drivers.core.contract import (
    IMU_SEGMENTS,
    STATUS_BITS,
    STATUS_GH_UNSTABLE,
    STATUS_GH_ZEROED,
    STATUS_ROM,
    STATUS_ROM_ZEROED,
    STATUS_STOPPING,
    STATUS_WATCHDOG,
)

ARM_STREAM, STIM_STREAM, EVENTS_STREAM = "fes-hil-arm", "fes-hil-stim", "fes-hil-events"
ARM_TYPE, STIM_TYPE, EVENTS_TYPE = "MoCap", "Stimulation", "Markers"
COMMAND_TYPE = "FESCommand"          # default type of the controller's stream
TH_LABELS = ("th_plane_of_elevation", "th_elevation", "th_axial_rotation")
HAND_LABELS = ("hand_x", "hand_y", "hand_z")
#: per stimulation channel, in sample order: (label suffix, unit, channel type)
STIM_FIELDS = (("current_ma", "milliamperes", "StimCurrent"), ("pulse_width_us", "microseconds", "StimPulseWidth"),
               ("frequency_hz", "hertz", "StimFrequency"))
#: a command sample's accepted range per field (the CAN message set's ranges), in STIM_FIELDS order
COMMAND_RANGES = ((0.0, 150.0), (0.0, 1000.0), (0.0, 200.0))

#: status bit -> (marker when it comes on, marker when it goes off)
STATUS_EVENTS = ((STATUS_WATCHDOG, "watchdog_trip", "watchdog_clear"),
                 (STATUS_GH_UNSTABLE, "gh_alarm", "gh_alarm_clear"),
                 (STATUS_ROM, "rom_alarm", "rom_alarm_clear"),
                 (STATUS_GH_ZEROED, "gh_zero", "gh_zero_end"),
                 (STATUS_ROM_ZEROED, "rom_zero", "rom_zero_end"),
                 (STATUS_STOPPING, "safety_stop", None))
EVENT_MASK = sum(bit for bit, _, _ in STATUS_EVENTS)


@dataclass(frozen=True)
class Channel:
    """One channel's XDF meta-data."""
    label: str
    unit: str
    type: str


def _lab_channels(field: str, channel_names) -> tuple[Channel, ...]:
    if field == "imu_quat":
        return tuple(Channel(f"imu_{s}_q{c}", "dimensionless", f"Orientation{c.upper()}")
                     for s in IMU_SEGMENTS for c in "wxyz")
    if field == "imu_gyro":
        return tuple(Channel(f"imu_{s}_gyro_{c}", "radians/second", f"AngularVelocity{c.upper()}")
                     for s in IMU_SEGMENTS for c in "xyz")
    if field == "emg_mwave":
        return tuple(Channel(f"{c}_mwave", "volts", "EMG") for c in channel_names)
    return (Channel(field, "counts", "EncoderCount"),)


def arm_channels(dof_names, lab: tuple[str, ...] = (), channel_names=()) -> tuple[Channel, ...]:
    """The ``fes-hil-arm`` layout for a model with these DOF names, then the ``lab`` fields (``lab_fields``;
    ``channel_names`` label the M-waves)."""
    return (*(Channel(n, "radians", "JointAngle") for n in (*dof_names, *TH_LABELS)),
            *(Channel(n, "meters", f"Position{n[-1].upper()}") for n in HAND_LABELS),
            Channel("gh_stability", "dimensionless", "GHStability"),
            *(c for field in lab for c in _lab_channels(field, channel_names)))


def stim_channels(channel_names) -> tuple[Channel, ...]:
    """The ``fes-hil-stim`` (and ``FESCommand``) layout: ``<channel>_current_ma`` etc. per channel."""
    return tuple(Channel(f"{c}_{suffix}", unit, kind) for c in channel_names for suffix, unit, kind in STIM_FIELDS)


def stream_info(pylsl, name: str, kind: str, channels, rate_hz: float, fmt: str, source_id: str):
    """A ``pylsl.StreamInfo`` with the channels' meta-data under ``desc/channels``."""
    info = pylsl.StreamInfo(name, kind, len(channels), rate_hz, fmt, source_id)
    desc = info.desc()
    acquisition = desc.append_child("acquisition")
    acquisition.append_child_value("manufacturer", "fes-hil")
    acquisition.append_child_value("model", "DAS3 arm model (hardware-in-the-loop)")
    node = desc.append_child("channels")
    for c in channels:
        ch = node.append_child("channel")
        ch.append_child_value("label", c.label)
        ch.append_child_value("unit", c.unit)
        ch.append_child_value("type", c.type)
    return info


def desc_channels(info) -> list[Channel]:
    """The ``desc/channels`` meta-data of a (full) ``pylsl.StreamInfo``."""
    out, ch = [], info.desc().child("channels").child("channel")
    while not ch.empty():
        out.append(Channel(ch.child_value("label"), ch.child_value("unit"), ch.child_value("type")))
        ch = ch.next_sibling("channel")
    return out


def arm_values(frames: np.ndarray, out: np.ndarray, lab: tuple[str, ...] = ()) -> np.ndarray:
    """The ``fes-hil-arm`` samples of these sensor frames, written into ``out`` (rows >= len(frames)), with the
    ``lab`` fields' values after the arm's."""
    n, nd = frames.shape[0], frames["q"].shape[1]
    v = out[:n]
    v[:, :nd] = frames["q"]
    v[:, nd:nd + 3] = frames["th_angles"]
    v[:, nd + 3:nd + 6] = frames["hand_position"]
    v[:, nd + 6] = frames["gh_stability"]
    at = nd + 7
    for field in lab:
        values = frames[field].reshape(n, -1)
        v[:, at:at + values.shape[1]] = values
        at += values.shape[1]
    return v


def stim_values(applied: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The ``fes-hil-stim`` samples of (n, channels, 3) applied (pulse width, current, frequency)."""
    n = applied.shape[0]
    v = out[:n].reshape(n, -1, 3)
    v[:, :, 0] = applied[:, :, 1]
    v[:, :, 1] = applied[:, :, 0]
    v[:, :, 2] = applied[:, :, 2]
    return out[:n]


def status_names(status: int) -> str:
    """'watchdog,rom_alarm': the set bits of a status word, by their STATUS_BITS names ('none': none)."""
    names = [name for i, (name, _) in enumerate(STATUS_BITS) if status & (1 << i)]
    return ",".join(names) or "none"


class StatusEvents:
    """Event markers from the status bits of successive frames: one per bit that comes on or goes off."""

    def __init__(self) -> None:
        self.last: int | None = None     # the previous frame's event bits (None before the first frame)

    def markers(self, ticks: np.ndarray, status: np.ndarray) -> list[tuple[int, str]]:
        """(row, marker) of these frames' edges; the first frame ever only sets the reference."""
        s = status.astype(np.int64) & EVENT_MASK
        if self.last is None:
            self.last = int(s[0])
        prev = np.concatenate(([self.last], s[:-1]))
        out = []
        for i in np.flatnonzero(s != prev):
            changed = int(s[i] ^ prev[i])
            for bit, on, off in STATUS_EVENTS:
                text = on if s[i] & bit else off
                if changed & bit and text:
                    out.append((int(i), f"{text} tick={int(ticks[i])}"))
        self.last = int(s[-1])
        return out
