"""The CAN message set of the testbed, written as a DBC file (``configs/fes-hil.dbc``).

The DBC is the contract with external controllers; it is generated from the model's DOF and muscle
names by :func:`generate_dbc` (``hil can dbc``) and loaded at run time with cantools. Every signal is
byte aligned and little endian (Intel), so any DBC tool can read it. Controller -> HIL:

- ``FES_StimCmd``: one stimulation channel (channel 1..8, pulse mode, enable, rolling counter, pulse
  width, amplitude, frequency). Counter checked per channel.
- ``FES_Excitation``: direct mode, multiplexed by ``block``: six muscle elements per frame in the
  model's element order (u8, resolution 1/250). Counter checked per block.
- ``FES_GroupExcitation``: direct mode, one named muscle group (value table) at 1e-4 resolution.
- ``FES_Heartbeat``: keeps the controller watchdog fed without changing the stimulation.

HIL -> controller (every ``feedback_every`` ticks, ``HIL_Status`` first):

- ``HIL_Status``: tick, status bits, echo of the newest accepted command counter, GH stability value.
- ``HIL_JointAngle`` / ``HIL_JointVelocity`` (multiplexed, 3 DOFs a frame), ``HIL_Arm`` (thoracohumeral
  angles; hand position), ``HIL_Force`` (GH force; scapulothoracic contact forces at TS and AI). Each
  frame carries the tick's low byte so a controller can assemble one tick's frames.
- ``HIL_SensorFD`` (CAN FD, 64 bytes): tick, status bits, echo counter, GH stability, q, q̇ and the
  thoracohumeral angles in one frame, with the signal names and resolutions of the classic frames.
  One frame a tick instead of ten: what makes 1 kHz feedback fit a bus (and a link process).
- Lab sensors (only with ``[sensor.imu]`` / ``[sensor.emg]``, listed in ``feedback``): ``HIL_ImuQuat`` (the two
  IMUs' quaternions w, x, y, z, 2^-14), ``HIL_ImuGyro`` (their rates in the sensor frame, 1e-3 rad/s) and
  ``HIL_Emg`` (each channel's M-wave amplitude, 1 µV), multiplexed like ``HIL_JointAngle``; ``HIL_Encoder`` (one
  joint encoder's count, int32, a frame per configured joint: ``block`` is the joint's DOF index).

A value outside a sensor signal's range is saturated to the range when encoding (documented per signal). A
signed sensor signal keeps its lowest raw value out of its range for "no value" (the DBC's value table names it
``not_available``, as SAE J1939 reserves raw values for "not available"): a value the plant does not model (NaN,
e.g. the GH force of the reduced MTG arm) goes out as that raw value, never as a number a controller could act on.
"""
from __future__ import annotations

from dataclasses import dataclass

from drivers.core.contract import IMU_SEGMENTS, STATUS_BITS
from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file

MAX_DBC_BYTES = 16 * 1024 * 1024
"""The largest DBC file read (a whole vehicle's DBC is a few MB; the testbed's own is tens of kB)."""
DBC_ENCODING = "cp1252"
"""The text encoding of DBC files (cantools's default for them)."""

FRAME_ID_STIM = 0x200
FRAME_ID_EXCITATION = 0x210
FRAME_ID_GROUP = 0x211
FRAME_ID_HEARTBEAT = 0x220
FRAME_ID_STATUS = 0x300
FRAME_ID_ANGLE = 0x301
FRAME_ID_VELOCITY = 0x302
FRAME_ID_ARM = 0x303
FRAME_ID_FORCE = 0x304
FRAME_ID_IMU_QUAT = 0x305
FRAME_ID_IMU_GYRO = 0x306
FRAME_ID_EMG = 0x307
FRAME_ID_ENCODER = 0x308
FRAME_ID_SENSOR_FD = 0x310
FD_LENGTH = 64
NOT_AVAILABLE = "not_available"
"""The value-table name of a sensor signal's raw value for "no value" (a NaN in the sensor frame)."""

EXCITATION_PER_FRAME = 6
EXCITATION_RESOLUTION = 1.0 / 250.0
DOFS_PER_FRAME = 3
CONTROLLER, PLANT = "CTRL", "HIL"

