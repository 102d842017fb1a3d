"""The CAN feedback set: which sensor-frame value each DBC signal carries, and a packer for the set.

A feedback set is every frame of the configured feedback messages for one sensor frame (``HIL_Status``,
the multiplexed blocks of ``HIL_JointAngle`` ..., or ``HIL_SensorFD``). :class:`FeedbackSet` is built
once from the cantools messages when the link opens:

- a **value vector** holds, per tick, every value any signal can carry: tick, tick mod 256, echo
  counter, GH stability, the status bits, q, q̇, thoracohumeral angles, hand position, GH force and
  the two thorax contact forces, then the multiplexer constants;
- each frame is a list of **fields**: (DBC signal, index into the value vector). Status signals are
  found by name, the values of a block by position (block b of a multiplexed message carries values
  3b..3b+2 of its sensor arrays in DBC signal order; ``HIL_SensorFD`` carries q, q̇, TH angles in order).

:meth:`FeedbackSet.pack` encodes the whole set in one numba kernel call instead of one cantools
``Message.encode`` per frame, each with its signal dictionary (README "Dependencies" has the timings):
every field is saturated to its DBC range and to its bit
width, scaled as cantools does (``round((value - offset) / scale)``, half to even), masked, shifted
into 64-bit little-endian words and OR-ed per word. The bytes are the same as cantools'
(``tests/drivers/test_can.py`` checks random frames).
A message with a big-endian or floating-point signal (a hand-edited DBC) is encoded by cantools
from the same fields. A NaN (a value the plant does not model) becomes the signal's ``not_available`` raw value
(:data:`drivers.can.dbc.NOT_AVAILABLE`, outside its range), or raw 0 where a hand-edited DBC names none.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from drivers.can.dbc import NOT_AVAILABLE, STATUS_SIGNALS, STATUS_SIGNALS_HIGH
from drivers.core.contract import ENCODER_PREFIX, STATUS_BITS

#: sensor-frame bit of each status signal (``drivers.core.contract.STATUS_BITS``)
_STATUS_BITS = {name: bit for bit, (name, _) in enumerate(STATUS_BITS)}
_CONTACTS = ("ts_contact", "ai_contact")
_SCALARS = ("tick", "tick8", "echo_counter", *_STATUS_BITS, *_CONTACTS)
#: the sensor-frame arrays the feedback messages carry
_ARRAYS = ("q", "qdot", "th_angles", "hand_position", "gh_force", "st_contact_force")

_STATUS = ("tick", "echo_counter", "gh_stability", *STATUS_SIGNALS, *STATUS_SIGNALS_HIGH)
#: per feedback message: the named values its frames carry, and the sensor arrays whose values fill its
#: other signals (multiplexed: three per block, block b the values 3b..3b+2; else all, in order)
LAYOUT = {"HIL_Status": (_STATUS, ()),
          "HIL_JointAngle": (("tick8",), ("q",)),
          "HIL_JointVelocity": (("tick8",), ("qdot",)),
          "HIL_Arm": (("tick8",), ("th_angles", "hand_position")),
          "HIL_Force": (("tick8",), ("gh_force", "st_contact_force")),
          "HIL_SensorFD": (_STATUS, ("q", "qdot", "th_angles")),
          "HIL_ImuQuat": (("tick8",), ("imu_quat",)),
          "HIL_ImuGyro": (("tick8",), ("imu_gyro",)),
          "HIL_Emg": (("tick8",), ("emg_mwave",)),
          "HIL_Encoder": (("tick8",), ("encoder",))}
#: the lab sensors' arrays (``drivers.core.contract.sensor_frame_dtype``): in the value vector when the frame has them;
#: "encoder" stands for the frame's consecutive ``encoder_<DOF>`` fields
_LAB_ARRAYS = {"imu_quat": "[sensor.imu]", "imu_gyro": "[sensor.imu]", "emg_mwave": "[sensor.emg]",
               "encoder": "[sensor.encoder]"}
#: the message with a frame per joint encoder, sent for the frame's encoders only (its signals are named as their fields)
ENCODER_MESSAGE = "HIL_Encoder"
#: the feedback messages of the lab sensors: sent only when the run has the sensor (:func:`lab_sensor_lacking`)
LAB_MESSAGES = tuple(m for m, (_, arrays) in LAYOUT.items() if set(arrays) & set(_LAB_ARRAYS))


def lab_sensor_lacking(message: str, frame_dtype: np.dtype) -> str | None:
    """The ``[sensor.<name>]`` table a feedback message needs whose fields the run's frame lacks, or None."""
    present = set(frame_dtype.names) | ({"encoder"} if any(n.startswith(ENCODER_PREFIX) for n in frame_dtype.names)
                                        else set())
    return next((_LAB_ARRAYS[a] for a in LAYOUT.get(message, ((), ()))[1] if a in _LAB_ARRAYS and a not in present),
                None)
