"""Maximum isometric moments (Chadwick et al. 2014 §II-F, eqs. 10-11, Figs. 4-8).

For each posture find the rest state x and the five external moments M (loads M_th_y, M_th_z, M_hum_y,
M_elbow, M_pronation) with f*(x, 0, 0, M) = 0 that maximise the moment the arm exerts in the task's
direction, with GH stability <= 0, TS and AI not lifted off the thorax and 0 <= a <= 1; the clavicle
and scapula angles are free (panels B and C), the other four moments hold the posture. The moment the
arm exerts on a dynamometer is minus the external moment that balances it, so the task maximises
-direction * M_k for its load k (load k does unit virtual work on its own angle; positive angles are
elevation, internal rotation, elbow flexion and pronation).

Posture conventions from the figure captions; values the captions do not give are this project's
choices and are named as such in :data:`TASKS`.
"""
from __future__ import annotations

import csv
import math
import time
from dataclasses import dataclass
from importlib import resources

import numpy as np

from sim.analysis import static_opt as so
from sim.das3.model import N_DOF, Das3Model

DEG = math.pi / 180.0
NEUTRAL_PRONATION_RAD = 90.0 * DEG
"""Neutral forearm. The captions say "neutral" without a value; 90 deg is where the DAS3 authors put it
(their figure script plots the model against PSy - 90 deg)."""
ARM_AT_SIDE_ELEVATION_RAD = 10.0 * DEG
""""Arm at the side" (Fig. 8): 10 deg, since plane of elevation and axial rotation are undefined at 0."""
SAGITTAL_PLANE_RAD = 90.0 * DEG
"""Plane of elevation of forward flexion. In the YZY convention of the model's outputs (thorax X lateral,
Z posterior) plane 0 elevates the arm laterally (abduction in the coronal plane) and plane 90 deg
forwards (flexion in the sagittal plane); ``tests/sim/test_static_opt.py`` checks this on the hand."""
SCAPULAR_PLANE_RAD = 45.0 * DEG
"""The scapular plane, 45 deg anterior to the coronal plane: the value in the DAS3 authors' script for
Figs. 5-6 (the captions say "scapular plane" without a value)."""
EXTERNALLY_ROTATED_RAD = -SAGITTAL_PLANE_RAD
"""Fig. 4's "arm externally rotated": axial rotation = -plane of elevation, so the humerus keeps the
long-axis rotation of the YZY zero posture (forearm pointing forwards, more external than the resting
posture's plane + axial rotation of about 60 deg), as the DAS3 authors set it."""


@dataclass(frozen=True)
class Task:
    """One panel-A curve: which external moment (load index), the direction of the arm's effort (+1:
    elevation, internal rotation, elbow flexion, pronation), the angle swept and the fixed posture
    (plane of elevation, elevation, axial rotation, elbow, pronation; rad, the swept one ignored)."""

    load: int
    direction: int
    swept: str                      # "elevation", "axial_rotation", "elbow_flexion" or "pronation"
    posture: tuple[float, float, float, float, float]
    default_angles_deg: tuple[float, float, float]   # start, stop (inclusive), step
    figure: str


_SAGITTAL = (SAGITTAL_PLANE_RAD, 0.0, EXTERNALLY_ROTATED_RAD, 60 * DEG, NEUTRAL_PRONATION_RAD)
_SCAPULAR = (SCAPULAR_PLANE_RAD, 0.0, 0.0, 60 * DEG, NEUTRAL_PRONATION_RAD)
_ROTATION = (SCAPULAR_PLANE_RAD, 60 * DEG, 0.0, 60 * DEG, NEUTRAL_PRONATION_RAD)
_ELBOW = (0.0, 90 * DEG, 0.0, 0.0, NEUTRAL_PRONATION_RAD)        # 90 deg abduction in the coronal plane
_FOREARM = (0.0, ARM_AT_SIDE_ELEVATION_RAD, 0.0, 90 * DEG, 0.0)