GH_STABILITY_COMMENT = ("GH stability value (> 0: force outside the glenoid; saturated at the range; not_available "
                        "where the plant does not model it)")

#: bits of the status byte of HIL_Status taken by the sensor frame's status bits (the other two carry the
#: contact flags)
STATUS_BYTE_BITS = 6
#: status byte of HIL_Status: the sensor frame's first STATUS_BYTE_BITS status bits, then the contact flags
STATUS_SIGNALS = tuple(name for name, _ in STATUS_BITS[:STATUS_BYTE_BITS]) + ("ts_contact", "ai_contact")
#: the sensor frame's later status bits, in HIL_Status from bit 48 (after echo_counter)
STATUS_SIGNALS_HIGH = tuple(name for name, _ in STATUS_BITS[STATUS_BYTE_BITS:])


@dataclass(frozen=True)
class Signal:
    name: str
    start: int
    length: int
    signed: bool = False
    scale: float = 1.0
    offset: float = 0.0
    minimum: float = 0.0
    maximum: float = 0.0
    unit: str = ""
    mux: int | None = None          # value of the multiplexer selecting this signal
    is_mux: bool = False
    comment: str = ""
    not_available: int | None = None  # the raw value meaning "no value" (outside [minimum, maximum])

    def dbc(self, receiver: str) -> str:
        m = " M" if self.is_mux else (f" m{self.mux}" if self.mux is not None else "")
        return (f" SG_ {self.name}{m} : {self.start}|{self.length}@1{'-' if self.signed else '+'} "
                f"({_num(self.scale)},{_num(self.offset)}) [{_num(self.minimum)}|{_num(self.maximum)}] "
                f"\"{self.unit}\" {receiver}")


@dataclass(frozen=True)
class Message:
    frame_id: int
    name: str
    sender: str
    signals: tuple[Signal, ...]
    comment: str
    length: int = 8
    fd: bool = False           # a CAN FD frame (DBC attribute VFrameFormat = StandardCAN_FD)


def _num(x: float) -> str:
    return f"{x:.10g}"


def _u(name, start, length, maximum, scale=1.0, unit="", mux=None, comment="", is_mux=False, minimum=0.0):
    return Signal(name, start, length, False, scale, 0.0, minimum, maximum, unit, mux, is_mux, comment)


def _signed(name, start, scale, unit, mux=None, comment="", length=16):
    """A signed sensor signal (two's complement, ``length`` bits): its range is symmetric, raw -(2^(length-1) - 1)
    to 2^(length-1) - 1, and its lowest raw value, -2^(length-1), is :data:`NOT_AVAILABLE`."""
    half = 1 << (length - 1)
    top = round((half - 1) * scale, 10)
    return Signal(name, start, length, True, scale, 0.0, -top, top, unit, mux, False, comment, not_available=-half)


