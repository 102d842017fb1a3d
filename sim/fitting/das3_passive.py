"""Passive holding moments of the full DAS3 arm: the data from which the default curves of the reduced
muscle-torque-generator (MTG) arm (:mod:`sim.mtg.curves`, Millard et al. 2019) are derived, and two maximum
isometric moment tasks of the plane of elevation.

**Holding problem.** With every activation zero (a = u = 0: passive muscles only) the arm rests at a posture
(thoracohumeral YZY angles, elbow flexion, pronation; :class:`sim.analysis.static_opt.Posture`) when the five external
moments M of Chadwick et al. 2014 eq. 10 (``sim.das3.model.LOAD_NAMES[0:5]``) balance gravity, the passive muscle
forces and the passive joint moments. The clavicle and scapula settle where their own equations of motion hold
(conoid, thorax contact, passive muscles), so the unknowns of :func:`sim.analysis.static_opt.rest_problem` with the
138 alphas fixed at 0 (F = Fp, removed from the solver's variables) are

    y = [girdle (6) | GH (3) | M (5)]:   f_eom(q, Fp(q), M) = 0 (11),  thoracohumeral angles = target (3),

14 equations in 14 unknowns, so the rest state is locally unique; min sum M^2 (N m)^2 only steers SLSQP.
Inequality: TS and AI not lifted off the thorax (the rest problem's, Chadwick §II-F). Unlike the rest problem,
the DOFs may leave their ranges by :data:`JOINT_STOP_MARGIN_RAD` (the plant's joint stops are soft and the
passive girdle rests on them), and the path-validity constraint is left out: in a square system an inequality
can only reject the one solution, and a girdle muscle whose path polynomial runs shorter than its tendon is
slack in the plant (:func:`short_paths`, reported as a warning). GH stability is not constrained (with no
active muscle there is no recruitment to choose).

**Checks.** The state, with a = 0 exactly, is re-evaluated with the plant's own residual at u = 0 and the given
moments (:func:`sim.analysis.static_opt.check_state`: equations of motion, contraction, posture, thorax contact), and
every fibre must be at least ``REST_FIBRE_MIN`` (the plant refuses to step below half of it); a failed check
raises :class:`HoldingError`.

**Generalised forces of the MTG arm.** M_th_y acts about the thorax Y axis e_y, M_th_z about the floating Z
axis z' (e_y x y_h normalised) and M_hum_y about the humeral Y axis y_h (:func:`sim.das3.kernels.multibody.
_thoracohumeral_torque`); the YZY angular velocity is w = d(plane) e_y + d(elevation) z' + d(axial) y_h with
z' normal to e_y and y_h but e_y . y_h = cos(elevation). The virtual work M . w then gives

    Q_plane = M_th_y + cos(e) M_hum_y,   Q_elevation = M_th_z,   Q_axial = cos(e) M_th_y + M_hum_y,

Q_elbow = M_elbow, Q_pronation = M_pronation (:func:`generalized_forces`): each moment does unit virtual work
on its own angle, but the two Y moments also work on each other's angle except at 90 deg elevation.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.analysis import max_moment as mm
from sim.analysis import static_opt as so
from sim.analysis.passive_limits import UNLIMITED
from sim.analysis.rest_model import REST_FIBRE_MIN
from sim.analysis.solver import run_slsqp, satisfied
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IS, evaluate, new_plant_work
from sim.das3.model import DOF_NAMES, LOAD_NAMES, N_LOADS, N_STATES, Das3Model
from sim.output_file import output_file

DEG = math.pi / 180.0
COORDINATES = ("plane_of_elevation", "elevation", "axial_rotation", "elbow_flexion", "pronation")
"""The MTG arm's generalised coordinates, in the order of ``LOAD_NAMES[0:5]`` (the Posture fields)."""
MOMENT_NAMES = LOAD_NAMES[:so.N_MOMENTS]
HELD_DOF = {"elbow_flexion": so.ELBOW, "pronation": so.PRONATION}
"""The coordinates that are model DOFs (ELx, PSy): their sweeps are clipped to the DOF ranges."""