TASKS = {
    "shoulder-flexion": Task(1, +1, "elevation", _SAGITTAL, (10, 80, 10), "Fig. 4"),
    "shoulder-extension": Task(1, -1, "elevation", _SAGITTAL, (10, 80, 10), "Fig. 4"),
    "abduction": Task(1, +1, "elevation", _SCAPULAR, (10, 90, 10), "Fig. 5"),
    "adduction": Task(1, -1, "elevation", _SCAPULAR, (10, 90, 10), "Fig. 5"),
    "internal-rotation": Task(2, +1, "axial_rotation", _ROTATION, (-90, 0, 15), "Fig. 6"),
    "external-rotation": Task(2, -1, "axial_rotation", _ROTATION, (-90, 0, 15), "Fig. 6"),
    "elbow-flexion": Task(3, +1, "elbow_flexion", _ELBOW, (15, 135, 15), "Fig. 7"),
    "elbow-extension": Task(3, -1, "elbow_flexion", _ELBOW, (15, 135, 15), "Fig. 7"),
    "pronation": Task(4, +1, "pronation", _FOREARM, (15, 150, 15), "Fig. 8"),
    "supination": Task(4, -1, "pronation", _FOREARM, (15, 150, 15), "Fig. 8"),
}
"""The ten tasks of Chadwick Figs. 4-8 with the captions' postures and, by default, the figures' angle
ranges."""

_FIELDS = ("plane_of_elevation", "elevation", "axial_rotation", "elbow_flexion", "pronation")


@dataclass
class MaxMomentPoint:
    angle_rad: float
    solution: so.StaticSolution    # the rest state, the five moments, the checks
    warm_start: str = "cold"       # where the solve started: "cold", "angle below" or "angle above"

    @property
    def moment_nm(self) -> float:
        """The arm's moment in the task direction (>= 0 when it can push)."""
        return self.solution.cost

    @property
    def girdle_rad(self) -> np.ndarray:
        """(6,) SCy, SCz, SCx, ACy, ACz, ACx."""
        return self.solution.x[:6]


def task_posture(task: Task, angle_rad: float) -> so.Posture:
    values = dict(zip(_FIELDS, task.posture))
    values[task.swept] = angle_rad
    return so.Posture(**values)


def solve_max_moment(model: Das3Model, task: Task, angle_rad: float, gh_limit: float = 0.0,
                     q_start: np.ndarray | None = None, settings: so.SolverSettings = so.SolverSettings(),
                     tolerances: so.Tolerances = so.Tolerances()) -> MaxMomentPoint:
    """The maximum isometric moment of ``task`` at ``angle_rad``; raises so.StaticOptError (with the
    checked solution) when the result fails the checks."""
    t_start = time.perf_counter()
    posture = task_posture(task, angle_rad)
    rest, z, cons = so.rest_problem(model, posture, None, gh_limit, q_start, so.N_MOMENTS)
    k = rest.layout.moments.start + task.load
    grad = np.zeros(rest.layout.size)
    grad[k] = task.direction

    def objective(z):
        return float(task.direction * z[k])

    z, iterations = so.optimise(rest, objective, lambda z: grad, z, cons, settings, tolerances, floor=10.0)
    sol = so.finish(rest, z, posture, f"max-moment:{task.load}", -objective(z), gh_limit, iterations,
                    t_start, tolerances)
    return MaxMomentPoint(angle_rad, sol)


