"""Fitting the reduced arm's MTGs to a recorded motion (Millard et al. 2019, Sect. 2.2-2.3, via
:func:`sim.fitting.mtg_fit.fit_joint` per coordinate): the motion file, its derivatives, the joint torques by inverse
dynamics of the reduced arm, and the fitted parameter set.

Motion file: CSV with a ``time`` column (s) and the angles in the columns of ``hil simulate`` output (rad):
``th_plane_of_elevation``, ``th_elevation``, ``th_axial_rotation``, ``ELx``, ``PSy``; or an OpenSim .mot/.sto
with those columns or the 11 DAS3 coordinates (``SC_y`` ... ``PS_y``, e.g. from OpenSim's inverse kinematics or
``hil export --mot``), from which the thoracohumeral angles follow by the model's kinematics. Either the five joint
torques (``tau_<coordinate>``, N m, the MTG torques per coordinate: about the YZY axes for the shoulder) or, if
absent, inverse dynamics of the reduced arm under the external loads given in columns named as
``sim.das3.model.LOAD_NAMES`` (e.g. ``hand_force_y`` in N, thorax frame; absent columns are zero). Velocities and accelerations are second-order finite differences of the angles (``numpy.gradient``),
as the paper's central differences; smooth the angles first if they are measured.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.das3.model import LOAD_NAMES
from sim.errors import UserInputError
from sim.fitting.mtg_fit import JointFit, fit_joint
from sim.input_file import InputFileError, read_input_file
from sim.motion.data import MAX_FILE_BYTES, MotionFileError
from sim.motion.files import read_motion
from sim.motion.reference import coordinate_column, thoracohumeral_angles
from sim.mtg.model import COORDINATES, MtgModel, MtgParameters, MtgSpec

ANGLE_COLUMNS = ("th_plane_of_elevation", "th_elevation", "th_axial_rotation", "ELx", "PSy")
TORQUE_COLUMNS = tuple(f"tau_{c}" for c in COORDINATES)
MIN_SAMPLES = 5


class MotionError(UserInputError, ValueError):
    """A motion file that cannot be fitted; the message names the file and the reason."""


@dataclass(frozen=True)
class Motion:
    time: np.ndarray       # (n,) s
    q: np.ndarray          # (n, 5) rad
    qd: np.ndarray         # (n, 5) rad/s
    qdd: np.ndarray        # (n, 5) rad/s^2
    torque: np.ndarray     # (n, 5) N m per coordinate
    torque_source: str     # "file" or "inverse dynamics"


def _read_columns(path: Path) -> dict[str, np.ndarray]:
    """The columns of a CSV motion file (a regular file of at most :data:`sim.motion.data.MAX_FILE_BYTES`)."""
    try:
        text = read_input_file(path, MAX_FILE_BYTES).decode("utf-8")
    except InputFileError as exc:
        raise MotionError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MotionError(f"{path}: cannot read: {exc}") from None
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if len(rows) < 2:
        raise MotionError(f"{path}: needs a header row and at least {MIN_SAMPLES} data rows")
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    if any(len(r) != len(header) for r in body):
        raise MotionError(f"{path}: every row needs {len(header)} values")
    try:
        data = np.array(body, dtype=np.float64).reshape(len(body), len(header))
    except ValueError:
        raise MotionError(f"{path}: a value is not a number") from None
    return {h: data[:, i] for i, h in enumerate(header)}


MOTION_SUFFIXES = (".mot", ".sto", ".trc", ".c3d")


def _motion_columns(path: Path, model: MtgModel) -> dict[str, np.ndarray]:
    """The columns of an OpenSim .mot/.sto (SI, rad): the reduced arm's angles as written, or computed from the 11
    DAS3 coordinates (thoracohumeral YZY angles of the humerus by the model's kinematics, ELx, PSy). Marker files
    are refused: only the elbow has a marker inverse kinematics here (``sim.motion.reference``)."""
    try:
        motion = read_motion(path)
    except MotionFileError as exc:
        raise MotionError(str(exc)) from None
    if motion.markers:
        raise MotionError(f"{path}: markers give only the elbow angle here; the fit needs all five coordinates "
                          "(thoracohumeral YZY, ELx, PSy): run OpenSim's inverse kinematics with the DAS3 model and "
                          "give its .mot")
    cols = {"time": motion.time, **{n: motion.values[:, j] for j, n in enumerate(motion.names)}}
    if all(c in cols for c in ANGLE_COLUMNS):
        return cols
    try:
        names = [coordinate_column(motion, d) for d in model.das3.dof_names]
    except MotionFileError as exc:
        raise MotionError(f"{exc} (or the columns {', '.join(ANGLE_COLUMNS)})") from None
    q = np.column_stack([cols[n] for n in names])
    th = thoracohumeral_angles(model.das3.arrays, q)
    elbow, pronation = model.das3.dof_names.index("ELx"), model.das3.dof_names.index("PSy")
    return {**cols, **dict(zip(ANGLE_COLUMNS, (*th.T, q[:, elbow], q[:, pronation])))}


def derivatives(time: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(qd, qdd) by second-order finite differences (central inside, one-sided at the ends)."""
    qd = np.gradient(q, time, axis=0, edge_order=2)
    return qd, np.gradient(qd, time, axis=0, edge_order=2)


def _loads(cols: dict, n: int, path: Path) -> np.ndarray:
    """(n, 10) external loads from the columns named as ``LOAD_NAMES`` (absent: zero)."""
    loads = np.zeros((n, len(LOAD_NAMES)))
    for k, name in enumerate(LOAD_NAMES):
        if name in cols:
            loads[:, k] = cols[name]
    if not np.all(np.isfinite(loads)) or np.any(loads[:, LOAD_NAMES.index("armsupport_distance")] < 0.0):
        raise MotionError(f"{path}: loads must be finite (and the arm-support distance >= 0)")
    return loads


def load_motion(path: str | Path, model: MtgModel) -> Motion:
    """The motion at ``path`` with its torques (from the file, or by the reduced arm's inverse dynamics under
    the file's loads)."""
    path = Path(path)
    cols = _motion_columns(path, model) if path.suffix.lower() in MOTION_SUFFIXES else _read_columns(path)
    missing = [c for c in ("time", *ANGLE_COLUMNS) if c not in cols]
    if missing:
        raise MotionError(f"{path}: missing column(s) {', '.join(missing)} (angles in rad, as `hil simulate` "
                          "writes them)")
    time = cols["time"]
    q = np.column_stack([cols[c] for c in ANGLE_COLUMNS])
    if time.size < MIN_SAMPLES:
        raise MotionError(f"{path}: needs at least {MIN_SAMPLES} samples, got {time.size}")
    if not (np.all(np.isfinite(time)) and np.all(np.isfinite(q))):
        raise MotionError(f"{path}: time and angles must be finite")
    if not np.all(np.diff(time) > 0.0):
        raise MotionError(f"{path}: time must increase strictly")
    if np.any(np.sin(q[:, 1]) < 1e-3):
        raise MotionError(f"{path}: thoracohumeral elevation reaches 0 or 180 deg, where plane and axial rotation "
                          "are undefined")
    qd, qdd = derivatives(time, q)
    if all(c in cols for c in TORQUE_COLUMNS):
        torque = np.column_stack([cols[c] for c in TORQUE_COLUMNS])
        if not np.all(np.isfinite(torque)):
            raise MotionError(f"{path}: torques must be finite")
        return Motion(time, q, qd, qdd, torque, "file")
    return Motion(time, q, qd, qdd, model.inverse_dynamics(q, qd, qdd, _loads(cols, time.size, path)),
                  "inverse dynamics")


def weakened(params: MtgParameters, factor: float) -> MtgParameters:
    """Every MTG's tau_o^M times ``factor`` (the paper's pre-weakening, Sect. 3: "to 80% of the peak moment")."""
    if not (math.isfinite(factor) and 0.0 < factor <= 1.0):
        raise ValueError("the weakening factor must lie in (0, 1]")
    specs = tuple(dataclasses.replace(s, curves=dataclasses.replace(s.curves, tau_max=s.curves.tau_max * factor))
                  for s in params.mtgs)
    return MtgParameters(specs, params.description)


@dataclass(frozen=True)
class ArmFit:
    """Per coordinate, the pair's :class:`sim.fitting.mtg_fit.JointFit` (MTGs in parameter-file order)."""

    start: MtgParameters
    joints: dict            # coordinate name -> (JointFit, (index of MTG 1, index of MTG 2))

    @property
    def feasible(self) -> bool:
        return all(fit.feasible for fit, _ in self.joints.values())

    def fitted(self, description: str = "") -> MtgParameters:
        """The start set with every MTG's fitting parameters replaced by the fitted ones."""
        specs: list[MtgSpec] = list(self.start.mtgs)
        for fit, idx in self.joints.values():
            for mtg_fit, i in zip(fit.mtgs, idx):
                specs[i] = dataclasses.replace(specs[i], fit=mtg_fit.fitted)
        return MtgParameters(tuple(specs), description or self.start.description)


def fit_arm(params: MtgParameters, motion: Motion, a_max: float, t_max_pe: float, **options) -> ArmFit:
    """The paper's program for every MTG, one coordinate pair at a time; ``options`` go to ``fit_mtg``."""
    joints = {}
    for c, coord in enumerate(COORDINATES):
        idx = tuple(i for i, s in enumerate(params.mtgs) if s.coordinate == c)
        pair = [params.mtgs[i] for i in idx]
        fit = fit_joint([s.curves for s in pair], motion.q[:, c], motion.qd[:, c], motion.torque[:, c], a_max,
                        t_max_pe, starts=[s.fit for s in pair], directions=[s.direction for s in pair], **options)
        joints[coord] = (fit, idx)
    return ArmFit(params, joints)


def joint_fit_summary(fit: JointFit, names) -> list[dict]:
    """Per MTG: feasibility before/after, activation ranges, active constraints and the fitted parameters."""
    out = []
    for m, name in zip(fit.mtgs, names):
        out.append({
            "mtg": name, "direction": m.direction,
            "feasible_before": m.check_before.feasible, "feasible_after": m.check_after.feasible,
            "activation_before": [float(m.activation_before.min()), float(m.activation_before.max())],
            "activation_after": [float(m.activation_after.min()), float(m.activation_after.max())],
            "worst_before": {"sample": m.check_before.worst_sample, "kind": m.check_before.worst_kind,
                             "violation": m.check_before.worst_violation},
            "worst_after": {"sample": m.check_after.worst_sample, "kind": m.check_after.worst_kind,
                            "violation": m.check_after.worst_violation},
            "t_pe_max_after": m.check_after.t_pe_max,
            "active_constraints": {k: (len(v) if k != "bounds" else list(v)) for k, v in m.active.items()},
            "fitted": {"s_a": m.fitted.s_a, "s_v": m.fitted.s_v, "delta_p_deg": math.degrees(m.fitted.delta_p),
                       "lambda_p": m.fitted.lambda_p, "s_tau": m.fitted.s_tau},
            "objective": m.objective, "solver": m.solver_message, "iterations": m.iterations})
    return out
