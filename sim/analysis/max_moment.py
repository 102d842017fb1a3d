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

import math
import time
from dataclasses import dataclass

import numpy as np

from sim.analysis import static_opt as so
from sim.analysis.multistart import (
    MAX_WORKERS,
    LocalOptima,
    SolvePool,
    StartPlan,
    attempt,
    best_of_results,
    girdle_starts,
)
from sim.analysis.passive_limits import MAXIMAL_EFFORT, PassiveLimits
from sim.analysis.solver import MAX_MOMENT_SETTINGS
from sim.das3.model import N_DOF, N_MUS, Das3Model

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
    warm_start: str = "published"  # the start of the kept solve (sim.analysis.multistart)
    optima: LocalOptima | None = None
    z: np.ndarray | None = None    # the optimiser's unknowns at the solution (free angles, alpha, moments)

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
                     q_start: np.ndarray | None = None, settings: so.SolverSettings = MAX_MOMENT_SETTINGS,
                     tolerances: so.Tolerances = so.Tolerances(),
                     limits: PassiveLimits = MAXIMAL_EFFORT,
                     alpha_moments: np.ndarray | None = None) -> MaxMomentPoint:
    """The maximum isometric moment of ``task`` at ``angle_rad`` from one start (``q_start`` or the
    published equilibrium; ``alpha_moments``: the activation fractions and moments to start from, e.g. a
    neighbouring angle's, else 0) within ``limits``; raises so.StaticOptError (with the checked solution)
    when the result fails the checks."""
    t_start = time.perf_counter()
    posture = task_posture(task, angle_rad)
    rest, z, cons = so.rest_problem(model, posture, None, gh_limit, q_start, so.N_MOMENTS, limits)
    if alpha_moments is not None:
        z[rest.layout.n_q:] = alpha_moments
    k = rest.layout.moments.start + task.load
    grad = np.zeros(rest.layout.size)
    grad[k] = task.direction

    def objective(z):
        return float(task.direction * z[k])

    z, iterations = so.optimise(rest, objective, lambda z: grad, z, cons, settings, tolerances, floor=10.0)
    sol = so.finish(rest, z, posture, f"max-moment:{task.load}", -objective(z), gh_limit, iterations,
                    t_start, tolerances)
    return MaxMomentPoint(angle_rad, sol, z=z)


@dataclass(frozen=True)
class SweepSettings:
    """How a sweep looks for the global maximum at each angle: ``plan``'s starts at every angle, then
    continuation passes (down, up, ...) from the neighbours until one raises no moment by more than
    ``improvement`` (relative) or after ``max_passes``. ``workers``: processes solving independent starts at
    once (:mod:`sim.analysis.multistart`; the points do not depend on it)."""

    plan: StartPlan = StartPlan()
    max_passes: int = 3
    improvement: float = 0.01
    gh_limit: float = 0.0
    limits: PassiveLimits = MAXIMAL_EFFORT
    solver: so.SolverSettings = MAX_MOMENT_SETTINGS
    workers: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers must be in 1..{MAX_WORKERS}")


def sweep(model: Das3Model, task: Task, angles_rad, settings: SweepSettings = SweepSettings()) -> list:
    """One MaxMomentPoint (or the failed angle's StaticOptError) per angle, each the best checked optimum
    over its starts (:mod:`sim.analysis.multistart`) and the continuation passes, with every optimum
    found in ``point.optima``. A continuation starts from the neighbour's whole solution (angles, activation
    fractions, moments); one already solved from at that angle is not solved again."""
    with SolvePool(model, settings.workers) as pool:
        run = _SweepRun(model, task, [float(a) for a in angles_rad], settings, pool)
        run.first_pass()
        for n_pass in range(1, settings.max_passes + 1):
            if not run.continuation_pass(1 if n_pass % 2 == 0 else -1):
                break
    return run.points()