def sweep(model: Das3Model, task: Task, angles_rad, gh_limit: float = 0.0, settings=so.SolverSettings(),
          max_passes: int = 4):
    """One MaxMomentPoint (or the failed angle's StaticOptError) per angle. Each solve is a local maximum
    of a nonconvex problem (free girdle, thorax contact, joint ranges), and a chain of warm starts can stay
    on a lower branch. So the angles are swept upwards (the first cold), then alternately downwards and
    upwards, each solve warm-started from the best checked posture found so far at the nearest angle on the
    side it comes from;
    each angle keeps its largest checked moment. Passes stop when one raises no moment by more than
    IMPROVEMENT (relative), or after ``max_passes``."""
    angles = [float(a) for a in angles_rad]
    best: list = [None] * len(angles)
    for n_pass in range(max_passes):
        upwards = n_pass % 2 == 0
        if n_pass == 0:
            order = range(len(angles))
        else:
            order = range(1, len(angles)) if upwards else range(len(angles) - 2, -1, -1)
        improved = False
        for i in order:
            q_start = _nearest_checked_posture(best, i, -1 if upwards else 1)
            if n_pass > 0 and q_start is None:
                continue
            label = "cold" if q_start is None else ("angle below" if upwards else "angle above")
            candidate = _solve_or_error(model, task, angles[i], gh_limit, q_start, settings, label)
            improved |= _gain(best[i], candidate) > IMPROVEMENT
            best[i] = _larger(best[i], candidate)
        if n_pass > 0 and not improved:
            break
    return best


IMPROVEMENT = 0.01


def _solve_or_error(model, task, angle, gh_limit, q_start, settings, label):
    try:
        point = solve_max_moment(model, task, angle, gh_limit, q_start, settings)
    except so.StaticOptError as exc:
        return exc
    point.warm_start = label
    return point


def _nearest_checked_posture(best: list, i: int, step: int) -> np.ndarray | None:
    """The joint angles of the checked point nearest to angle i on the side ``step`` (-1 below, +1
    above), past any failed angle; None if there is none."""
    j = i + step
    while 0 <= j < len(best):
        if isinstance(best[j], MaxMomentPoint):
            return best[j].solution.x[:N_DOF]
        j += step
    return None


def _gain(old, new) -> float:
    """Relative rise of the checked moment (inf when ``new`` is the first checked point)."""
    if not isinstance(new, MaxMomentPoint):
        return 0.0
    if not isinstance(old, MaxMomentPoint):
        return math.inf
    return (new.moment_nm - old.moment_nm) / max(abs(old.moment_nm), 1.0)


def _larger(old, new):
    """The checked point with the larger moment (a failure only when neither passed)."""
    return new if old is None or _gain(old, new) > 0.0 else old


LITERATURE_SOURCES = {
    "Garner2001": "Garner & Pandy 2001 [15]",
    "Otis1990": "Otis et al. 1990 [16]",
    "Engin1980": "Engin & Kaleps 1980 [17]",
    "Winters1993": "Winters & Kleweno 1993 [18]",
    "Amis1980": "Amis et al. 1980 [19]",
    "Buchanan1998": "Buchanan et al. 1998 [20]",
}
"""Citation labels (reference numbers of Chadwick et al. 2014) of ``sim/data/isometric_moments_literature.csv``."""


@dataclass(frozen=True)
class LiteratureCurve:
    """Published maximum moments for one task from one source (as plotted in Chadwick Figs. 4-8);
    ``below_nm``/``above_nm`` the published spread, NaN where the source gives none."""

    source: str                 # a LITERATURE_SOURCES key, with ":k" for one of several series
    angle_rad: np.ndarray
    moment_nm: np.ndarray
    below_nm: np.ndarray
    above_nm: np.ndarray

    @property
    def label(self) -> str:
        key, _, series = self.source.partition(":")
        return LITERATURE_SOURCES[key] + (f" series {series}" if series else "")


def literature_curves(task_name: str) -> list[LiteratureCurve]:
    """The published curves for ``task_name`` (a TASKS key), in file order."""
    if task_name not in TASKS:
        raise KeyError(task_name)
    text = resources.files("sim.data").joinpath("isometric_moments_literature.csv").read_text(encoding="utf-8")
    rows: dict[str, list] = {}
    for row in csv.DictReader(text.splitlines()):
        if row["task"] == task_name:
            rows.setdefault(row["source"], []).append(row)

    def column(points, name):
        return np.array([float(p[name]) if p[name] else math.nan for p in points])

    return [LiteratureCurve(source, np.radians(column(points, "angle_deg")), column(points, "moment_Nm"),
                            column(points, "below_Nm"), column(points, "above_Nm"))
            for source, points in rows.items()]
