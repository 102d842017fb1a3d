"""One recorded motion, whatever file it came from: sample times (s) and named columns in SI units, angles in
radians, marker positions in metres; checked on construction and resampled to a control period by linear
interpolation."""
from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import UserInputError

MAX_SAMPLES = 10_000_000
"""Most samples a motion or its resampling may hold (*proposal*: 10^7 rows, about 28 h at 100 Hz)."""
MAX_FILE_BYTES = 1 << 30
"""Largest motion file read (*proposal*: 1 GiB, far above an hour of 100 Hz full-body marker data)."""
LENGTH_UNITS = {"mm": 1e-3, "cm": 1e-2, "m": 1.0}
"""Metres per unit of the marker files' ``Units`` (TRC) or ``POINT:UNITS`` (C3D) values the readers know."""


class MotionFileError(UserInputError, ValueError):
    """A motion file that cannot be used; the message names the file and the reason."""


def file_status(path: Path) -> os.stat_result:
    """The file's status: a regular file (a FIFO would block the reader, a device never end) of at most
    :data:`MAX_FILE_BYTES`."""
    try:
        st = path.stat()
    except OSError as exc:
        raise MotionFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise MotionFileError(f"{path}: is not a regular file (a directory, device, FIFO or socket); nothing was read")
    if st.st_size > MAX_FILE_BYTES:
        raise MotionFileError(f"{path}: {st.st_size} bytes; a motion file holds at most {MAX_FILE_BYTES}")
    return st


@dataclass(frozen=True)
class Motion:
    """``time`` (n,) s, strictly increasing; ``names`` of the columns; ``values`` (n, k) for coordinates
    (angles in rad, lengths in m) or (n, k, 3) for marker positions (m, the file's lab frame)."""

    source: str
    time: np.ndarray
    names: tuple[str, ...]
    values: np.ndarray

    def __post_init__(self) -> None:
        check_motion(self)

    @property
    def markers(self) -> bool:
        return self.values.ndim == 3

    def column(self, name: str) -> np.ndarray:
        """The samples of one column (a marker: (n, 3))."""
        return self.values[:, self.names.index(name)]


def check_motion(m: Motion) -> None:
    """At least two samples, finite strictly increasing times, a value per column and sample, all finite."""
    src, n = m.source, m.time.shape[0] if m.time.ndim == 1 else -1
    if n < 2:
        raise MotionFileError(f"{src}: {max(n, 0)} samples; a motion needs at least 2")
    if n > MAX_SAMPLES:
        raise MotionFileError(f"{src}: {n} samples; at most {MAX_SAMPLES}")
    if m.values.ndim not in (2, 3) or m.values.shape[:2] != (n, len(m.names)) or \
            (m.values.ndim == 3 and m.values.shape[2] != 3):
        raise MotionFileError(f"{src}: {len(m.names)} columns named but values of shape {m.values.shape}")
    if len(set(m.names)) != len(m.names):
        raise MotionFileError(f"{src}: a column name appears twice")
    if not np.all(np.isfinite(m.time)):
        raise MotionFileError(f"{src}: a time is not a finite number (sample {int(np.argmin(np.isfinite(m.time)))})")
    if not np.all(np.diff(m.time) > 0.0):
        k = int(np.argmin(np.diff(m.time) > 0.0))
        raise MotionFileError(f"{src}: time does not increase at sample {k + 1} ({m.time[k + 1]!r} s after "
                              f"{m.time[k]!r} s)")
    bad = ~np.isfinite(m.values.reshape(n, len(m.names), -1)).all(axis=2)
    if bad.any():
        row, col = (int(v[0]) for v in np.nonzero(bad))
        raise MotionFileError(f"{src}: {m.names[col]!r} is missing or not finite at sample {row} "
                              f"(t = {m.time[row]:g} s); fill the gap first")


def resample(m: Motion, period_s: float) -> Motion:
    """The motion at t0 + k period_s, k = 0, 1, ... while within the recording, each column linearly
    interpolated between its two neighbouring samples."""
    if not (isinstance(period_s, (int, float)) and math.isfinite(period_s) and period_s > 0.0):
        raise MotionFileError(f"{m.source}: the resampling period must be a finite number > 0 s, not {period_s!r}")
    span = float(m.time[-1] - m.time[0])
    count = math.floor(span / period_s * (1.0 + 1e-12)) + 1
    if count > MAX_SAMPLES or count < 2:
        raise MotionFileError(f"{m.source}: {span:g} s at a period of {period_s:g} s gives {count} samples; "
                              f"between 2 and {MAX_SAMPLES}")
    t = m.time[0] + period_s * np.arange(count)
    flat = m.values.reshape(m.time.shape[0], -1)
    out = np.column_stack([np.interp(t, m.time, flat[:, j]) for j in range(flat.shape[1])])
    return Motion(m.source, t, m.names, out.reshape((count, *m.values.shape[1:])))