SWEEPS_DEG = {
    "plane_of_elevation": (-30.0, 120.0, 10.0),
    "elevation": (10.0, 150.0, 10.0),
    "axial_rotation": (-90.0, 60.0, 10.0),
    "elbow_flexion": (5.0, 140.0, 15.0),
    "pronation": (10.0, 160.0, 10.0),
}
"""Start, stop (inclusive), step of each passive sweep, deg."""
PLANE_SWEEP_ELEVATION_RAD = 60.0 * DEG
"""Elevation of the plane-of-elevation sweep: near 0 elevation the YZY plane and axial rotation turn about
nearly the same axis (the decomposition is singular at 0), so the base posture's low elevation would leave
the plane almost undefined."""
JOINT_STOP_MARGIN_RAD = 20.0 * DEG
"""How far the free DOFs may leave their ranges. The plant's joint stops are soft (spec "Passive joint moments":
K2 (q - q_hi)^2 beyond the range), and the passive girdle rests on them (the published equilibrium is outside
the ACz and ACx ranges), so static_opt's bounds at the range ends would leave no passive rest state at most
postures; 0 restores them. The excursion is reported (``Checks.joint_outside_rad``)."""
DEFAULT_SETTINGS = so.SolverSettings(max_iterations=200, restarts=1)
"""A converging holding solve takes a few tens of SLSQP iterations (a square system from a near start); a
posture without a rest state near the start would otherwise spend static_opt's 3 x 500."""
MOMENT_FLOOR_NM2 = 100.0
"""Scale of the objective sum M^2 when the start value is smaller (a start at M = 0)."""


def base_posture(model: Das3Model) -> so.Posture:
    """Thoracohumeral angles, elbow and pronation of the model's published passive equilibrium
    (``model.equilibrium_state``, through the plant outputs): the posture the arm rests at with no load, the
    zero of every holding moment, from which each coordinate is swept. A function, not a number, because the
    equilibrium belongs to the model variant (``sim.das3.model.load_model`` re-solves it for some options)."""
    x = np.array(model.equilibrium_state)
    W = new_plant_work(model.arrays)
    evaluate(model.arrays, x, np.zeros(N_STATES), x[IA:], np.zeros(N_LOADS), W)
    compute_outputs(model.arrays, W)
    plane, elevation, axial = (float(v) for v in W.out.th_angles)
    return so.Posture(plane, elevation, axial, float(x[IQ + so.ELBOW]), float(x[IQ + so.PRONATION]))


def sweep_base(model: Das3Model, coordinate: str) -> so.Posture:
    """The posture a coordinate is swept from: :func:`base_posture`, at ``PLANE_SWEEP_ELEVATION_RAD`` for the
    plane of elevation."""
    base = base_posture(model)
    if coordinate == "plane_of_elevation":
        base = dataclasses.replace(base, elevation=PLANE_SWEEP_ELEVATION_RAD)
    return base


def sweep_angles(model: Das3Model, coordinate: str) -> np.ndarray:
    """The angles (rad) of ``SWEEPS_DEG[coordinate]``, clipped to the DOF range for elbow and pronation."""
    start, stop, step = SWEEPS_DEG[coordinate]
    angles = np.radians(start + step * np.arange(int(math.floor((stop - start) / step + 1e-9)) + 1))
    if coordinate in HELD_DOF:
        lo, hi = np.asarray(model.dof_ranges)[HELD_DOF[coordinate]]
        angles = np.unique(np.clip(angles, lo, hi))
    return angles


def generalized_forces(moments, elevation: float) -> np.ndarray:
    """(5,) generalised forces on plane, elevation, axial rotation, elbow, pronation (N m) of the five external
    moments (``MOMENT_NAMES`` order) at thoracohumeral ``elevation`` (rad): the virtual work of the module
    docstring."""
    m = np.asarray(moments, float)
    c = math.cos(elevation)
    return np.array([m[0] + c * m[2], m[1], c * m[0] + m[2], m[3], m[4]])


@dataclass
class Holding:
    """The passive rest state at a posture and the external moments that hold it."""

    posture: so.Posture
    x: np.ndarray                # (298,) [q | 0 | s | a = 0]
    moments: np.ndarray          # (5,) N m, MOMENT_NAMES order
    th_angles: np.ndarray        # (3,) rad
    gh_stability: float
    passive_activation_max: float  # largest |a| of the rest state before it is set to 0 (round-off)
    short_paths_mm: dict[str, float]   # :func:`short_paths`: the path-validity warnings
    active: list[str]            # inequality constraints and DOF range ends at their limit
    iterations: int
    time_s: float
    checks: so.Checks

    @property
    def girdle_rad(self) -> np.ndarray:
        """(6,) SCy, SCz, SCx, ACy, ACz, ACx."""
        return self.x[:6]

    @property
    def generalized_forces(self) -> np.ndarray:
        return generalized_forces(self.moments, float(self.th_angles[1]))


