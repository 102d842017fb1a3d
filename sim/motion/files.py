"""Readers of recorded motion into :class:`sim.motion.data.Motion`: OpenSim Storage (.mot, .sto: coordinates),
TRC (markers) and C3D (markers, read with ezc3d). Each converts to SI units and radians from what its header
says, and refuses a file whose units it cannot tell.

- **Storage** (OpenSim's text format, versions 1 and 3 as its ``STOFileAdapter`` writes them): an optional name
  line, ``key=value`` lines, ``endheader``, a line of column labels starting with ``time``, then one row per
  sample. ``nRows``/``nColumns``, when given, must match the rows and columns present. ``inDegrees=yes``
  converts the angle columns (:data:`ANGLE_NAMES`, also as the ``/jointset/<joint>/<coordinate>/value`` and
  ``/speed`` paths of OpenSim's states files) from degrees; other columns are taken as SI. A file with angle
  columns and no ``inDegrees`` line is refused: its unit is unknown.
- **TRC** (``PathFileType 4``): the ``Units`` value (mm, cm, m) scales the positions to m; an empty field (a
  marker not seen in that frame) is a gap, which the motion check refuses.
- **C3D** (:mod:`sim.motion.c3d`, ezc3d in a child process): the ``POINT:UNITS`` parameter scales to m; ezc3d
  marks invalid points NaN (gaps), refused likewise.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from sim.das3.layout import DOF_NAMES
from sim.das3.release import opensim_names
from sim.input_file import InputFileError, read_input_file
from sim.motion.c3d import read_c3d
from sim.motion.data import LENGTH_UNITS, MAX_FILE_BYTES, Motion, MotionFileError, file_status

MAX_COLUMNS = 100_000
"""Most columns a motion file may declare (*proposal*)."""

#: Angle columns converted by ``inDegrees=yes``: the DAS3 coordinates (``das3.osim`` names and this project's DOF
#: names) and the reduced arm's angles (``sim.fitting.mtg_motion.ANGLE_COLUMNS``).
ANGLE_NAMES = frozenset((*DOF_NAMES, *opensim_names()[0].values(), "th_plane_of_elevation", "th_elevation",
                         "th_axial_rotation", "elbow_flexion", "forearm_pronation"))


def read_motion(path: str | os.PathLike) -> Motion:
    """The motion in ``path``, by its suffix: .mot/.sto, .trc or .c3d."""
    path = Path(path)
    suffix = path.suffix.lower()
    reader = {".mot": read_storage, ".sto": read_storage, ".trc": read_trc, ".c3d": read_c3d}.get(suffix)
    if reader is None:
        raise MotionFileError(f"{path}: unknown motion file type {suffix!r}; .mot, .sto, .trc or .c3d")
    return reader(path)


def _text(path: Path) -> list[str]:
    file_status(path)
    try:
        return read_input_file(path, MAX_FILE_BYTES).decode("utf-8").splitlines()
    except InputFileError as exc:
        raise MotionFileError(str(exc)) from None
    except UnicodeDecodeError:
        raise MotionFileError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise MotionFileError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _numbers(path: Path, rows: list[list[str]], first_line: int, width: int) -> np.ndarray:
    """The rows as floats; an empty field is NaN (a gap)."""
    out = np.empty((len(rows), width))
    for i, row in enumerate(rows):
        if len(row) != width:
            raise MotionFileError(f"{path}: line {first_line + i} has {len(row)} values, not {width}")
        try:
            out[i] = [float(v) if v.strip() else np.nan for v in row]
        except ValueError:
            raise MotionFileError(f"{path}: line {first_line + i} holds a value that is not a number") from None
    return out


def _split(line: str) -> list[str]:
    return line.rstrip("\r\n").split("\t") if "\t" in line else line.split()


def _header_count(path: Path, header: dict, key: str) -> int | None:
    if key not in header:
        return None
    try:
        value = int(header[key])
    except ValueError:
        raise MotionFileError(f"{path}: {key}={header[key]!r} is not a whole number") from None
    if not 0 <= value <= (MAX_COLUMNS if key == "ncolumns" else 10 ** 9):
        raise MotionFileError(f"{path}: {key}={value} is out of range")
    return value


def _angle_base(label: str) -> str | None:
    """The coordinate an angle column holds (``SC_y``, ``/jointset/sc1/SC_y/value``, ``.../speed``), else None."""
    parts = [p for p in label.split("/") if p]
    name = parts[-2] if len(parts) >= 2 and parts[-1] in ("value", "speed") else label
    return name if name in ANGLE_NAMES else None


def read_storage(path: str | os.PathLike) -> Motion:
    """An OpenSim Storage file (.mot, .sto) of coordinates or other time series."""
    path = Path(path)
    lines = _text(path)
    end = next((i for i, ln in enumerate(lines) if ln.strip().lower() == "endheader"), None)
    if end is None:
        raise MotionFileError(f"{path}: no 'endheader' line: not an OpenSim storage (.mot/.sto) file")
    header = {}
    for ln in lines[:end]:
        if "=" in ln:
            key, value = ln.split("=", 1)
            header[key.strip().lower()] = value.strip()
    body = [(i, ln) for i, ln in enumerate(lines[end + 1:], start=end + 2) if ln.strip()]
    if not body:
        raise MotionFileError(f"{path}: no column labels after 'endheader'")
    labels = [s.strip() for s in _split(body[0][1])]
    if len(labels) > MAX_COLUMNS or not labels or labels[0].lower() != "time":
        raise MotionFileError(f"{path}: the first column must be 'time' (found {labels[0][:40]!r})" if labels and
                              len(labels) <= MAX_COLUMNS else f"{path}: {len(labels)} columns; at most {MAX_COLUMNS}")
    n_cols, n_rows = _header_count(path, header, "ncolumns"), _header_count(path, header, "nrows")
    if n_cols is not None and n_cols != len(labels):
        raise MotionFileError(f"{path}: the header says nColumns={n_cols}, the label line has {len(labels)}")
    if n_rows is not None and n_rows != len(body) - 1:
        raise MotionFileError(f"{path}: the header says nRows={n_rows}, the file has {len(body) - 1} rows "
                              "(cut off or padded)")
    data = _numbers(path, [_split(ln) for _, ln in body[1:]], body[0][0] + 1, len(labels))
    angles = [j for j, lab in enumerate(labels) if j and _angle_base(lab)]
    degrees = header.get("indegrees", "").lower()
    if degrees not in ("yes", "no", "") or (angles and not degrees):
        raise MotionFileError(f"{path}: inDegrees={header.get('indegrees', '(missing)')!r}; the angles' unit needs "
                              "inDegrees=yes or inDegrees=no")
    if degrees == "yes":
        data[:, angles] = np.radians(data[:, angles])
    return Motion(str(path), data[:, 0], tuple(labels[1:]), data[:, 1:])


def read_trc(path: str | os.PathLike) -> Motion:
    """A TRC marker file (``PathFileType 4``: rate/units header, marker names, X/Y/Z per marker)."""
    path = Path(path)
    lines = _text(path)
    if len(lines) < 6 or not lines[0].startswith("PathFileType"):
        raise MotionFileError(f"{path}: not a TRC file (no 'PathFileType' line and its five header lines)")
    keys, values = _split(lines[1]), _split(lines[2])
    header = dict(zip((k.strip() for k in keys), (v.strip() for v in values)))
    units = header.get("Units", "")
    if units not in LENGTH_UNITS:
        raise MotionFileError(f"{path}: Units={units!r}; known: {', '.join(LENGTH_UNITS)}")
    names = [n.strip() for n in _split(lines[3])[2:] if n.strip()]
    if not names or len(names) > MAX_COLUMNS:
        raise MotionFileError(f"{path}: {len(names)} marker names on line 4; 1 to {MAX_COLUMNS}")
    try:
        declared = int(header.get("NumMarkers", len(names)))
        frames = int(header.get("NumFrames", -1))
    except ValueError:
        raise MotionFileError(f"{path}: NumMarkers or NumFrames is not a whole number") from None
    if declared != len(names):
        raise MotionFileError(f"{path}: NumMarkers={declared} but {len(names)} marker names")
    rows = [(i, ln) for i, ln in enumerate(lines[5:], start=6) if ln.strip()]
    if frames >= 0 and frames != len(rows):
        raise MotionFileError(f"{path}: NumFrames={frames} but {len(rows)} frames (cut off or padded)")
    width = 2 + 3 * len(names)
    data = _numbers(path, [_trc_row(ln, width) for _, ln in rows], rows[0][0] if rows else 6, width)
    xyz = data[:, 2:].reshape(len(rows), len(names), 3) * LENGTH_UNITS[units]
    return Motion(str(path), data[:, 1], tuple(names), xyz)


def _trc_row(line: str, width: int) -> list[str]:
    """A TRC data row's fields: tab-separated, where empty fields (also trailing ones) are gaps and a trailing
    tab past the last marker is ignored; whitespace-separated when the line has no tab."""
    if "\t" not in line:
        return line.split()
    cells = line.rstrip("\r\n").split("\t")
    while len(cells) > width and not cells[-1].strip():
        cells.pop()
    return cells + [""] * (width - len(cells)) if len(cells) >= 2 else cells
