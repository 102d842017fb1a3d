"""Static optimisation over the 9 girdle and GH angles alone (:func:`sim.analysis.static_opt.solve_static`;
the full-space problem and its notation are described there).

The muscles' problem at fixed angles q, V(q) = min_alpha Σ v² / S subject to f_eom = C alpha + k = 0 and the
activation bounds, is solved exactly (:mod:`sim.analysis.muscle_problem`: v = w F for criteria (a) and (b),
v = a for (c)). The outer problem, min V(q) under the thoracohumeral equalities, the contact and path-margin
inequalities and the angle bounds, is solved by SLSQP over q alone with the gradient of the envelope theorem:
dV/dq = d/dq [Σ v² / S + y . f_eom] at fixed (alpha*, y*), from the exact Jacobians of
:class:`sim.analysis.rest_model.RestModel`.

GH stability is an ellipse in two arctangents of the GH force, which is affine in alpha at fixed q: when it
binds, the inner problem adds its linearisation as a 12th row and re-linearises at the new alpha until the
exact value is within the limit (a sequence of inner problems, each solved exactly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.analysis.muscle_problem import (
    ActivationCost,
    ForceCost,
    active_range,
    das3_muscles_only,
    force_weight,
    min_max_fractions,
)
from sim.analysis.passive_limits import dof_ranges, limit_constraints
from sim.analysis.rest_model import RestModel, angle_error, glenoid_stability, unit_rows
from sim.analysis.solver import OBJECTIVE_FLOOR, SolverSettings, one_blas_thread
from sim.das3.model import N_DOF, N_MUS

PENALTY = 1e3
"""rho of the exact L1 penalty on the inner rows, in the scaled objective's units: the inner problem is
always feasible (|y| <= rho), and its solution is the constrained optimum when the rows are met and |y| < rho."""
OUTER_FTOL = 1e-12
"""SLSQP's ftol on the objective scaled by its start value."""
STALL_WINDOW = 10
STALL_DROP = 1e-10
STALL_BALANCE = 1e-6
"""Stall stop: at balanced, on-target points (inner rows in N m and thoracohumeral angles in rad within
STALL_BALANCE), the best V of the last STALL_WINDOW outer iterations no lower than the best before them by more
than STALL_DROP (relative); the best balanced iterate is returned. A guard: at a kink of V SLSQP keeps taking
tiny steps, its iterates ~1e-8 off target."""
KINK_POLISH_ITERATIONS = 3
KINK_ROUNDS = 3
"""After the reduced solve, a full-space polish of at most KINK_POLISH_ITERATIONS: if it needs them all, the
reduced stop was a kink of V (an inner bound changing form, e.g. a muscle at full activation whose full force
becomes the force at the shortest fibre) and the reduced solve runs again from the polished angles, at most
KINK_ROUNDS times, before the ordinary polish (:func:`solve_and_polish`)."""
GH_ITERATIONS = 30


class ReducedSolveError(RuntimeError):
    """The reduced solve ended without a solution it can vouch for (the caller falls back to the full space)."""


def gh_stability_of_alpha(rest: RestModel, alpha0: np.ndarray):
    """stab(alpha) -> (GH stability, d stability / d alpha) at the posture of the last evaluation (at alpha0),
    exact: F_GH = F_GH(alpha0) + sum_i (F_i - F_i(alpha0)) u_i over the GH-crossing muscles (unit lines of
    action u_i; spec "Outputs"), stability = (theta/theta_a)^2 + (phi/phi_a)^2 - 1 with theta = atan2(f_y, f_x),
    phi = atan2(f_z, f_x) of F_GH in the glenoid frame."""
    A = rest.A
    glenoid, rim = np.asarray(A.glenoid), np.asarray(A.gh_rim)
    base = np.array(rest.outputs["gh_force"])
    units = unit_rows(np.asarray(rest.W.out.loa).reshape(-1, 3))
    idx = np.asarray(A.gh_muscle)
    a0, span = alpha0[idx].copy(), rest.span[idx].copy()

    def stab(alpha):
        value, grad_f = glenoid_stability(glenoid, rim, base + units.T @ ((alpha[idx] - a0) * span))
        g = np.zeros(N_MUS)
        g[idx] = (units @ grad_f) * span
        return value, g

    return stab