class HoldingError(so.StaticOptError):
    """No passive rest state at the posture passes the checks; ``solution``: the best :class:`Holding` found
    (None if the posture could not be set up)."""


def holding_moments(model: Das3Model, posture: so.Posture, q_start: np.ndarray | None = None,
                    moments_start: np.ndarray | None = None, settings: so.SolverSettings | None = None,
                    tolerances: so.Tolerances = so.Tolerances(),
                    joint_margin_rad: float = JOINT_STOP_MARGIN_RAD) -> Holding:
    """The passive rest state at ``posture`` (girdle free) and the five external moments that hold it (module
    docstring). ``q_start``/``moments_start``: the 11 angles and 5 moments to start from (e.g. a neighbouring
    posture's); ``settings`` None: :data:`DEFAULT_SETTINGS`; ``joint_margin_rad``: see
    :data:`JOINT_STOP_MARGIN_RAD`. Raises :class:`HoldingError` when the result fails the checks."""
    if posture.girdle is not None:
        raise ValueError("holding_moments needs the girdle free (posture.girdle None)")
    settings = settings or DEFAULT_SETTINGS
    t_start = time.perf_counter()
    rest, z0, _ = so.rest_problem(model, posture, None, None, q_start, so.N_MOMENTS, UNLIMITED)
    L = rest.layout
    if moments_start is not None:
        z0[L.moments] = np.asarray(moments_start, float)
    keep = np.r_[0:L.n_q, L.moments]

    def full(y):
        z = z0.copy()
        z[keep] = y
        return z

    n = L.size
    contact = {"type": "ineq", "fun": lambda z: -rest.at(z[:n]).contact_e,
               "jac": lambda z: -rest.output_jacobians(z[:n]).contact_e}
    reduced = [{"type": c["type"], "fun": (lambda y, c=c: c["fun"](full(y))),
                "jac": (lambda y, c=c: c["jac"](full(y))[:, keep])} for c in (so.equalities(rest, posture), contact)]
    m = slice(L.n_q, L.n_q + L.n_moments)

    def fun(y):
        return float(y[m] @ y[m])

    def jac(y):
        g = np.zeros_like(y)
        g[m] = 2 * y[m]
        return g

    ranges, q0 = np.asarray(model.dof_ranges), rest.q_template
    bounds = [(min(ranges[j, 0] - joint_margin_rad, q0[j]), max(ranges[j, 1] + joint_margin_rad, q0[j]))
              for j in L.free_dofs] + [(None, None)] * L.n_moments
    y, iterations = z0[keep], 0
    for _ in range(1 + settings.restarts):
        y, its = run_slsqp(fun, jac, y, reduced, bounds, settings, MOMENT_FLOOR_NM2)
        iterations += its
        if satisfied(y, reduced, tolerances):
            break
    return _finish(rest, full(y), posture, iterations, t_start, tolerances)


PATH_FAILURE = "muscle path "
"""Start of :func:`sim.analysis.static_opt.check_state`'s path-validity failure, which is reported here as a warning."""


def _finish(rest: so.RestModel, z, posture, iterations, t_start, tol) -> Holding:
    """The rest state at z with a = 0 exactly, checked with the plant's residual at u = 0 (module docstring)."""
    model, r = rest.model, rest.at(z)
    x = r.x.copy()
    a_max = float(np.max(np.abs(x[IA:])))
    x[IA:] = 0.0
    loads = rest.loads_of(z)
    checks = so.check_state(model, x, posture, loads, None, tol)
    checks.failures = [f for f in checks.failures if not f.startswith(PATH_FAILURE)]
    s = x[IS:IA]
    extra = [(a_max <= tol.constraint, f"rest state needs activation {a_max:.3g}"),
             (s.min() >= REST_FIBRE_MIN, f"fibre of {model.muscle_names[int(np.argmin(s))]} at s = {s.min():.3g}, "
                                           f"below {REST_FIBRE_MIN} (the plant's collapse limit x 2)")]
    checks.failures += [msg for ok, msg in extra if not ok]
    checks.passed = not checks.failures
    hold = Holding(posture=posture, x=x, moments=loads[:so.N_MOMENTS].copy(), th_angles=r.th.copy(),
                   gh_stability=r.stability, passive_activation_max=a_max,
                   short_paths_mm=short_paths(model, x), active=so._active_constraints(rest, z, None),
                   iterations=iterations, time_s=time.perf_counter() - t_start, checks=checks)
    if not checks.passed:
        raise HoldingError("; ".join(checks.failures), hold)
    return hold