def message_set(dof_names, muscle_names, group_names, n_channels: int = 8) -> list[Message]:
    """Every message of the testbed's CAN interface."""
    counter = _u("counter", 8, 8, 255, comment="rolling counter, +1 (mod 256) per frame of this channel/block; "
                 "a repeated value is rejected as duplicate_counter, a step back of 1..127 as stale_counter")
    stim = Message(FRAME_ID_STIM, "FES_StimCmd", CONTROLLER, (
        _u("channel", 0, 4, n_channels, minimum=1, comment=f"stimulation channel 1..{n_channels} (the config's channel order)"),
        _u("mode", 4, 2, 2, comment="pulse mode: 0 single, 1 doublet, 2 triplet (ScienceMode)"),
        _u("enable", 6, 1, 1, comment="0: channel off (amplitude 0 whatever the other signals say)"),
        counter,
        _u("pulse_width", 16, 16, 1000, unit="us", comment="pulse width"),
        _u("amplitude", 32, 16, 150, scale=0.01, unit="mA", comment="current amplitude"),
        _u("frequency", 48, 16, 200, scale=0.01, unit="Hz", comment="pulse (train) frequency"),
    ), "Stimulation command for one channel (zero-order hold until the next one).")
    n_blocks = -(-len(muscle_names) // EXCITATION_PER_FRAME)
    exc = [_u("block", 0, 8, n_blocks - 1, is_mux=True,
              comment=f"muscle elements {EXCITATION_PER_FRAME}*block .. {EXCITATION_PER_FRAME}*block+5"), counter]
    for i, m in enumerate(muscle_names):
        b, k = divmod(i, EXCITATION_PER_FRAME)
        exc.append(_u(f"u_{m}", 16 + 8 * k, 8, 1, scale=EXCITATION_RESOLUTION, mux=b,
                      comment=f"excitation of muscle element {m} (index {i})"))
    excitation = Message(FRAME_ID_EXCITATION, "FES_Excitation", CONTROLLER, tuple(exc),
                         "Direct mode: excitations of six muscle elements, multiplexed by block.")
    group = Message(FRAME_ID_GROUP, "FES_GroupExcitation", CONTROLLER, (
        _u("group", 0, 8, len(group_names) - 1, comment="muscle group (value table)"),
        counter,
        _u("value", 16, 16, 1, scale=1e-4, comment="excitation of every element of the group"),
    ), "Direct mode: one excitation for all elements of a named muscle group.", length=4)
    heartbeat = Message(FRAME_ID_HEARTBEAT, "FES_Heartbeat", CONTROLLER, (
        _u("state", 0, 8, 255, comment="free for the controller (not interpreted)"), counter,
    ), "Controller alive; feeds the watchdog without changing the stimulation.", length=2)

    status_bits = [*[_u(n, 32 + i, 1, 1, comment=f"status bit: {n}") for i, n in enumerate(STATUS_SIGNALS)]]
    status = [_u("tick", 0, 32, 4294967295, comment="tick index of this frame set"), *status_bits,
              _u("echo_counter", 40, 8, 255, comment="counter of the newest command this driver accepted "
                 "before the tick (round-trip measurement)"),
              *[_u(n, 48 + i, 1, 1, comment=f"status bit: {n}") for i, n in enumerate(STATUS_SIGNALS_HIGH)],
              _signed("gh_stability", 48 + len(STATUS_SIGNALS_HIGH), 0.001, "", length=16 - len(STATUS_SIGNALS_HIGH),
                   comment=GH_STABILITY_COMMENT)]
    out = [Message(FRAME_ID_STATUS, "HIL_Status", PLANT, tuple(status), "Sent first in every feedback set.")]

    def multiplexed(frame_id, name, groups, scale, unit, comment):
        sig = [_u("block", 0, 8, len(groups) - 1, is_mux=True, comment="which three values"),
               _u("tick8", 8, 8, 255, comment="tick index mod 256")]
        for b, names in enumerate(groups):
            for k, n in enumerate(names):
                sig.append(_signed(n, 16 + 16 * k, scale, unit if isinstance(unit, str) else unit[b], mux=b))
        return Message(frame_id, name, PLANT, tuple(sig), comment)

    def chunks(names):
        return [names[i:i + DOFS_PER_FRAME] for i in range(0, len(names), DOFS_PER_FRAME)]

    out.append(multiplexed(FRAME_ID_ANGLE, "HIL_JointAngle", chunks([f"q_{d}" for d in dof_names]), 1e-4, "rad",
                           "Generalised coordinates (model DOF order), 1e-4 rad."))
    out.append(multiplexed(FRAME_ID_VELOCITY, "HIL_JointVelocity", chunks([f"qd_{d}" for d in dof_names]), 1e-3,
                           "rad/s", "Generalised velocities, 1e-3 rad/s."))
    out.append(multiplexed(FRAME_ID_ARM, "HIL_Arm", [["th_plane_of_elevation", "th_elevation", "th_axial_rotation"],
                                                     ["hand_x", "hand_y", "hand_z"]], 1e-4, ("rad", "m"),
                           "block 0: thoracohumeral angles (rad); block 1: hand position in the thorax frame (m)."))
    out.append(multiplexed(FRAME_ID_FORCE, "HIL_Force", [["gh_force_x", "gh_force_y", "gh_force_z"],
                                                         ["ts_force_x", "ts_force_y", "ts_force_z"],
                                                         ["ai_force_x", "ai_force_y", "ai_force_z"]], 0.1, "N",
                           "block 0: GH joint force on the scapula (scapula frame); blocks 1, 2: thorax contact "
                           "force at TS and AI (thorax frame); 0.1 N; not_available where the plant does not model them."))
    imu = [f"imu_{seg}" for seg in IMU_SEGMENTS]
    out.append(multiplexed(FRAME_ID_IMU_QUAT, "HIL_ImuQuat", chunks([f"{i}_q{c}" for i in imu for c in "wxyz"]),
                           2.0 ** -14, "", "Lab IMUs ([sensor.imu]): orientation quaternions (w, x, y, z) of the upper "
                           "arm and forearm sensors in the thorax frame, 2^-14."))
    out.append(multiplexed(FRAME_ID_IMU_GYRO, "HIL_ImuGyro", chunks([f"{i}_gyro_{c}" for i in imu for c in "xyz"]),
                           1e-3, "rad/s", "Lab IMUs ([sensor.imu]): angular rates in the sensor frames, 1e-3 rad/s."))
    out.append(multiplexed(FRAME_ID_EMG, "HIL_Emg", chunks([f"mwave_{c + 1}" for c in range(n_channels)]), 1e-6, "V",
                           "Evoked EMG ([sensor.emg]): M-wave amplitude of stimulation channels 1..n, 1 uV."))
    encoders = [_u("block", 0, 8, len(dof_names) - 1, is_mux=True, comment="the joint: its DOF index"),
                _u("tick8", 8, 8, 255, comment="tick index mod 256")]
    encoders += [_signed(f"encoder_{d}", 16, 1.0, "counts", mux=b, length=32) for b, d in enumerate(dof_names)]
    out.append(Message(FRAME_ID_ENCODER, "HIL_Encoder", PLANT, tuple(encoders),
                       "Lab joint encoders ([sensor.encoder]): the joint's angle in whole counts, a frame per configured "
                       "joint (block: the joint's DOF index); the other joints' frames are not sent."))
    # CAN FD: the values a controller closes a loop on, one frame a tick
    fd = [_u("tick", 0, 32, 4294967295, comment="tick index of this frame"), *status_bits,
          *[_u(n, 40 + i, 1, 1, comment=f"status bit: {n}") for i, n in enumerate(STATUS_SIGNALS_HIGH)],
          _u("echo_counter", 48, 8, 255, comment="counter of the newest command this driver accepted before the tick"),
          _signed("gh_stability", 56, 0.001, "", comment=GH_STABILITY_COMMENT)]
    bit = 72
    for names, scale, unit in (([f"q_{d}" for d in dof_names], 1e-4, "rad"), ([f"qd_{d}" for d in dof_names], 1e-3, "rad/s"),
                               (["th_plane_of_elevation", "th_elevation", "th_axial_rotation"], 1e-4, "rad")):
        for n in names:
            fd.append(_signed(n, bit, scale, unit))
            bit += 16
    assert bit <= 8 * FD_LENGTH, "HIL_SensorFD does not fit 64 bytes"
    sensor_fd = Message(FRAME_ID_SENSOR_FD, "HIL_SensorFD", PLANT, tuple(fd),
                        "CAN FD: status, q (1e-4 rad), q velocities (1e-3 rad/s) and thoracohumeral angles "
                        "(1e-4 rad) of one tick in one frame.", length=FD_LENGTH, fd=True)
    return [stim, excitation, group, heartbeat, *out, sensor_fd]


#: values of the DBC message attribute VFrameFormat (Vector's definition)
VFRAME_FORMATS = ("StandardCAN", "ExtendedCAN", "reserved", "J1939PG", *["reserved"] * 10, "StandardCAN_FD",
                  "ExtendedCAN_FD")


def generate_dbc(dof_names, muscle_names, group_names, n_channels: int = 8) -> str:
    """DBC text of :func:`message_set` (with comments and the muscle-group value table)."""
    msgs = message_set(dof_names, muscle_names, group_names, n_channels)
    lines = ['VERSION "fes-hil 1"', "", "NS_ :", "    CM_", "    BA_DEF_", "    BA_", "    BA_DEF_DEF_", "    VAL_",
             "", "BS_:", "",
             f"BU_: {CONTROLLER} {PLANT}", ""]
    for m in msgs:
        receiver = PLANT if m.sender == CONTROLLER else CONTROLLER
        lines.append(f"BO_ {m.frame_id} {m.name}: {m.length} {m.sender}")
        lines += [s.dbc(receiver) for s in m.signals]
        lines.append("")
    lines.append('CM_ "FES HIL testbed message set, generated by hil can dbc from the DAS3 model names.";')
    for m in msgs:
        lines.append(f'CM_ BO_ {m.frame_id} "{m.comment}";')
        for s in m.signals:
            if s.comment:
                lines.append(f'CM_ SG_ {m.frame_id} {s.name} "{s.comment}";')
    fd = [m for m in msgs if m.fd]
    if fd:      # the frame format attribute as cantools and Vector tools read it (14: StandardCAN_FD)
        lines.append('BA_DEF_ BO_ "VFrameFormat" ENUM ' + ",".join(f'"{c}"' for c in VFRAME_FORMATS) + ";")
        lines.append('BA_DEF_DEF_ "VFrameFormat" "StandardCAN";')
        for m in fd:
            lines.append(f'BA_ "VFrameFormat" BO_ {m.frame_id} {VFRAME_FORMATS.index("StandardCAN_FD")};')
    groups = " ".join(f'{i} "{g}"' for i, g in enumerate(group_names))
    lines.append(f"VAL_ {FRAME_ID_GROUP} group {groups} ;")
    lines += [f'VAL_ {m.frame_id} {s.name} {s.not_available} "{NOT_AVAILABLE}" ;'
              for m in msgs for s in m.signals if s.not_available is not None]
    return "\n".join(lines) + "\n"


def message_table(db) -> str:
    """A Markdown table of a loaded cantools database (for the README)."""
    rows = ["| id | message | dir | bytes | signals (start bit, bits, scale, unit, range) |", "|---|---|---|---|---|"]
    for m in sorted(db.messages, key=lambda m: m.frame_id):
        sigs = [s for s in m.signals if not s.name.startswith("u_")]
        text = "; ".join(f"`{s.name}` {s.start},{s.length},{_num(s.scale)}{(' ' + s.unit) if s.unit else ''} "
                         f"[{_num(s.minimum)}..{_num(s.maximum)}]" for s in sigs)
        n_u = len(m.signals) - len(sigs)
        if n_u:
            text += f"; {n_u} × `u_<element>` (u8, 1/250, mux `block`)"
        direction = "ctrl→hil" if m.senders == [CONTROLLER] else "hil→ctrl"
        rows.append(f"| 0x{m.frame_id:03X} | {m.name} | {direction} | {m.length}{' (FD)' if m.is_fd else ''} | {text} |")
    return "\n".join(rows) + "\n"


class DbcFileError(UserInputError, ValueError):
    """A DBC file that cannot be used; the message names the file and the reason, on one line."""

    def __init__(self, path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{self.path}: {reason}")


def read_dbc(path):
    """The cantools database of the DBC file ``path``, or :class:`DbcFileError`: not a regular file, larger than
    :data:`MAX_DBC_BYTES`, not cp1252 text, or a text cantools does not take as a DBC (its reason, on one line).
    Any failure of the parser counts as the file's: the file is the only input."""
    import cantools
    try:
        text = read_input_file(path, MAX_DBC_BYTES).decode(DBC_ENCODING)
    except InputFileError as exc:
        raise DbcFileError(path, exc.reason) from None
    except UnicodeDecodeError as exc:
        raise DbcFileError(path, f"byte {exc.start} is not {DBC_ENCODING} text") from None
    try:
        return cantools.database.load_string(text, database_format="dbc")
    except Exception as exc:                  # noqa: BLE001 - any parser failure is the file's (see docstring)
        reason = " ".join(str(exc).split())
        raise DbcFileError(path, f"not a DBC file cantools can read: {reason[:300]}") from None
