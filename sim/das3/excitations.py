"""Excitation schedules read from CSV files (input of ``hil simulate``).

File format::

    time,trapscap1,deltscap1,...
    0.0,0.0,0.1,...
    0.05,0.1,0.2,...

* a header row with a ``time`` column (s, finite, strictly increasing) and one column per muscle
  element, named exactly as in the model (``Das3Model.muscle_names``); columns may come in any
  order and muscles without a column get excitation 0;
* the excitations of a row apply from its time until the next row's time (zero-order hold); before
  the first row's time the first row applies, after the last row the last row applies;
* values outside [0, 1] are allowed here (the plant clips and counts them); they are counted in
  :attr:`ExcitationSchedule.n_out_of_range`.

Blank lines are ignored. Cells may have surrounding spaces.
"""
from __future__ import annotations

import codecs
import csv
import difflib
import io
import math
from os import PathLike
from typing import Sequence

import numpy as np

from sim.das3.config import not_utf8
from sim.errors import UserInputError
from sim.input_file import MAX_TABLE_FILE_BYTES, InputFileError, read_input_file
from sim.output_file import output_file

__all__ = ["ExcitationFileError", "ExcitationSchedule", "load_excitation_csv", "write_ramp_csv",
           "TIME_TOLERANCE_S"]

# A row applies from (its time - TIME_TOLERANCE_S), so that step times such as (n + 1) * h that
# land a rounding error short of a row's time still pick that row.
TIME_TOLERANCE_S = 1e-9


class ExcitationFileError(UserInputError, ValueError):
    """An excitation file that cannot be used; the message names the file, line, column and reason."""

    def __init__(self, path: str | PathLike, reason: str, *, line: int | None = None,
                 column: str | None = None):
        self.path = str(path)
        self.line = line
        self.column = column
        self.reason = reason
        where = self.path
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column}"
        super().__init__(f"{where}: {reason}")


class ExcitationSchedule:
    """Muscle excitations as a zero-order-hold function of time.

    Attributes:
        times: (n,) row times, s, strictly increasing.
        values: (n, n_muscles) excitations, float64, read-only.
        n_out_of_range: number of values outside [0, 1].
        source: file the schedule was read from, if any.
    """

    def __init__(self, times, values, *, source: str | None = None):
        times = np.array(times, dtype=np.float64)
        values = np.array(values, dtype=np.float64)
        if times.ndim != 1 or times.size == 0:
            raise ValueError("times must be a non-empty 1-D array")
        if values.ndim != 2 or values.shape[0] != times.size:
            raise ValueError(f"values must have shape ({times.size}, n_muscles), not {values.shape}")
        if not (np.all(np.isfinite(times)) and np.all(np.isfinite(values))):
            raise ValueError("times and values must be finite")
        if np.any(np.diff(times) <= 0.0):
            raise ValueError("times must be strictly increasing")
        times.flags.writeable = False
        values.flags.writeable = False
        self.times = times
        self.values = values
        self.n_out_of_range = int(np.count_nonzero((values < 0.0) | (values > 1.0)))
        self.source = source

    @property
    def n_muscles(self) -> int:
        return self.values.shape[1]

    def index(self, t: float) -> int:
        """Index of the row that applies at time ``t``."""
        if not math.isfinite(t):
            raise ValueError(f"time must be finite, not {t!r}")
        i = int(np.searchsorted(self.times, t + TIME_TOLERANCE_S, side="right")) - 1
        return i if i > 0 else 0

    def at(self, t: float) -> np.ndarray:
        """Excitations at time ``t`` (s): a read-only row view of :attr:`values`, no copy."""
        return self.values[self.index(t)]

    def fill(self, t: float, out: np.ndarray) -> np.ndarray:
        """Write the excitations at time ``t`` into ``out`` (shape (n_muscles,)) and return it."""
        out[:] = self.values[self.index(t)]
        return out