def short_paths(model: Das3Model, x: np.ndarray) -> dict[str, float]:
    """Muscle -> mm by which its path is shorter than its tendon slack plus the shortest valid fibre, for the
    muscles crossing a girdle or GH DOF: a warning, not a failure. There the path polynomial is outside the
    postures it was fitted to (:func:`sim.analysis.static_opt.shortest_valid_path`), but the plant still has a rest state
    (a slack muscle with a compressed tendon and a longer fibre, carrying almost no force), and the free girdle
    goes there by its own equations of motion, not by an optimiser's choice."""
    W = new_plant_work(model.arrays)
    evaluate(model.arrays, x, np.zeros(N_STATES), x[IA:], np.zeros(N_LOADS), W)
    short = so.shortest_valid_path(model) - W.mu.L
    rows = np.flatnonzero(so.crosses_any(model, so.GIRDLE_DOFS + so.GH_DOFS) & (short > 0))
    return {model.muscle_names[i]: float(short[i] * 1e3) for i in rows}


@dataclass
class SweepPoint:
    angle_rad: float
    holding: Holding | None      # the checked state, or the best unchecked one (None: not set up)
    start: str                   # "neighbour" (previous angle's state), "cold" (published equilibrium),
                                 # "cold (neighbour failed)" or "neighbour beyond" (the retry pass)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.holding is not None and not self.failures


def passive_sweep(model: Das3Model, coordinate: str, angles_rad, base_posture: so.Posture,
                  settings: so.SolverSettings = DEFAULT_SETTINGS,
                  tolerances: so.Tolerances = so.Tolerances()) -> list[SweepPoint]:
    """One :class:`SweepPoint` per angle of ``coordinate`` (a :data:`COORDINATES` name), the other four held at
    ``base_posture``. The sweep starts at the angle nearest the base value (cold, from the published
    equilibrium) and runs outwards both ways, each solve warm-started from the previous angle's checked state
    (angles and moments); a warm start that fails is retried cold. The rest state can end at a fold (the girdle's
    equilibrium branch turns back) and reappear on another branch further out, so each failed angle is then
    tried once more, inwards, warm from the nearest checked angle beyond it. Failures are recorded, not raised."""
    if coordinate not in COORDINATES:
        raise ValueError(f"coordinate must be one of {', '.join(COORDINATES)}, not {coordinate!r}")
    angles = [float(a) for a in angles_rad]
    n, base_value = len(angles), getattr(base_posture, coordinate)
    first = int(np.argmin([abs(so.angle_error(np.array(a), base_value)) for a in angles]))
    points: list = [None] * n

    def solve(i, warm, cold):
        posture = dataclasses.replace(base_posture, **{coordinate: angles[i]})
        return _solve_point(model, posture, angles[i], warm, settings, tolerances, cold)

    for order in (range(first, n), range(first - 1, -1, -1)):
        previous = None if order.start == first else _checked(points[first])
        for i in order:
            points[i] = solve(i, previous, cold=True)
            previous = _checked(points[i]) or previous
    for order, beyond in ((range(n - 1, first, -1), 1), (range(first), -1)):
        for i in order:
            j = i + beyond
            while 0 <= j < n and not points[j].passed:
                j += beyond
            if points[i].passed or not 0 <= j < n:
                continue
            retry = solve(i, points[j].holding, cold=False)
            if retry.passed:
                retry.start = "neighbour beyond"
                points[i] = retry
            else:
                points[i].failures += [f"beyond {f}" for f in retry.failures]
    return points


def _checked(point: SweepPoint | None) -> Holding | None:
    return point.holding if point is not None and point.passed else None


