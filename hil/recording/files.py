"""File formats of the command line: state files and the simulation output CSV."""
from __future__ import annotations

import codecs
import csv
import io
import json
import math
from os import PathLike
from typing import Sequence

import numpy as np

from sim.das3.config import not_utf8
from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file
from sim.output_file import output_file

__all__ = ["StateFileError", "load_model_state", "load_state_file", "write_state_json", "output_columns", "OutputRecorder"]


class StateFileError(UserInputError, ValueError):
    """A state file (``--initial``) that cannot be used; the message names the file and the reason."""

    def __init__(self, path: str | PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


def _as_state(path, values, n_states: int) -> np.ndarray:
    if len(values) != n_states:
        raise StateFileError(path, f"expected {n_states} state values, found {len(values)}")
    x = np.empty(n_states, dtype=np.float64)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise StateFileError(path, f"state value {i} is not a number: {v!r}")
        if not math.isfinite(v):
            raise StateFileError(path, f"state value {i} is not finite: {v!r}")
        x[i] = v
    return x


def _parse_float(cell: str):
    try:
        return float(cell)
    except ValueError:
        return cell


def _read_text(path: str | PathLike) -> str:
    """The file's text (UTF-8, an optional BOM dropped); not UTF-8, not a regular file or too large:
    StateFileError."""
    try:
        data = read_input_file(path).removeprefix(codecs.BOM_UTF8)
    except InputFileError as exc:
        raise StateFileError(path, exc.reason) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateFileError(path, not_utf8(exc)) from None


def load_state_file(path: str | PathLike, n_states: int) -> np.ndarray:
    """Read a full model state (``n_states`` values, state order) from a JSON or CSV file.

    JSON (``.json``): an object with key ``"x"`` holding the list of values (the format of
    ``sim/data/das3_equilibrium.json`` and of ``hil model equilibrium --out``), or a bare list.
    Anything else: a CSV file with one row of values, optionally preceded by one header row.

    Raises:
        StateFileError: not UTF-8 text, malformed file, wrong number of values, non-numeric or
            non-finite value.
        OSError: the file cannot be read.
    """
    if str(path).lower().endswith(".json"):
        try:
            doc = json.loads(_read_text(path))
        except json.JSONDecodeError as exc:
            raise StateFileError(path, f"invalid JSON: {exc}") from None
        if isinstance(doc, dict):
            if "x" not in doc:
                raise StateFileError(path, "JSON object has no key 'x' holding the state values")
            doc = doc["x"]
        if not isinstance(doc, list):
            raise StateFileError(path, "expected a JSON list of state values (or an object with 'x')")
        return _as_state(path, doc, n_states)

    rows = [row for row in csv.reader(io.StringIO(_read_text(path), newline="")) if any(c.strip() for c in row)]
    if not rows:
        raise StateFileError(path, "empty file: expected one CSV row of state values")
    parsed = [[_parse_float(c) for c in row] for row in rows]
    if len(parsed) == 2 and any(isinstance(v, str) for v in parsed[0]):
        parsed = parsed[1:]  # header row
    if len(parsed) != 1:
        raise StateFileError(path, f"expected one row of state values (plus an optional header), "
                                   f"found {len(parsed)} rows")
    return _as_state(path, parsed[0], n_states)


def load_model_state(path: str | PathLike, model) -> np.ndarray:
    """:func:`load_state_file` for ``model`` (a plant's model): its number of values, and values the model can take
    (``model.state_problem``: angles, fibre lengths, activations in their ranges), else :class:`StateFileError`."""
    x = load_state_file(path, model.n_states)
    problem = model.state_problem(x)
    if problem is not None:
        raise StateFileError(path, f"not a state of the {model.kind.upper()} model: {problem}")
    return x


def write_state_json(path: str | PathLike, x: np.ndarray, description: str) -> None:
    """Write a state in the JSON format read by :func:`load_state_file` (exact float round trip)."""
    doc = {"description": description, "x": [float(v) for v in x]}
    with output_file(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


def output_columns(dof_names: Sequence[str]) -> tuple[str, ...]:
    """Column names of ``hil simulate`` output (units and frames are documented in README.md)."""
    return ("time", *dof_names, "gh_stability",
            "th_plane_of_elevation", "th_elevation", "th_axial_rotation",
            "hand_x", "hand_y", "hand_z",
            "gh_force_x", "gh_force_y", "gh_force_z",
            "ts_contact_force_x", "ts_contact_force_y", "ts_contact_force_z",
            "ai_contact_force_x", "ai_contact_force_y", "ai_contact_force_z",
            *(f"{name}_velocity" for name in dof_names))


class OutputRecorder:
    """Rows of plant outputs in a preallocated array, saved as CSV at the end (repr-exact floats)."""

    def __init__(self, dof_names: Sequence[str], n_rows: int):
        n_dof = len(dof_names)
        self.columns = output_columns(dof_names)
        self.data = np.full((n_rows, len(self.columns)), np.nan, dtype=np.float64)
        self.n_rows = 0
        self._q = slice(1, 1 + n_dof)
        i = 1 + n_dof
        self._stability = i
        self._th = slice(i + 1, i + 4)
        self._hand = slice(i + 4, i + 7)
        self._gh = slice(i + 7, i + 10)
        self._contact = slice(i + 10, i + 16)
        self._qdot = slice(i + 16, i + 16 + n_dof)

    def record(self, t: float, outputs) -> None:
        """Append one row from the plant's ``outputs`` at time ``t``."""
        row = self.data[self.n_rows]
        row[0] = t
        row[self._q] = outputs.q
        row[self._stability] = outputs.gh_stability
        row[self._th] = outputs.th_angles
        row[self._hand] = outputs.hand_position
        row[self._gh] = outputs.gh_force
        row[self._contact] = np.ravel(outputs.st_contact_force)
        row[self._qdot] = outputs.qdot
        self.n_rows += 1

    def save(self, path: str | PathLike) -> None:
        """Write the recorded rows (only those) with a header row."""
        with output_file(path, "w", encoding="utf-8") as fh:
            np.savetxt(fh, self.data[: self.n_rows], fmt="%.17g", delimiter=",",
                       header=",".join(self.columns), comments="")
