"""The contract between the loop and every driver: the sensor frame, its status bits, the command log,
command kinds and reject reasons. Everything that spells these out (the DBC writer, the CAN feedback
packer, the recording export, the command line) derives from the tables here, so a new status bit or
reject reason is added in one place.

Recordings store the record layouts (numpy dtype descriptions) and the reject-reason list in their
header: the tables below are append-only.
"""
from __future__ import annotations

import numpy as np

from sim.das3.model import DOF_NAMES

#: Status bits of a sensor frame, bit i = 1 << i: (name used in DBC signals and exports, meaning).
STATUS_BITS = (
    ("watchdog", "controller watchdog tripped: stimulation forced to zero"),
    ("gh_unstable", "GH stability value above the threshold"),
    ("overrun", "the previous tick missed its deadline"),
    ("rom_alarm", "a joint is outside its range of motion (+ margin)"),
    ("gh_zeroed", "GH action 'zero' is holding stimulation at zero"),
    ("stopping", "a 'stop' action ends the run after this frame"),
    ("rom_zeroed", "ROM action 'zero' is holding stimulation at zero"),
)
_BIT = {name: 1 << i for i, (name, _) in enumerate(STATUS_BITS)}
STATUS_WATCHDOG = _BIT["watchdog"]
STATUS_GH_UNSTABLE = _BIT["gh_unstable"]
STATUS_OVERRUN = _BIT["overrun"]
STATUS_ROM = _BIT["rom_alarm"]
STATUS_GH_ZEROED = _BIT["gh_zeroed"]
STATUS_STOPPING = _BIT["stopping"]
STATUS_ROM_ZEROED = _BIT["rom_zeroed"]


def frame_dtype(n_dofs: int = len(DOF_NAMES)) -> np.dtype:
    """The sensor frame record (little-endian, fixed size) of a model with ``n_dofs`` joint angles."""
    return np.dtype([
        ("tick", "<i8"),
        ("time", "<f8"),                   # simulated time, s
        ("q", "<f8", (n_dofs,)),           # joint angles, rad (DOF order of the model)
        ("qdot", "<f8", (n_dofs,)),        # rad/s
        ("th_angles", "<f8", (3,)),        # thoracohumeral plane of elevation, elevation, axial rotation
        ("elbow_flexion", "<f8"),          # = q[ELx], rad
        ("forearm_pronation", "<f8"),      # = q[PSy], rad
        ("hand_position", "<f8", (3,)),    # m, thorax frame
        ("gh_stability", "<f8"),           # paper eq. 9
        ("gh_force", "<f8", (3,)),         # N on the scapula, scapula frame
        ("st_contact_force", "<f8", (2, 3)),  # N on the scapula at TS, AI, thorax frame
        ("st_in_contact", "u1", (2,)),     # contact force non-zero (> 1 N)
        ("status", "<u4"),                 # STATUS_BITS
    ])


#: The frame fields of the GH joint and the scapulothoracic contact, which a plant without a GH model (the MTG arm,
#: ``has_glenohumeral`` False in ``sim.plants``) does not model: NaN (the contact flags 0) in its frames.
GLENOHUMERAL_FIELDS = ("gh_stability", "gh_force", "st_contact_force", "st_in_contact")


#: The lab sensors' frame fields (hil.rt.lab_sensors), appended to the frame only when configured: IMU
#: quaternions (w, x, y, z) and gyro rates (rad/s, sensor frame) of these segments, one ``encoder_<DOF>`` (whole
#: counts) per encoded joint, and each stimulation channel's M-wave amplitude (V).
IMU_SEGMENTS = ("upper_arm", "forearm")
ENCODER_PREFIX = "encoder_"


def sensor_frame_dtype(base: np.dtype, imu: bool = False, encoder_joints=(), emg_channels: int = 0) -> np.dtype:
    """``base`` (a :func:`frame_dtype`) with the configured lab sensors' fields appended (``base`` itself when none
    is): ``imu_quat`` (2, 4), ``imu_gyro`` (2, 3), ``encoder_<joint>`` each, ``emg_mwave`` (channels,); all float64.
    A ``lab_pad`` field (zeros) first puts them on the 8-byte grid of the frame's float arrays (drivers read those as
    one block), named so every byte of a frame is a field's (a copy carries no uninitialised padding)."""
    extra = [("imu_quat", (2, 4)), ("imu_gyro", (2, 3))] if imu else []
    extra += [(ENCODER_PREFIX + j, ()) for j in encoder_joints]
    extra += [("emg_mwave", (emg_channels,))] if emg_channels else []
    if not extra:
        return base
    gap = (base.fields["q"][1] - base.itemsize) % 8
    pad = [("lab_pad", "u1", (gap,))] if gap else []
    return np.dtype([*base.descr, *pad, *((name, "<f8", shape) for name, shape in extra)])


def lab_fields(frame: np.dtype) -> tuple[str, ...]:
    """The lab sensors' fields of a sensor frame (:func:`sensor_frame_dtype`), in frame order (none: ())."""
    return tuple(n for n in frame.names if n in ("imu_quat", "imu_gyro", "emg_mwave") or n.startswith(ENCODER_PREFIX))


# Command kinds (recorded in the command log)
KIND_REJECTS = 0      # frames a transport rejected: status = reason code, values[0] = how many (>= 1)
KIND_CHANNEL = 1      # values = (pulse width us, amplitude mA, frequency Hz, pulse mode 0..2)
KIND_EXCITATION = 2   # index = muscle element (or group, negative: -1 - group index); values[0] = u
KIND_HEARTBEAT = 3
KIND_DRIVER_LOST = 4  # the driver's transport died: what it latched was set to zero at this tick
KIND_TICK_STALL = 5   # the loop stopped ticking (safety.tick_stall_timeout_ms): the run ended with stimulation
#                       stopped; tick = the tick in which it stalled, values[0] = how long it had not ticked, s
KIND_VOLUNTARY = 6    # the patient's own drive (a driver with role "voluntary"): index = muscle element (or group,
#                       negative: -1 - group index); values[0] = u; latched apart from stimulation, never zeroed by safety

COMMAND_DTYPE = np.dtype([
    ("tick", "<i8"),        # tick at which the command was latched
    ("receive_ns", "<i8"),  # CLOCK_MONOTONIC receive time
    ("driver", "<u2"),      # index of the driver in the run's driver list
    ("kind", "u1"),
    ("status", "u1"),       # 0 accepted, else a REJECT_REASONS index + 1
    ("index", "<i2"),       # channel or muscle index (-1: none)
    ("values", "<f8", (4,)),
])

#: Why a command was not applied as sent (recorded as status = index + 1, counted per driver and reason).
REJECT_REASONS = ("pulse_width_limit", "amplitude_limit", "frequency_limit", "mode_not_allowed",
                  "non_finite", "unknown_channel", "unknown_muscle", "bad_frame", "bad_checksum",
                  "bad_length", "unknown_id", "stale_counter", "wrong_mode", "excitation_clipped",
                  "duplicate_counter", "out_of_range", "unknown_command", "controller_error",
                  "controller_malformed", "wrong_stream", "not_voluntary")