_BLOCK_SIZE = 3


class FeedbackSet:
    """Fields of every frame of a feedback set and their packer (see the module docstring).

    ``messages``: the cantools messages in send order; ``frame_dtype``: the sensor frame's
    (``drivers.core.contract.frame_dtype()``); ``source``: the DBC's name for error messages. Raises ValueError when
    a message's signals are not exactly the ones this version fills (a DBC from another version)."""

    def __init__(self, messages, frame_dtype: np.dtype, source: str = "the DBC") -> None:
        self.source = source
        self._frame_dtype = frame_dtype
        self.index = {n: i for i, n in enumerate(_SCALARS)}
        # The frame's float64 fields from the first array on are one block of its bytes: the value vector
        # holds a copy of that block (one copy a tick), and each array is a slice of it.
        first = min(frame_dtype.fields[a][1] for a in _ARRAYS)
        encoders = [n for n in frame_dtype.names if n.startswith(ENCODER_PREFIX)]
        self._frame_floats = (first, (frame_dtype.itemsize - first) // 8)
        at = len(_SCALARS)
        self._float_slice = slice(at, at + self._frame_floats[1])
        self.array_slice = {}
        for name in (*_ARRAYS, "gh_stability", *(a for a in _LAB_ARRAYS if a in frame_dtype.names), *encoders):
            dtype, offset = frame_dtype.fields[name][:2]
            if dtype.base != np.dtype("<f8") or (offset - first) % 8:
                raise TypeError(f"sensor frame field {name} is not a float64 in the block from offset {first}")
            start = at + (offset - first) // 8
            self.array_slice[name] = slice(start, start + int(np.prod(dtype.shape)))
        self.index["gh_stability"] = self.array_slice.pop("gh_stability").start
        #: the value index of each joint encoder's count, by its field (and signal) name
        self.encoder_index = {name: self.array_slice.pop(name).start for name in encoders}
        if encoders:
            self.array_slice["encoder"] = slice(self.encoder_index[encoders[0]], self.encoder_index[encoders[-1]] + 1)
        at = self._float_slice.stop
        constants: dict[int, int] = {}
        #: per frame: (cantools message, multiplexer value or None, [(signal, value index), ...])
        self.frames = []
        for msg in messages:
            carried = set()
            lacking = lab_sensor_lacking(msg.name, frame_dtype)
            if lacking:
                raise ValueError(f"feedback {msg.name} needs {lacking} in the config")
            for block, signals in self._frame_signals(msg):
                if msg.name == ENCODER_MESSAGE and not any(s.name in self.encoder_index for s in signals):
                    continue                              # a joint without an encoder: no frame
                fields = [(s, constants.setdefault(block, at + len(constants))) for s in signals if s.is_multiplexer]
                fields += self._value_fields(msg, block, [s for s in signals if not s.is_multiplexer])
                carried.update(i for _, i in fields)
                self.frames.append((msg, block, fields))
            missing = [n for a in LAYOUT[msg.name][1] for n, i in self._value_names(a) if i not in carried]
            if missing:
                self._mismatch(msg.name, [], missing)
        self.values = np.zeros(at + len(constants))
        for block, i in constants.items():
            self.values[i] = block
        self._build_packer()

    def _value_names(self, array: str):
        """(name, value index) of each value of a sensor array, e.g. ("q[3]", 18)."""
        if array == "encoder":
            return list(self.encoder_index.items())
        sl = self.array_slice[array]
        return [(f"{array}[{k}]", i) for k, i in enumerate(range(sl.start, sl.stop))]

    def _mismatch(self, where: str, unfilled, lacking):
        raise ValueError(f"{where} in {self.source} does not match this version's sensor frame (DBC signals not "
                         f"filled: {unfilled or 'none'}; values the DBC lacks: {lacking or 'none'}): regenerate "
                         "it with `hil can dbc`")

    # -- which value each signal carries ---------------------------------------------------------
    @staticmethod
    def _frame_signals(msg):
        """(multiplexer value or None, signals of that frame) for each frame of ``msg``."""
        if not msg.is_multiplexed():
            return [(None, list(msg.signals))]
        blocks = sorted({b for s in msg.signals for b in (s.multiplexer_ids or ())})
        return [(b, [s for s in msg.signals if s.is_multiplexer or not s.multiplexer_ids
                     or b in s.multiplexer_ids]) for b in blocks]

    def _value_fields(self, msg, block, signals):
        """(signal, value index) of the signals of one frame; ValueError if they are not the ones this
        version fills (a DBC from another version: values would be shifted or missing)."""
        if msg.name not in LAYOUT:
            raise ValueError(f"{msg.name} is not a feedback message (one of {', '.join(LAYOUT)})")
        named_values, arrays = LAYOUT[msg.name]
        positions = [i for a in arrays for i in range(self.array_slice[a].start, self.array_slice[a].stop)]
        if msg.name == ENCODER_MESSAGE:
            positions = [self.encoder_index[s.name] for s in signals if s.name in self.encoder_index]
        elif msg.is_multiplexed():
            positions = positions[_BLOCK_SIZE * block:_BLOCK_SIZE * block + _BLOCK_SIZE]
        named = [s for s in signals if s.name in self.index]
        values = [s for s in signals if s.name not in self.index]
        unfilled = sorted({s.name for s in named} - set(named_values)) + [s.name for s in values[len(positions):]]
        lacking = sorted(set(named_values) - {s.name for s in named})
        if len(values) < len(positions):
            lacking.append(f"{len(positions) - len(values)} of {len(positions)} values")
        if unfilled or lacking:
            self._mismatch(msg.name if block is None else f"{msg.name} block {block}", unfilled, lacking)
        return [(s, self.index[s.name]) for s in named] + list(zip(values, positions, strict=True))

    def fill(self, frame, echo_seq: int) -> np.ndarray:
        """The value vector for one sensor frame (``hil.rt.sensor`` frame record)."""
        v = self.values
        tick, status = int(frame["tick"]), int(frame["status"])
        ix = self.index
        v[ix["tick"]] = tick & 0xFFFFFFFF
        v[ix["tick8"]] = tick & 0xFF
        v[ix["echo_counter"]] = max(echo_seq, 0) & 0xFF
        for name, bit in _STATUS_BITS.items():
            v[ix[name]] = (status >> bit) & 1
        contact = frame["st_in_contact"]
        v[ix["ts_contact"]], v[ix["ai_contact"]] = int(contact[0]), int(contact[1])
        v[self._float_slice] = np.frombuffer(frame.tobytes(), "<f8", self._frame_floats[1], self._frame_floats[0])
        return v

    def signal_values(self, frame, echo_seq: int):
        """(cantools message, {signal: value}) of each frame, values saturated as :meth:`pack` does (the
        input of cantools ``encode``)."""
        v = self.fill(frame, echo_seq)
        return [(msg, _signal_dict(v, fields)) for msg, _, fields in self.frames]

    # -- packing ---------------------------------------------------------------------------------
    def _build_packer(self) -> None:
        """Flatten every little-endian integer field into (word, shift, mask) parts for :func:`_pack_words`.

        A field of ``length`` bits at bit ``start`` of the little-endian payload lies in 64-bit word
        start // 64 at offset start % 64; one that crosses a word boundary gets a second part, the raw
        value shifted right by the bits already placed. The physical range of a field is its DBC range
        within what its bits hold, so a saturated value always fits."""
        parts, fields = [], []        # parts: (word, field, right shift, mask, left shift)
        self.byte_ranges, self._cantools_frames = [], []
        word = 0
        for k, (msg, _, flist) in enumerate(self.frames):
            fast = all(s.byte_order == "little_endian" and not s.is_float for s, _ in flist)
            self.byte_ranges.append((8 * word, 8 * word + msg.length) if fast else None)
            if not fast:
                self._cantools_frames.append(k)
                continue
            for s, src in flist:
                f = len(fields)
                fields.append((src, *_physical_range(s), s.offset, s.scale, not_available_raw(s)))
                done = 0
                while done < s.length:
                    bit = s.start + done
                    n = min(s.length - done, 64 - bit % 64)
                    parts.append((word + bit // 64, f, done, (1 << n) - 1, bit % 64))
                    done += n
            word += -(-msg.length // 8)
        f = np.array(fields, dtype=float).reshape(-1, 6)
        self._src = f[:, 0].astype(np.intp)
        self._lo, self._hi, self._offset, self._scale = (f[:, c].copy() for c in range(1, 5))
        self._nan_raw = f[:, 5].astype(np.int64)
        p = np.array(parts, dtype=np.uint64).reshape(-1, 5)
        self._part_word, self._part_field = p[:, 0].astype(np.intp), p[:, 1].astype(np.intp)
        self._part_rshift, self._part_mask, self._part_lshift = p[:, 2].copy(), p[:, 3].copy(), p[:, 4].copy()
        self._raw = np.zeros(len(fields), np.int64)
        self._words = np.zeros(word, np.dtype("<u8"))
        self.pack(np.zeros(1, self._frame_dtype)[0], 0)     # compile (or load) the kernel now, not at tick 1

    def pack(self, frame, echo_seq: int) -> list[bytes]:
        """The payload of every frame of the set, in order (the bytes cantools ``encode`` gives)."""
        v = self.fill(frame, echo_seq)
        _pack_words(v, self._src, self._lo, self._hi, self._offset, self._scale, self._nan_raw, self._raw,
                    self._part_word, self._part_field, self._part_rshift, self._part_mask, self._part_lshift,
                    self._words)
        payload = self._words.tobytes()
        out = [payload[r[0]:r[1]] if r is not None else b"" for r in self.byte_ranges]
        for k in self._cantools_frames:          # from the value vector filled above
            msg, _, fields = self.frames[k]
            out[k] = msg.encode(_signal_dict(v, fields), strict=False)
        return out


@njit(cache=True, nogil=True)
def _pack_words(values, src, lo, hi, offset, scale, nan_raw, raw, part_word, part_field, part_rshift, part_mask,
                part_lshift, words):
    """Raw value of every field (saturated, ``round((x - offset) / scale)`` half to even as cantools,
    NaN -> ``nan_raw``), then each part ``((raw >> rshift) & mask) << lshift`` OR-ed into its 64-bit word."""
    for i in range(src.size):
        x = values[src[i]]
        if np.isnan(x):
            raw[i] = nan_raw[i]
        else:
            raw[i] = np.int64(np.rint((min(max(x, lo[i]), hi[i]) - offset[i]) / scale[i]))
    unsigned = raw.view(np.uint64)
    words[:] = 0
    for j in range(part_word.size):
        words[part_word[j]] |= ((unsigned[part_field[j]] >> part_rshift[j]) & part_mask[j]) << part_lshift[j]


def _signal_dict(values: np.ndarray, fields) -> dict[str, float | str]:
    """{signal: value} of one frame's fields, saturated as the packer does (the input of cantools ``encode``)."""
    return {s.name: _saturate(s, float(values[i])) for s, i in fields}


def _raw_range(signal) -> tuple[int, int]:
    """The raw integers a signal's bits hold."""
    if signal.is_signed:
        return -(1 << (signal.length - 1)), (1 << (signal.length - 1)) - 1
    return 0, (1 << signal.length) - 1


def _physical_range(signal) -> tuple[float, float]:
    """The DBC range [minimum, maximum] (unbounded where not given), within what the bits hold."""
    lo = -math.inf if signal.minimum is None else signal.minimum
    hi = math.inf if signal.maximum is None else signal.maximum
    if not signal.is_float:
        ends = sorted(r * signal.scale + signal.offset for r in _raw_range(signal))
        lo, hi = max(lo, ends[0]), min(hi, ends[1])
    return lo, hi


def not_available_raw(signal) -> int:
    """The raw value a NaN goes out as: the one the signal's value table names :data:`NOT_AVAILABLE`, else 0."""
    return next((raw for raw, name in (signal.choices or {}).items() if str(name) == NOT_AVAILABLE), 0)


def _saturate(signal, value: float) -> float | str:
    """``value`` within the signal's range; NaN as its :func:`not_available_raw` (by name, or the offset)."""
    if math.isnan(value):
        return NOT_AVAILABLE if not_available_raw(signal) else signal.offset
    lo, hi = _physical_range(signal)
    return min(max(value, lo), hi)