class _SweepRun:
    """One sweep's state: per angle the best point so far, the optima found and the starts solved from."""

    def __init__(self, model: Das3Model, task: Task, angles: list, settings: SweepSettings, pool: SolvePool):
        self.model, self.task, self.angles, self.settings, self.pool = model, task, angles, settings, pool
        self.optima = [LocalOptima(lower_is_better=False) for _ in angles]
        self.tried: list[set] = [set() for _ in angles]
        self.best: list = [None] * len(angles)

    def submit(self, i: int, start: tuple, urgent: bool = True) -> int:
        """Queue the solve at angle i from ``start`` = (q or None, alpha_moments or None)."""
        self.tried[i].add(_start_key(*start))
        return self.pool.submit(solve_start, self.task, self.angles[i], *start, self.settings, urgent=urgent)

    def first_pass(self) -> None:
        """Every angle from the plan's starts (all queued at once) and, upwards, the angle below's best."""
        plan, limits = self.settings.plan, self.settings.limits
        queued = [[(label, self.submit(i, (q, None), urgent=False))
                   for label, q in girdle_starts(self.model, plan, i, limits)] for i in range(len(self.angles))]
        for i, starts in enumerate(queued):
            below = _nearest_checked_point(self.best, i, -1)
            if below is not None:
                starts.append(("angle below", self.submit(i, _continuation(below))))
            self.best[i] = _best_of(self.pool, starts, self.optima[i])

    def continuation_pass(self, step: int) -> bool:
        """Each angle from its neighbour's best on the side -step (sweeping in direction ``step``); True if
        a point rose by more than the settings' ``improvement``."""
        n, improved = len(self.angles), False
        label = "angle below" if step == 1 else "angle above"
        for i in (range(1, n) if step == 1 else range(n - 2, -1, -1)):
            neighbour = _nearest_checked_point(self.best, i, -step)
            if neighbour is None or _start_key(*_continuation(neighbour)) in self.tried[i]:
                continue
            candidate = _best_of(self.pool, [(label, self.submit(i, _continuation(neighbour)))], self.optima[i])
            improved |= _gain(self.best[i], candidate) > self.settings.improvement
            self.best[i] = _larger(self.best[i], candidate)
        return improved

    def points(self) -> list:
        for point, found in zip(self.best, self.optima):
            if isinstance(point, MaxMomentPoint):
                point.optima, point.warm_start = found, found.best_label
        return self.best


def solve_start(model: Das3Model, task: Task, angle: float, q: np.ndarray | None, alpha_moments: np.ndarray | None,
                settings: SweepSettings):
    """One start of a sweep (a :class:`sim.analysis.multistart.SolvePool` job): the MaxMomentPoint, or the
    StaticOptError returned."""
    def solve(q_start):
        return solve_max_moment(model, task, angle, settings.gh_limit, q_start, settings.solver,
                                limits=settings.limits, alpha_moments=alpha_moments)

    return attempt(solve, q, so.StaticOptError)


def _best_of(pool: SolvePool, starts: list, optima: LocalOptima):
    """The best checked point over the (label, ticket) ``starts`` (recorded in ``optima``), or the last
    StaticOptError."""
    try:
        return best_of_results(((label, pool.result(t)) for label, t in starts), lambda p: p.moment_nm,
                               optima, so.StaticOptError)
    except so.StaticOptError as exc:
        return exc


def _nearest_checked_point(best: list, i: int, step: int) -> MaxMomentPoint | None:
    """The checked point nearest to angle i on the side ``step`` (-1 below, +1 above), past any failed
    angle; None if there is none."""
    j = i + step
    while 0 <= j < len(best):
        if isinstance(best[j], MaxMomentPoint):
            return best[j]
        j += step
    return None


def _continuation(point: MaxMomentPoint) -> tuple[np.ndarray, np.ndarray]:
    """(joint angles, activation fractions and moments) of a neighbour's solution, as a start."""
    return point.solution.x[:N_DOF], point.z[-(N_MUS + so.N_MOMENTS):]


def _start_key(q: np.ndarray | None, alpha_moments: np.ndarray | None) -> bytes | None:
    """Identifies a start: equal keys, equal solves."""
    if q is None:
        return None
    tail = b"" if alpha_moments is None else np.asarray(alpha_moments, float).tobytes()
    return np.asarray(q, float)[:N_DOF].tobytes() + tail


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