def _solve_point(model, posture, angle, warm: Holding | None, settings, tolerances, cold: bool = True) -> SweepPoint:
    """From ``warm`` (if given), then cold (if ``cold``) if that fails: the first checked state, else the first
    attempt's best state with the failures of every attempt."""
    starts = [("neighbour", warm.x[:11], warm.moments)] if warm is not None else []
    starts += [("cold", None, None)] if cold else []
    best, failures = None, []
    for label, q, moments in starts:
        try:
            hold = holding_moments(model, posture, q, moments, settings, tolerances)
        except so.StaticOptError as exc:        # HoldingError, or the humerus could not be placed
            failures.append(f"{label}: {exc.args[0]}")
            if best is None and isinstance(exc, HoldingError):
                best = SweepPoint(angle, exc.solution, label)
            continue
        return SweepPoint(angle, hold, f"{label} (neighbour failed)" if failures else label)
    best = best or SweepPoint(angle, None, starts[0][0])
    best.failures = failures
    return best


PASSIVE_COLUMNS = ("angle_deg", *(f"{n}_Nm" for n in MOMENT_NAMES), *(f"Q_{c}_Nm" for c in COORDINATES),
                   *(f"{n}_deg" for n in DOF_NAMES[:6]), "plane_deg", "elevation_deg", "axial_rotation_deg",
                   "gh_stability", "joint_outside_range_deg", "short_paths_mm", "iterations", "solve_time_s", "start",
                   "eom_residual_max_Nm", "checks_passed", "failures")
"""Columns of :func:`write_passive_csv`: the five holding moments (``LOAD_NAMES``), the generalised forces of
the MTG arm (:func:`generalized_forces`), the girdle angles, the thoracohumeral angles reached, the largest DOF
excursion beyond its range and the path warnings (:func:`short_paths`, ``muscle:mm``)."""


def write_passive_csv(path: Path, points: list[SweepPoint]) -> None:
    """One row per sweep angle (the best unchecked state where the checks failed, NaN where none was set up);
    angles deg, moments N m."""
    with output_file(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(PASSIVE_COLUMNS)
        for p in points:
            h = p.holding
            values = ["nan"] * (len(PASSIVE_COLUMNS) - 7) if h is None else [
                *(f"{v:.6f}" for v in h.moments), *(f"{v:.6f}" for v in h.generalized_forces),
                *np.degrees(h.girdle_rad).round(4), *np.degrees(h.th_angles).round(4), f"{h.gh_stability:.6f}",
                f"{math.degrees(h.checks.joint_outside_rad):.4f}",
                " ".join(f"{k}:{v:.1f}" for k, v in h.short_paths_mm.items())]
            w.writerow([f"{math.degrees(p.angle_rad):.4f}", *values, 0 if h is None else h.iterations,
                        "nan" if h is None else f"{h.time_s:.3f}", p.start,
                        "nan" if h is None else f"{h.checks.eom_max_nm:.3g}", p.passed, "; ".join(p.failures)])


HORIZONTAL_POSTURE = (0.0, 90.0 * DEG, 0.0, 60.0 * DEG, mm.NEUTRAL_PRONATION_RAD)
"""Plane of elevation (swept), elevation 90 deg (the arm horizontal: M_th_y then works on the plane alone,
cos(e) = 0 in :func:`generalized_forces`), axial rotation 0, elbow 60 deg and the neutral forearm of the
shoulder tasks of :data:`sim.analysis.max_moment.TASKS`."""

PLANE_TASKS = {
    "horizontal-flexion": mm.Task(0, +1, "plane_of_elevation", HORIZONTAL_POSTURE, (-30, 90, 15),
                                  "(none: this project's task)"),
    "horizontal-extension": mm.Task(0, -1, "plane_of_elevation", HORIZONTAL_POSTURE, (-30, 90, 15),
                                    "(none: this project's task)"),
}
"""Maximum isometric moments about the thorax Y axis, this project's own tasks (Chadwick et al. 2014 have none
for the plane of elevation, and no published data are compared): +1 = increasing plane of elevation, the arm
moving forwards (horizontal flexion), as plane 90 deg is forward flexion (:data:`sim.analysis.max_moment.
SAGITTAL_PLANE_RAD`). Swept with :func:`sim.analysis.max_moment.sweep` from -30 to 90 deg: beyond the sagittal
plane, across the body, the arm horizontal cannot be held within the authors' girdle ranges
(:data:`sim.analysis.passive_limits.AUTHORS_GIRDLE_RANGES_RAD`) and the GH joint's: at 105 and 120 deg GHz sits
at its range end with ACz or SCy at a range end, and the thoracohumeral posture is missed)."""