class ReducedProblem:
    """V(q) and its envelope gradient (module docstring) for a criterion ``cost`` (:class:`ForceCost`,
    :class:`ActivationCost`: Σ v² / S), with the outer constraints' values and
    q-rows, cached for the last q."""

    def __init__(self, rest: RestModel, cost, target: np.ndarray, gh_limit: float | None) -> None:
        self.rest, self.criterion, self.target, self.gh_limit = rest, cost, target, gh_limit
        self.n_q = rest.layout.n_q
        self.y, self._key = None, None

    def z_of(self, q: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        z = np.zeros(self.rest.layout.size)
        z[:self.n_q], z[self.rest.layout.alpha] = q, alpha
        return z

    def evaluate(self, q: np.ndarray) -> "ReducedProblem":
        key = q.tobytes()
        if key == self._key:
            return self
        rest, n = self.rest, self.n_q
        r = rest.at(self.z_of(q, np.zeros(N_MUS)))
        self.th_error, self.J_th = angle_error(r.th, self.target), r.J_th[:, :n].copy()
        self.contact_e, self.J_contact_e = r.contact_e.copy(), r.J_contact_e[:, :n].copy()
        self.path_margin, self.J_path = r.path_margin.copy(), r.J_path[:, :n].copy()
        span = r.span.copy()
        self.criterion.prepare(rest.muscle_lengths(), r.force.copy(), span, active_range(span))
        qp, gh = self._inner(r.J_eom[:, rest.layout.alpha].copy(), r.f_eom.copy())
        self.alpha, self.y, self.residual = qp.alpha, qp.y[:N_DOF], qp.residual[:N_DOF]
        self.gh_multiplier = float(qp.y[N_DOF]) if gh is not None else 0.0
        self._value_and_gradient(q, gh)
        self._key = key
        return self

    def _inner(self, C, k):
        """The muscles' problem at the last posture (C, k: f_eom = C alpha + k), with GH stability added when
        its unconstrained optimum violates it. Returns (solution, the stability's value at alpha or None)."""
        rows = np.full(N_DOF, PENALTY)
        qp = self.criterion.solve(C, k, -rows, rows, self.y)
        if self.gh_limit is None:
            return qp, None
        stab = gh_stability_of_alpha(self.rest, np.zeros(N_MUS))
        value, g = stab(qp.alpha)
        if value <= self.gh_limit:
            return qp, None
        y, alpha = np.append(qp.y, 0.0), qp.alpha
        for _ in range(GH_ITERATIONS):
            qp = self.criterion.solve(np.vstack([C, g]), np.append(k, value - self.gh_limit - g @ alpha),
                                      np.append(-rows, 0.0), np.append(rows, PENALTY), y)
            step, alpha, y = float(np.max(np.abs(qp.alpha - alpha))), qp.alpha, qp.y
            value, g = stab(alpha)
            if value <= self.gh_limit + 1e-10 and step < 1e-10:
                break
        return qp, value

    def _value_and_gradient(self, q, gh_value) -> None:
        """V = Σ v² / S + y . f_eom (+ y_gh (stability - limit)) at (alpha*, y*) and its q-derivative at
        fixed (alpha*, y*): with GH binding from a full evaluation, else from RestModel.at_activation."""
        rest, n, alpha, scale = self.rest, self.n_q, self.alpha, self.criterion.scale
        z = self.z_of(q, alpha)
        rows = rest.rows(z) if self.gh_multiplier else rest.at_activation(alpha)
        v, Jv = self.criterion.values(rows)
        self.cost = float(v @ v)
        self.value = self.cost / scale + float(self.y @ rows.f_eom)
        self.gradient = 2 * v @ Jv / scale + self.y @ rows.J_eom
        if self.gh_multiplier:
            self.value += self.gh_multiplier * (gh_value - self.gh_limit)
            self.gradient = self.gradient + self.gh_multiplier * rest.output_jacobians(z).stability[:n]

    def balanced(self, tol: float) -> bool:
        """Inner rows met and the thoracohumeral angles on target (within ``tol``)."""
        return float(np.max(np.abs(self.residual))) <= tol and float(np.max(np.abs(self.th_error))) <= tol


@dataclass
class ReducedResult:
    z: np.ndarray                # [q* | alpha*]
    cost: float                  # Σ v², the criterion's value
    iterations: int              # outer SLSQP iterations (of every start)
    stalled: bool                # ended by the stall stop


def uses_reduced(rest: RestModel, criterion: str, settings: SolverSettings) -> bool:
    """Whether static optimisation starts here: the girdle free, no external moments and no contact-depth or
    conoid limit (the reduced problem has none of those rows); for (c) all muscles DAS3 Hill elements (the
    closed-form a(F) of :class:`ActivationCost`)."""
    return (settings.reduced and (criterion != "c" or das3_muscles_only(rest.model)) and rest.layout.n_q > 0
            and rest.layout.n_moments == 0 and not limit_constraints(rest, rest.limits))


def criterion_cost(rest: RestModel, key: str):
    """The muscles' problem of criterion ``key`` ((a), (b) or (c)) in the objective unit OBJECTIVE_FLOOR[key]."""
    if key == "c":
        return ActivationCost(rest.model, OBJECTIVE_FLOOR["c"])
    return ForceCost(force_weight(rest.fmax, key), OBJECTIVE_FLOOR[key])


def solve_criterion(rest: RestModel, key: str, target: np.ndarray, gh_limit: float | None, q0: np.ndarray,
                    settings: SolverSettings, eom_tol: float) -> ReducedResult:
    """Criterion ``key`` ((a), (b) or (c)) from the free angles ``q0``; (c) from two starts, the lower kept:
    q0 and the angles the reduced (b) reaches from q0 in :data:`ACTIVATION_START_ITERATIONS` outer
    iterations (Σ a² has many local minima; the static-optimisation docs give the measurements)."""
    if key != "c":
        return solve_reduced(rest, criterion_cost(rest, key), target, gh_limit, q0, settings, eom_tol)
    early = SolverSettings(max_iterations=ACTIVATION_START_ITERATIONS)
    from_b = solve_reduced(rest, criterion_cost(rest, "b"), target, gh_limit, q0, early, math.inf, vouch=False)
    results, failure, iterations = [], None, from_b.iterations
    for q in (q0, from_b.z[:rest.layout.n_q]):
        try:
            results.append(solve_reduced(rest, criterion_cost(rest, "c"), target, gh_limit, q, settings, eom_tol))
            iterations += results[-1].iterations
        except ReducedSolveError as exc:
            failure = exc
    if not results:
        raise failure
    best = min(results, key=lambda r: r.cost)
    return ReducedResult(best.z, best.cost, iterations, best.stalled)


def solve_and_polish(rest: RestModel, key: str, target: np.ndarray, gh_limit: float | None, q0: np.ndarray,
                     settings: SolverSettings, eom_tol: float, polish, fun) -> tuple[np.ndarray, int]:
    """(z, iterations): :func:`solve_criterion`, then the full-space polish (``polish(z, max_iterations)`` ->
    (z, iterations, constraints met), ``fun(z)`` the criterion): the kink rounds of :data:`KINK_ROUNDS`, then at
    most ``settings.polish_iterations``. A polished point is kept only if it meets the constraints and lowers
    the cost."""
    red = solve_criterion(rest, key, target, gh_limit, q0, settings, eom_tol)
    z, iterations, current = red.z, red.iterations, red.z
    if settings.polish_iterations <= 0:
        return z, iterations
    for _ in range(KINK_ROUNDS):
        zp, its, met = polish(current, KINK_POLISH_ITERATIONS)
        iterations += its
        if its < KINK_POLISH_ITERATIONS:
            return (zp if met and fun(zp) < fun(z) else z), iterations
        try:
            again = solve_reduced(rest, criterion_cost(rest, key), target, gh_limit, zp[:rest.layout.n_q], settings,
                                  eom_tol)
        except ReducedSolveError:
            break
        iterations += again.iterations
        z = again.z if again.cost < fun(z) else z
        current = again.z if again.cost < fun(zp) or not met else zp
    zp, its, met = polish(z, settings.polish_iterations)
    return (zp if met and fun(zp) < fun(z) else z), iterations + its


def min_max_start(rest: RestModel, z: np.ndarray, gh_limit: float | None) -> np.ndarray:
    """z with the activation fractions that minimise the largest stress F/PCSA at z's angles (criterion (d)'s
    first stage at fixed angles, one LP; GH stability linearised at z's fractions), or z if the LP has none."""
    r = rest.at(np.concatenate([z[:rest.layout.n_q], np.zeros(N_MUS)]))
    C, k, Fp, span = r.J_eom[:, rest.layout.alpha].copy(), r.f_eom.copy(), r.force.copy(), r.span.copy()
    row = None
    if gh_limit is not None:
        alpha = z[rest.layout.alpha]
        value, g = gh_stability_of_alpha(rest, np.zeros(N_MUS))(alpha)
        row = (g, gh_limit - value + g @ alpha)
    hi = np.where(active_range(span), 1.0, 0.0)
    alpha = min_max_fractions(C, k, Fp, span, force_weight(rest.fmax, "b"), hi, row)
    return z if alpha is None else np.concatenate([z[:rest.layout.n_q], alpha])


def capped_start(rest: RestModel, z: np.ndarray, cap_stress: float, target: np.ndarray, gh_limit: float | None,
                 eom_tol: float) -> np.ndarray:
    """z with criterion (b)'s exact muscle optimum at z's angles under F_i/PCSA_i <= ``cap_stress`` (criterion
    (d)'s second stage at fixed angles), or z if that optimum does not meet the rows to ``eom_tol``."""
    weight = force_weight(rest.fmax, "b")
    problem = ReducedProblem(rest, ForceCost(weight, OBJECTIVE_FLOOR["b"], cap_stress / weight), target, gh_limit)
    p = problem.evaluate(z[:rest.layout.n_q].copy())
    met = float(np.max(np.abs(p.residual))) <= eom_tol and np.all(np.isfinite(p.alpha))
    return p.z_of(z[:rest.layout.n_q], p.alpha) if met else z


ACTIVATION_START_ITERATIONS = 30


def solve_reduced(rest: RestModel, cost, target: np.ndarray, gh_limit: float | None, q0: np.ndarray,
                  settings: SolverSettings, eom_tol: float, vouch: bool = True) -> ReducedResult:
    """min_q V(q) of criterion ``cost`` (:class:`ReducedProblem`) from the free angles ``q0`` by SLSQP
    (objective scaled by its start value, ftol :data:`OUTER_FTOL`, the stall stop), BLAS on one thread. With
    ``vouch``, raises :class:`ReducedSolveError` when the inner rows are not met to ``eom_tol`` (N m) or a
    multiplier is at the penalty rho at the end."""
    problem = ReducedProblem(rest, cost, target, gh_limit)
    ranges = dof_ranges(rest.model, rest.limits)[list(rest.layout.free_dofs)]
    q0 = np.clip(np.asarray(q0, float), ranges[:, 0], ranges[:, 1])
    history, stalled, best = [], [False], [math.inf, None]

    def on(q):
        return problem.evaluate(q)

    def stall_stop(q):
        p = on(q)
        history.append(p.value if p.balanced(STALL_BALANCE) else math.inf)
        if history[-1] < best[0]:
            best[:] = [history[-1], q.copy()]
        if len(history) > STALL_WINDOW and math.isfinite(history[-1]) \
                and min(history[:-STALL_WINDOW]) - min(history[-STALL_WINDOW:]) <= STALL_DROP * abs(history[-1]):
            stalled[0] = True
            raise StopIteration

    with one_blas_thread():
        s = max(abs(on(q0).value), 1.0)
        cons = [{"type": "eq", "fun": lambda q: on(q).th_error, "jac": lambda q: on(q).J_th},
                {"type": "ineq", "fun": lambda q: -on(q).contact_e, "jac": lambda q: -on(q).J_contact_e},
                {"type": "ineq", "fun": lambda q: on(q).path_margin, "jac": lambda q: on(q).J_path}]
        from scipy.optimize import minimize  # imported where it is used: scipy.optimize is slow to import
        res = minimize(lambda q: on(q).value / s, q0, jac=lambda q: on(q).gradient / s, method="SLSQP",
                       bounds=list(map(tuple, ranges)), constraints=cons, callback=stall_stop,
                       options={"maxiter": settings.max_iterations, "ftol": OUTER_FTOL})
        q = np.clip(best[1] if stalled[0] else res.x, ranges[:, 0], ranges[:, 1])
        p = on(q)
    if vouch:
        vouch_for(p, eom_tol)
    return ReducedResult(p.z_of(q, p.alpha), p.cost, int(res.nit), stalled[0])


def vouch_for(p: ReducedProblem, eom_tol: float) -> None:
    """ReducedSolveError unless the inner rows are met to ``eom_tol`` (N m) and no multiplier is at rho."""
    if not np.all(np.isfinite(p.alpha)) or float(np.max(np.abs(p.residual))) > eom_tol:
        raise ReducedSolveError(f"inner rows not met (|f_eom| {float(np.max(np.abs(p.residual))):.3g} N m)")
    if max(float(np.max(np.abs(p.y))), p.gh_multiplier) >= PENALTY * (1 - 1e-9):
        raise ReducedSolveError("a row multiplier at the penalty bound")
