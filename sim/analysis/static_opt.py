"""Static optimisation of the DAS3 muscles with the GH stability constraint (van der Helm 1994, "Inverse
dynamic optimization" and "Results"; Chadwick et al. 2014 §II-F for the DAS3 form f*(x, 0, 0, M) = 0).

At rest (q̇ = 0, ṡ = 0, activation = excitation) each muscle's force F_i lies between its passive rest
force Fp_i(q) (a = 0) and its full rest force Ff_i(q) (a = 1, or the force at the shortest valid fibre
``REST_FIBRE_MIN`` where full activation would shorten it further). The unknowns are

    z = [q_free | alpha (138) | M (0 or 5)],   F = Fp(q) + alpha (Ff(q) - Fp(q)),  0 <= alpha <= 1,

so the equations of motion f_eom = Q(q, M) - G(q)^T F are linear in F at a fixed posture; each muscle's
s and a follow from its F in closed form (:func:`sim.das3.kernels.muscles.rest_state_from_force`), so the
contraction equations g = 0 hold by construction (all of it in z: :class:`sim.analysis.rest_model.RestModel`).
Constraints:

- f_eom = 0 (11): passive muscle forces, conoid, scapulothoracic contact, joint stops and loads are all in
  the plant's own residual; derivatives from its exact Jacobian (:func:`sim.das3.kernels.step.evaluate`);
- the posture: elbow and pronation held; with ``girdle`` given the whole q is fixed (the GH angles solved
  from the thoracohumeral target), otherwise the girdle and GH angles are free and the thoracohumeral
  YZY angles are equality constraints;
- GH stability (Chadwick eq. 9; van der Helm App. C) <= ``gh_limit`` (0 = at the glenoid rim);
- with the girdle free, TS and AI not lifted off the thorax: the ellipsoid function E <= 0 (Chadwick §II-F,
  "to prevent scapular winging"; the DAS3 contact is a penalty force, so E = 0 exactly would carry none).

Criteria (van der Helm 1994, "Results" (a)-(d)), F the muscle-tendon force (passive included; the 1994
model had none) and PCSA = Fmax / 100 N/cm² (Chadwick 2014 App. A): (a) Σ F², (b) Σ (F/PCSA)²,
(c) Σ a², which at zero velocity is Σ (F_CE,active / (Fmax f_FL(Lce)))², the paper's Σ (F/Fmax(l))² for the
active part; (d) max F/PCSA as an epigraph (min t, F/PCSA <= t) started from criterion (b)'s optimum (a
balanced point whose largest stress bounds t from above), then criterion (b) among the solutions within 1e-6
of that t, since the max alone leaves every muscle below it undetermined (the paper's "numerically unstable").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from sim.analysis.muscle_problem import SPECIFIC_TENSION_N_PER_CM2, force_weight
from sim.analysis.passive_limits import (
    MINIMAL_EFFORT,
    PassiveLimits,
    active_limits,
    conoid_force_cap,
    contact_bound,
    dof_ranges,
    limit_constraints,
    pad_columns,
)
from sim.analysis.reduced_static import ReducedSolveError, capped_start, min_max_start, solve_and_polish, uses_reduced
from sim.analysis.rest_model import (
    Layout,
    RestModel,
    angle_error,
    contact_function,
    crosses_any,
    shortest_valid_path,
    thoracohumeral_jacobian,
)
from sim.analysis.solver import OBJECTIVE_FLOOR, SolverSettings, run_slsqp, satisfied, variable_scale
from sim.analysis.solver import optimise as solver_optimise
from sim.das3.dynamics import residual
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.das3.layout import GIRDLE_NAMES
from sim.das3.model import DOF_NAMES, HUMERUS_FRAME, MUS_EXCITATION_GATE, N_LOADS, N_MUS, N_STATES, Das3Model
from sim.errors import UserInputError

CRITERIA = ("a", "b", "c", "d")
CRITERION_UNITS = {"a": "N^2", "b": "(N/cm^2)^2", "c": "1", "d": "N/cm^2"}
ELBOW, PRONATION = DOF_NAMES.index("ELx"), DOF_NAMES.index("PSy")
GIRDLE_DOFS = tuple(DOF_NAMES.index(n) for n in GIRDLE_NAMES)
GH_DOFS = tuple(DOF_NAMES.index(n) for n in ("GHy", "GHz", "GHyy"))
GH_STEP_MAX_RAD = 0.2
"""Largest GH-angle change per Newton step of :func:`place_humerus` (its Jacobian is singular at 0 and
180 deg elevation, where a full step can throw the humerus several turns)."""
N_MOMENTS = 5
"""The five external moments of Chadwick eq. 10 (loads M_th_y, M_th_z, M_hum_y, M_elbow, M_pronation)."""


class StaticOptInputError(UserInputError, ValueError):
    """A posture, load, criterion or limit no problem can be set up from (the command line shows it as one
    line and exits 2)."""


class StaticOptError(RuntimeError):
    """The optimisation found no solution that passes the checks (message: the failed checks);
    ``solution``: the best point found, with its checks (None if there is none)."""

    def __init__(self, message: str, solution: "StaticSolution | None" = None) -> None:
        super().__init__(message, solution)      # both in args: the error pickles whole (the sweep's workers)
        self.solution = solution

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Posture:
    """Thoracohumeral YZY angles, elbow flexion and pronation (rad); ``girdle``: the six clavicle and
    scapula angles (rad) to hold, or None to let the optimiser find them."""

    plane_of_elevation: float
    elevation: float
    axial_rotation: float
    elbow_flexion: float
    pronation: float
    girdle: tuple[float, ...] | None = None

    def th_target(self) -> np.ndarray:
        return np.array([self.plane_of_elevation, self.elevation, self.axial_rotation])


@dataclass(frozen=True)
class Tolerances:
    """Acceptance limits of :func:`check_state` (the solver's own "converged" is not trusted)."""

    eom_nm: float = 1e-6          # max |f_eom|, N m
    contraction: float = 1e-9     # max |g| (normalised by Fmax)
    posture_rad: float = 1e-6
    constraint: float = 1e-6      # GH stability, E of TS/AI, activation bounds


@dataclass
class Checks:
    eom_max_nm: float
    contraction_max: float
    posture_max_rad: float
    gh_stability: float
    contact_e: np.ndarray        # (2,) E of TS, AI (<= 0: on or in the thorax)
    activation_range: tuple[float, float]
    joint_outside_rad: float     # largest excursion outside a DOF range (joint stops act; reported only)
    passed: bool
    failures: list[str] = field(default_factory=list)
    conoid_force_n: float = math.nan


def _held(posture: Posture) -> dict[int, float]:
    """DOF -> value for the DOFs the posture fixes directly: elbow, pronation and, if given, the girdle."""
    held = {ELBOW: posture.elbow_flexion, PRONATION: posture.pronation}
    if posture.girdle is not None:
        if len(posture.girdle) != 6 or not all(math.isfinite(v) for v in posture.girdle):
            raise StaticOptInputError("girdle must be six finite angles (SCy, SCz, SCx, ACy, ACz, ACx), rad")
        held.update(zip(GIRDLE_DOFS, posture.girdle))
    return held


def place_humerus(model: Das3Model, q: np.ndarray, target: np.ndarray, iterations: int = 60) -> np.ndarray:
    """q with the GH angles turned (Newton on the exact thoracohumeral Jacobian, steps limited to
    ``GH_STEP_MAX_RAD`` and the angles kept in (-pi, pi], where the muscle-path polynomials are fitted)
    so that the thoracohumeral angles are ``target``, the other DOFs as given. Raises StaticOptError if
    Newton does not converge."""
    A, W = model.arrays, new_plant_work(model.arrays)
    q = np.array(q, float)
    x, xd = np.array(model.equilibrium_state), np.zeros(N_STATES)
    gh = list(GH_DOFS)
    for _ in range(iterations):
        x[IQ:IQD] = q
        evaluate(A, x, xd, x[IA:], np.zeros(N_LOADS), W)
        compute_outputs(A, W)
        err = angle_error(W.out.th_angles, target)
        if np.max(np.abs(err)) < 1e-13:
            return q
        step = np.linalg.lstsq(thoracohumeral_jacobian(W.mb.R[HUMERUS_FRAME])[:, gh], err, rcond=None)[0]
        q[gh] = angle_error(q[gh] - np.clip(step, -GH_STEP_MAX_RAD, GH_STEP_MAX_RAD), 0.0)
    raise StaticOptError(f"cannot place the humerus at thoracohumeral angles {np.degrees(target).round(3)} deg "
                         f"from this girdle (Newton left an error of {np.degrees(np.max(np.abs(err))):.3g} deg)")


def start_posture(model: Das3Model, posture: Posture, q_start: np.ndarray | None,
                  limits: PassiveLimits = MINIMAL_EFFORT) -> np.ndarray:
    """All 11 angles to start from: ``q_start`` or the published equilibrium, the girdle clipped into the
    limits' girdle ranges when they set some (the published equilibrium has ACz and ACx outside them), the
    held DOFs set and the humerus placed at the thoracohumeral target."""
    q = np.array(model.equilibrium_state[IQ:IQD] if q_start is None else q_start, float)
    if limits.girdle_ranges_rad is not None:
        lo, hi = dof_ranges(model, limits)[list(GIRDLE_DOFS)].T
        q[list(GIRDLE_DOFS)] = np.clip(q[list(GIRDLE_DOFS)], lo, hi)
    for dof, value in _held(posture).items():
        q[dof] = value
    return place_humerus(model, q, posture.th_target())


def layout_for(posture: Posture, n_moments: int) -> Layout:
    return Layout(free_dofs=solved_dofs(posture), n_moments=n_moments)


def solved_dofs(posture: Posture) -> tuple[int, ...]:
    """The DOFs the optimiser chooses: girdle and GH with the girdle free, none with it given."""
    return () if posture.girdle is not None else GIRDLE_DOFS + GH_DOFS


def equalities(rest: RestModel, posture: Posture) -> dict:
    """f_eom = 0 and, with the GH angles free, the thoracohumeral angles."""
    target = posture.th_target()
    with_th = bool(rest.layout.n_q)

    def fun(z):
        r = rest.at(z[:rest.layout.size])
        parts = [r.f_eom] + ([angle_error(r.th, target)] if with_th else [])
        return np.concatenate(parts)

    def jac(z):
        r = rest.at(z[:rest.layout.size])
        return pad_columns(np.vstack([r.J_eom] + ([r.J_th] if with_th else [])), z.size)

    return {"type": "eq", "fun": fun, "jac": jac}


def inequalities(rest: RestModel, gh_limit: float | None) -> list[dict]:
    """GH stability <= gh_limit (if not None) and, with the girdle free, E(TS), E(AI) <= 0 (as >= 0)."""
    n = rest.layout.size
    cons = []
    if gh_limit is not None:
        cons.append({"type": "ineq", "fun": lambda z: np.array([gh_limit - rest.at(z[:n]).stability]),
                     "jac": lambda z: pad_columns(-rest.output_jacobians(z[:n]).stability[None, :], z.size)})
    if rest.layout.n_q:
        cons.append({"type": "ineq", "fun": lambda z: -rest.at(z[:n]).contact_e,
                     "jac": lambda z: pad_columns(-rest.output_jacobians(z[:n]).contact_e, z.size)})
        cons.append({"type": "ineq", "fun": lambda z: rest.at(z[:n]).path_margin,
                     "jac": lambda z: pad_columns(rest.at(z[:n]).J_path, z.size)})
    return cons


def _criterion(rest: RestModel, criterion: str):
    """(fun, jac) of criterion (a), (b) or (c) in its own units (module docstring)."""
    n = rest.layout.size
    if criterion == "c":
        def values(r):
            return r.x[IA:], r.J_act
    else:
        weight = force_weight(rest.fmax, criterion)

        def values(r):
            return weight * r.force, weight[:, None] * r.J_force

    def fun(z):
        v, _ = values(rest.at(z[:n]))
        return float(v @ v)

    def jac(z):
        v, J = values(rest.at(z[:n]))
        return pad_columns(2 * v @ J, z.size)

    return fun, jac


def bounds(model: Das3Model, layout: Layout, limits: PassiveLimits) -> list[tuple]:
    """Free DOFs within their ranges (the limits' girdle ranges, never widened), 0 <= alpha <= gate (1, or 0 on
    a denervated element: ``MUS_EXCITATION_GATE``), moments and extra variables free. Beyond the ranges, in the
    girdle's corners, muscle paths become shorter than their tendons: no valid rest state."""
    ranges = dof_ranges(model, limits)
    b = [(ranges[j, 0], ranges[j, 1]) for j in layout.free_dofs]
    gate = np.asarray(model.arrays.mus[:, MUS_EXCITATION_GATE], float)
    return b + [(0.0, float(g)) for g in gate] + [(None, None)] * (layout.n_moments + layout.n_extra)


@dataclass
class StaticSolution:
    x: np.ndarray                # (298,) state at rest: [q | 0 | s | a]
    activation: np.ndarray       # (138,)
    force: np.ndarray            # (138,) N, muscle-tendon force
    criterion: str
    cost: float                  # criterion value in CRITERION_UNITS
    th_angles: np.ndarray        # (3,) rad
    gh_force: np.ndarray         # (3,) N, on the scapula, scapula frame
    gh_angles: np.ndarray        # (2,) rad: theta, phi
    gh_stability: float
    contact_force: np.ndarray    # (2, 3) N at TS, AI, thorax frame
    conoid_force: np.ndarray     # (3,) N
    moments: np.ndarray          # (n_moments,) N m, the free external moments (max-moment problems)
    active: list[str]            # constraints at their limit
    iterations: int
    time_s: float
    checks: Checks


def solve_static(model: Das3Model, posture: Posture, loads=None, criterion: str = "b",
                 gh_limit: float | None = 0.0, q_start: np.ndarray | None = None,
                 settings: SolverSettings = SolverSettings(),
                 tolerances: Tolerances = Tolerances(), limits: PassiveLimits = MINIMAL_EFFORT) -> StaticSolution:
    """Muscle activations (and, with ``posture.girdle`` None, the girdle angles) that hold ``posture``
    under ``loads`` at minimum ``criterion`` with GH stability <= ``gh_limit`` (None: unconstrained).
    ``q_start``: the 11 angles to start from (e.g. the previous posture's, for a trajectory); ``limits``:
    contact depth, conoid elongation and girdle ranges (:mod:`sim.analysis.passive_limits`). (a), (b), (c) and
    (d)'s first stage are solved over the angles alone and polished (:mod:`sim.analysis.reduced_static`) when
    :func:`~sim.analysis.reduced_static.uses_reduced`, else or after :data:`REDUCED_FAILURES` by the full-space
    SLSQP from the same start.
    Raises :class:`StaticOptError` when the result fails :func:`check_state`."""
    if criterion not in CRITERIA:
        raise StaticOptInputError(f"criterion must be one of {', '.join(CRITERIA)}, not {criterion!r}")
    t_start = time.perf_counter()
    rest, z0, cons = rest_problem(model, posture, loads, gh_limit, q_start, 0, limits)
    args = (rest, posture, criterion, gh_limit, z0, cons, settings, tolerances, t_start)
    if uses_reduced(rest, criterion, settings):
        try:
            return _solve_from(*args, reduced=True)
        except REDUCED_FAILURES:
            pass
    return _solve_from(*args, reduced=False)


REDUCED_FAILURES = (ReducedSolveError, StaticOptError, ArithmeticError, ValueError, np.linalg.LinAlgError)
"""After these (no vouched solution, a failed check, a numerical breakdown) the full-space solve takes over."""


def _solve_from(rest: RestModel, posture: Posture, criterion: str, gh_limit, z0, cons, settings, tol, t_start,
                reduced: bool) -> StaticSolution:
    """:func:`solve_static` from z0, its first stage reduced (:func:`_reduced_then_polish`) or full-space; on the
    reduced path (d)'s stages start from their problems' exact optima at fixed angles."""
    key = "b" if criterion == "d" else criterion
    fun, jac = _criterion(rest, key)
    if reduced:
        z, iterations = _reduced_then_polish(rest, posture, key, gh_limit, z0, cons, settings, tol)
    else:
        z, iterations = optimise(rest, fun, jac, z0, cons, settings, tol, OBJECTIVE_FLOOR[key])
    if criterion == "d":
        z, t, its = _min_max_stress(rest, min_max_start(rest, z, gh_limit) if reduced else z, cons, settings)
        if reduced:
            z = capped_start(rest, z, t * (1 + 1e-6), posture.th_target(), gh_limit, tol.eom_nm)
        cap = _stress_cap(rest, t * (1 + 1e-6))
        z, capped_its = optimise(rest, fun, jac, z, cons + [cap], settings, tol, OBJECTIVE_FLOOR[key])
        iterations += its + capped_its
    r = rest.at(z)
    cost = float(np.max(r.force / rest.fmax)) * SPECIFIC_TENSION_N_PER_CM2 if criterion == "d" else fun(z)
    return finish(rest, z, posture, criterion, cost, gh_limit, iterations, t_start, tol)


def _reduced_then_polish(rest: RestModel, posture: Posture, key: str, gh_limit, z0, cons, settings, tol):
    """(z, iterations) of criterion ``key`` by :func:`sim.analysis.reduced_static.solve_and_polish` from z0's
    angles, the polish the full-space SLSQP."""
    fun, jac = _criterion(rest, key)

    def polish(z, max_iterations):
        short = SolverSettings(max_iterations=max_iterations, ftol=settings.ftol, restarts=0)
        zp, its = optimise(rest, fun, jac, z, cons, short, tol, OBJECTIVE_FLOOR[key])
        return zp, its, satisfied(zp, cons, tol)

    return solve_and_polish(rest, key, posture.th_target(), gh_limit, z0[:rest.layout.n_q], settings, tol.eom_nm,
                            polish, fun)


def rest_problem(model: Das3Model, posture: Posture, loads, gh_limit: float | None, q_start, n_moments: int,
                 limits: PassiveLimits = MINIMAL_EFFORT):
    """(RestModel, start z = [free angles | alpha 0 | M 0], constraints) at ``posture``, ``n_moments`` free."""
    check_inputs(posture, gh_limit)
    q0 = start_posture(model, posture, q_start, limits)
    layout = layout_for(posture, n_moments)
    rest = RestModel(model, checked_loads(loads), q0, layout, limits)
    z = np.concatenate([q0[list(layout.free_dofs)], np.zeros(N_MUS + n_moments)])
    return rest, z, [equalities(rest, posture), *inequalities(rest, gh_limit), *limit_constraints(rest, limits)]


def optimise(rest: RestModel, fun, jac, z: np.ndarray, cons: list, settings: SolverSettings, tol: Tolerances,
             floor: float) -> tuple[np.ndarray, int]:
    """:func:`sim.analysis.solver.optimise` within the problem's bounds. Returns (z, total iterations)."""
    return solver_optimise(fun, jac, z, cons, bounds(rest.model, rest.layout, rest.limits), settings, tol, floor,
                           variable_scale(rest.layout))


def checked_loads(loads) -> np.ndarray:
    loads = np.zeros(N_LOADS) if loads is None else np.asarray(loads, float)
    if loads.shape != (N_LOADS,) or not np.all(np.isfinite(loads)):
        raise StaticOptInputError(f"loads must be {N_LOADS} finite values (sim.das3.model.LOAD_NAMES)")
    return loads


def check_inputs(posture: Posture, gh_limit: float | None) -> None:
    """Finite posture angles and GH limit (None: no limit), or StaticOptInputError naming the bad value."""
    angles = {"plane of elevation": posture.plane_of_elevation, "elevation": posture.elevation,
              "axial rotation": posture.axial_rotation, "elbow flexion": posture.elbow_flexion,
              "pronation": posture.pronation}
    for name, value in angles.items():
        if not math.isfinite(value):
            raise StaticOptInputError(f"the posture's {name} must be a finite angle, not {value}")
    if gh_limit is not None and not math.isfinite(gh_limit):
        raise StaticOptInputError(f"the GH stability limit must be a finite number, not {gh_limit}")
    _held(posture)


def _min_max_stress(rest: RestModel, z0: np.ndarray, cons: list, settings: SolverSettings):
    """Criterion (d), stage 1: min t with F_i/PCSA_i <= t (epigraph; t the one extra variable) from z0
    (criterion (b)'s optimum in :func:`solve_static`). Returns (z, t (N/cm²), iterations)."""
    n = rest.layout.size
    stress = force_weight(rest.fmax, "b")
    epigraph = {"type": "ineq", "fun": lambda z: z[n] - stress * rest.at(z[:n]).force,
                "jac": lambda z: np.hstack([-stress[:, None] * rest.at(z[:n]).J_force, np.ones((N_MUS, 1))])}
    grad = np.zeros(n + 1)
    grad[n] = 1.0
    t0 = float(np.max(stress * rest.at(z0).force))
    z, its = run_slsqp(lambda z: float(z[n]), lambda z: grad, np.append(z0, t0), cons + [epigraph],
                    bounds(rest.model, rest.layout.with_extra(1), rest.limits), settings)
    return z[:n], float(z[n]), its


def _stress_cap(rest: RestModel, cap: float) -> dict:
    """Criterion (d), stage 2's constraint F_i/PCSA_i <= cap."""
    n, stress = rest.layout.size, force_weight(rest.fmax, "b")
    return {"type": "ineq", "fun": lambda z: cap - stress * rest.at(z[:n]).force,
            "jac": lambda z: pad_columns(-stress[:, None] * rest.at(z[:n]).J_force, z.size)}


def check_state(model: Das3Model, x: np.ndarray, posture: Posture, loads, gh_limit: float | None,
                tol: Tolerances = Tolerances(), limits: PassiveLimits | None = None) -> Checks:
    """Re-evaluate a rest state with the plant's own residual (:func:`sim.das3.dynamics.residual` with
    xdot = 0 and u = a, so the activation rows vanish too) and outputs, and test every condition of the
    problem against ``tol``; with ``limits`` (and the girdle free) also the contact depth, the conoid and
    the girdle ranges."""
    loads = checked_loads(loads)
    W = new_plant_work(model.arrays)
    f = residual(model, x, np.zeros(N_STATES), x[IA:], loads, work=W)
    compute_outputs(model.arrays, W)
    th = W.out.th_angles
    held = _held(posture)
    posture_err = max(float(np.max(np.abs(angle_error(th, posture.th_target())))),
                      max(abs(x[IQ + dof] - v) for dof, v in held.items()))
    lo, hi = np.asarray(model.dof_ranges).T
    q, a = x[IQ:IQD], x[IA:]
    chosen = crosses_any(model, solved_dofs(posture))
    short = np.where(chosen, W.mu.L - shortest_valid_path(model), np.inf)
    worst = int(np.argmin(short))
    c = Checks(eom_max_nm=float(np.max(np.abs(f[IQD:IS]))), contraction_max=float(np.max(np.abs(f[IS:IA]))),
               posture_max_rad=posture_err, gh_stability=float(W.out.gh_stability[0]),
               contact_e=contact_function(model.arrays, W), activation_range=(float(a.min()), float(a.max())),
               joint_outside_rad=float(max(0.0, np.max(lo - q), np.max(q - hi))), passed=True)
    tests = [(c.eom_max_nm <= tol.eom_nm, f"equations of motion residual {c.eom_max_nm:.3g} N m"),
             (c.contraction_max <= tol.contraction, f"contraction residual {c.contraction_max:.3g}"),
             (posture_err <= tol.posture_rad, f"posture off by {math.degrees(posture_err):.3g} deg"),
             (gh_limit is None or c.gh_stability <= gh_limit + tol.constraint,
              f"GH stability {c.gh_stability:+.4f} above the limit {gh_limit}"),
             (posture.girdle is not None or bool(np.all(c.contact_e <= tol.constraint)),
              f"scapula off the thorax (E of TS, AI = {c.contact_e[0]:+.3g}, {c.contact_e[1]:+.3g})"),
             (a.min() >= -tol.constraint and a.max() <= 1 + tol.constraint,
              f"activation outside [0, 1] ({a.min():.3g}..{a.max():.3g})"),
             (short[worst] >= -tol.constraint,
              f"muscle path {model.muscle_names[worst]} {-short[worst] * 1e3:.1f} mm shorter than its tendon "
              "slack plus the shortest valid fibre (outside the path model)")]
    c.conoid_force_n = float(np.linalg.norm(W.out.conoid_force))
    if limits is not None and posture.girdle is None:
        tests += _limit_tests(model, c, q, limits, tol)
    c.failures = [msg for ok, msg in tests if not ok]
    c.passed = not c.failures
    return c


def _limit_tests(model: Das3Model, c: Checks, q: np.ndarray, limits: PassiveLimits, tol: Tolerances) -> list:
    """(passed, message) of the passive limits at a checked state (:mod:`sim.analysis.passive_limits`)."""
    tests = []
    e_min = contact_bound(model, limits)
    if e_min is not None:
        tests.append((bool(np.all(c.contact_e >= e_min - tol.constraint)),
                      f"scapula deeper in the thorax than allowed (E of TS, AI = {c.contact_e[0]:+.4f}, "
                      f"{c.contact_e[1]:+.4f} < {e_min:+.4f})"))
    cap = conoid_force_cap(model, limits)
    if cap is not None:
        tests.append((c.conoid_force_n <= cap * (1 + tol.constraint),
                      f"conoid stretched beyond its limit ({c.conoid_force_n:.1f} N > {cap:.1f} N)"))
    lo, hi = dof_ranges(model, limits)[list(GIRDLE_DOFS)].T
    girdle = q[list(GIRDLE_DOFS)]
    outside = np.maximum(lo - girdle, girdle - hi)
    worst = int(np.argmax(outside))
    tests.append((outside[worst] <= tol.constraint,
                  f"girdle {DOF_NAMES[GIRDLE_DOFS[worst]]} {math.degrees(outside[worst]):.3g} deg outside its range"))
    return tests


def _active_constraints(rest: RestModel, z: np.ndarray, gh_limit) -> list[str]:
    """Names of the inequality constraints at their limit (within 1e-6) at z."""
    r, L, model = rest.at(z), rest.layout, rest.model
    active = []
    if gh_limit is not None and r.stability >= gh_limit - 1e-6:
        active.append("gh_stability")
    if L.n_q:
        active += [f"scapula_on_thorax:{p}" for p, e in zip(("TS", "AI"), r.contact_e) if e >= -1e-6]
        active += [f"path_length:{model.muscle_names[rest.path_rows[i]]}" for i in np.flatnonzero(r.path_margin <= 1e-6)]
    alpha = z[L.alpha]
    active += [f"force_max:{model.muscle_names[i]}" for i in np.flatnonzero(alpha >= 1 - 1e-6)]
    lo, hi = dof_ranges(model, rest.limits).T
    q = r.x[IQ:IQD]
    active += [f"joint_range:{model.dof_names[j]}" for j in L.free_dofs if q[j] <= lo[j] + 1e-6 or q[j] >= hi[j] - 1e-6]
    return active + (active_limits(rest, z, rest.limits) if L.n_q else [])


def finish(rest: RestModel, z, posture, criterion, cost, gh_limit, iterations, t_start, tol) -> StaticSolution:
    """The solution at z, checked with the plant's residual; raises StaticOptError if a check fails."""
    r = rest.at(z)
    x = r.x.copy()
    loads = rest.loads_of(z)
    checks = check_state(rest.model, x, posture, loads, gh_limit, tol, rest.limits)
    sol = StaticSolution(
        x=x, activation=x[IA:].copy(), force=r.force.copy(), criterion=criterion, cost=cost,
        th_angles=r.th.copy(), gh_stability=r.stability, moments=z[rest.layout.moments].copy(),
        active=_active_constraints(rest, z, gh_limit), iterations=iterations,
        time_s=time.perf_counter() - t_start, checks=checks, **r.outputs)
    if not checks.passed:
        raise StaticOptError("; ".join(checks.failures), sol)
    return sol