def _closest(name: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if not close:
        lowered = {v.lower(): v for v in valid}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def _open_text(path: str | PathLike) -> io.StringIO:
    """The file's text (UTF-8, an optional BOM dropped) for csv.reader; not UTF-8, not a regular file or too
    large: ExcitationFileError."""
    try:
        data = read_input_file(path, MAX_TABLE_FILE_BYTES).removeprefix(codecs.BOM_UTF8)
    except InputFileError as exc:
        raise ExcitationFileError(path, exc.reason) from None
    try:
        return io.StringIO(data.decode("utf-8"), newline="")
    except UnicodeDecodeError as exc:
        raise ExcitationFileError(path, not_utf8(exc)) from None


def _read_header(reader, path: str | PathLike) -> tuple[list[str], int]:
    """The first non-blank row with its cells stripped, and its line number."""
    for cells in reader:
        if any(c.strip() for c in cells):
            return [c.strip() for c in cells], reader.line_num
    raise ExcitationFileError(path, "empty file: expected a header row with a 'time' column")


def _header_columns(path: str | PathLike, header: list[str], header_line: int, names: tuple[str, ...],
                    column_kind: str) -> tuple[int, list[tuple[int, int]]]:
    """The position of the ``time`` column and (position in the row, muscle index) of every other column."""
    column_of = {name: i for i, name in enumerate(names)}
    time_col = None
    targets = []  # (position in the row, muscle index)
    seen: dict[str, int] = {}
    for pos, name in enumerate(header):
        label = f"{pos + 1}"
        if not name:
            raise ExcitationFileError(path, "empty column name", line=header_line, column=label)
        if name in seen:
            raise ExcitationFileError(
                path, f"duplicate column {name!r} (also column {seen[name] + 1})",
                line=header_line, column=label)
        seen[name] = pos
        if name == "time":
            time_col = pos
        elif name in column_of:
            targets.append((pos, column_of[name]))
        else:
            kind = "muscle" if column_kind == "muscle element" else "column"
            raise ExcitationFileError(
                path, f"unknown {kind} {name!r}{_closest(name, (*names, 'time'))}; columns must be "
                f"'time' or {column_kind} names", line=header_line, column=label)
    if time_col is None:
        raise ExcitationFileError(path, "no 'time' column in the header", line=header_line)
    return time_col, targets


def _row_numbers(path: str | PathLike, cells: list[str], header: list[str], line: int) -> list[float]:
    """The cells of one data row as finite numbers (as many as the header has columns)."""
    if len(cells) != len(header):
        raise ExcitationFileError(
            path, f"expected {len(header)} cells as in the header, found {len(cells)}", line=line)
    numbers = []
    for pos, cell in enumerate(cells):
        where = {"line": line, "column": f"{pos + 1} ({header[pos]!r})"}
        if not cell.strip():
            raise ExcitationFileError(path, "empty cell", **where)
        try:
            value = float(cell)
        except ValueError:
            raise ExcitationFileError(
                path, f"not a number: {cell.strip()!r}", **where) from None
        if not math.isfinite(value):
            raise ExcitationFileError(path, f"not finite: {cell.strip()!r}", **where)
        numbers.append(value)
    return numbers


def _read_rows(reader, path: str | PathLike, header: list[str], time_col: int) -> tuple[list[float], list]:
    """The times and numbers of every data row after the header (blank lines skipped), times increasing."""
    times: list[float] = []
    rows: list[list[float]] = []
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue
        line = reader.line_num
        numbers = _row_numbers(path, cells, header, line)
        t = numbers[time_col]
        if times and t <= times[-1]:
            raise ExcitationFileError(
                path, f"time {t!r} s is not after the previous row's {times[-1]!r} s "
                "(times must be strictly increasing)", line=line, column=f"{time_col + 1} ('time')")
        times.append(t)
        rows.append(numbers)
    return times, rows


def _excitations(rows: list, targets: list[tuple[int, int]], n_muscles: int) -> np.ndarray:
    """The (rows, n_muscles) excitation matrix: each muscle's column where the file has one, else 0."""
    table = np.array(rows, dtype=np.float64)
    values = np.zeros((len(rows), n_muscles), dtype=np.float64)
    if targets:
        positions, muscles = (np.array(v, dtype=np.intp) for v in zip(*targets))
        values[:, muscles] = table[:, positions]
    return values


def load_excitation_csv(path: str | PathLike, muscle_names: Sequence[str], *,
                        column_kind: str = "muscle element") -> ExcitationSchedule:
    """Read an excitation CSV file (format in the module docstring) for a model's muscles.

    The same time-indexed format serves other schedules (e.g. per-channel stimulation): pass their
    column names as ``muscle_names`` and a ``column_kind`` for the error messages.

    Raises:
        ExcitationFileError: not UTF-8 text, empty file, missing or duplicate ``time`` column, unknown or duplicate
            muscle column, empty column name, row of the wrong length, non-numeric, NaN or infinite
            cell, time not strictly increasing, or no data rows.
        OSError: the file cannot be opened.
    """
    names = tuple(muscle_names)
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header, header_line = _read_header(reader, path)
        time_col, targets = _header_columns(path, header, header_line, names, column_kind)
        times, rows = _read_rows(reader, path, header, time_col)
    if not rows:
        raise ExcitationFileError(path, "no data rows after the header")
    return ExcitationSchedule(np.array(times), _excitations(rows, targets, len(names)), source=str(path))


def write_ramp_csv(path: str | PathLike, muscle_names: Sequence[str], duration: float,
                   n_rows: int) -> None:
    """Write an excitation file where every muscle ramps from 0 to 1 over ``duration`` seconds.

    Row k (k = 0 … n_rows-1) is at t_k = k·duration/(n_rows-1) with every excitation t_k/duration;
    with zero-order hold this is a staircase ramp reaching 1 at ``duration``.
    """
    if not (math.isfinite(duration) and duration > 0.0):
        raise ValueError(f"duration must be finite and > 0, not {duration!r}")
    if n_rows < 2:
        raise ValueError(f"n_rows must be >= 2, not {n_rows!r}")
    names = list(muscle_names)
    with output_file(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["time", *names])
        for k in range(n_rows):
            t = duration * k / (n_rows - 1)
            u = k / (n_rows - 1)
            writer.writerow([repr(t), *([repr(u)] * len(names))])
