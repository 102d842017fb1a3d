"""Static optimisation of criteria (a) and (b) in the reduced space of the 9 girdle and GH angles
(:func:`sim.analysis.static_opt.solve_static`; the full-space problem and its notation are described there).

At fixed angles q the forces are affine in alpha, F = Fp(q) + alpha (Ff(q) - Fp(q)), and so are the
equations of motion, f_eom = C(q) alpha + k(q) (11 rows). With the criterion sum (w F)^2 / S the muscles'
problem is a convex quadratic programme with a diagonal cost,

    V(q) = min_alpha  sum_i d_i (alpha_i - c_i)^2   s.t.  C alpha + k = 0,  lo <= alpha <= hi,
    d_i = (w_i span_i)^2 / S,  c_i = -Fp_i / span_i,

solved exactly in its dual (:func:`solve_muscle_qp`). The outer problem, min V(q) under the thoracohumeral
equalities, the contact and path-margin inequalities and the angle bounds, is solved by SLSQP over q alone with
the gradient of the envelope theorem: dV/dq = d/dq [sum (w F)^2 / S + y . f_eom] at fixed (alpha*, y*), from
the exact Jacobians of :class:`sim.analysis.rest_model.RestModel`.

GH stability is an ellipse in two arctangents of the GH force, which is affine in alpha at fixed q: when it
binds, the inner problem adds its linearisation as a 12th row and re-linearises at the new alpha until the
exact value is within the limit (sequential QP in alpha, each QP solved exactly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from sim.analysis.passive_limits import dof_ranges
from sim.analysis.rest_model import RestModel, angle_error, glenoid_stability, unit_rows
from sim.analysis.solver import SolverSettings, one_blas_thread
from sim.das3.model import N_DOF, N_MUS

PENALTY = 1e3
"""rho of the exact L1 penalty on the inner rows, in the scaled objective's units: the inner problem is
always feasible (|y| <= rho), and its solution is the constrained optimum when the rows are met and |y| < rho."""
OUTER_FTOL = 1e-12
"""SLSQP's ftol on the objective scaled by its start value."""
STALL_WINDOW = 10
STALL_DROP = 1e-10
STALL_BALANCE = 1e-9
"""Stall stop: at a balanced, on-target point (inner rows in N m and thoracohumeral angles in rad within
STALL_BALANCE), no relative drop of V larger than STALL_DROP over STALL_WINDOW outer iterations (a guard: SLSQP
may otherwise keep taking tiny steps at a kink of V)."""
GH_ITERATIONS = 30
QP_TOLERANCE = 1e-11


class ReducedSolveError(RuntimeError):
    """The reduced solve ended without a solution it can vouch for (the caller falls back to the full space)."""


@dataclass
class MuscleQP:
    alpha: np.ndarray            # the minimiser
    y: np.ndarray                # row multipliers
    residual: np.ndarray         # C alpha + k
    iterations: int


def solve_muscle_qp(C, k, d, c, lo, hi, ylo, yhi, y0=None, tol=QP_TOLERANCE, max_iter=200) -> MuscleQP:
    """min sum d (alpha - c)^2 s.t. C alpha + k = 0 (the rows elastic: ylo <= y <= yhi), lo <= alpha <= hi, d > 0.

    Dual: theta(y) = min_alpha L(alpha, y), L = sum d (alpha - c)^2 + y . (C alpha + k), with the closed-form
    minimiser alpha(y) = clip(c - C^T y / (2 d), lo, hi); theta is concave, C1 and piecewise quadratic with
    gradient C alpha(y) + k. Maximised over the box by semismooth Newton (generalised Hessian C_F D^-1 C_F^T / 2
    over the alphas inside their bounds) with an exact line search; once the active sets are found the step is
    the KKT solution, so the result is exact to rounding. Stops when the projected gradient is below
    ``tol`` max(1, |k|). A row with ylo_j = 0 < yhi_j is the inequality C_j alpha + k_j <= 0."""
    C, k, d, c = (np.asarray(v, float) for v in (C, k, d, c))
    y = np.zeros(k.size) if y0 is None else np.clip(np.asarray(y0, float), ylo, yhi)
    limit = tol * max(1.0, float(np.max(np.abs(k))))
    for it in range(max_iter):
        u = c - (C.T @ y) / (2 * d)
        alpha = np.clip(u, lo, hi)
        r = C @ alpha + k
        if np.max(np.abs(y - np.clip(y + r, ylo, yhi))) <= limit:
            return MuscleQP(alpha, y, r, it)
        y, p = _ascent_direction(C, d, u, lo, hi, r, y, ylo, yhi)
        y = np.clip(y + _exact_step(C, k, d, u, lo, hi, y, p, ylo, yhi) * p, ylo, yhi)
    alpha = np.clip(c - (C.T @ y) / (2 * d), lo, hi)
    return MuscleQP(alpha, y, C @ alpha + k, max_iter)


def _ascent_direction(C, d, u, lo, hi, r, y, ylo, yhi):
    """(y snapped to its bounds, the Newton direction p of the dual, scaled to max |p| = 1), the components
    at a bound whose gradient points out of the box held fixed."""
    width = np.asarray(yhi, float) - np.asarray(ylo, float)
    at_lo, at_hi = y <= ylo + 1e-12 * width, y >= yhi - 1e-12 * width
    y = np.where(at_lo, ylo, np.where(at_hi, yhi, y))
    fixed = (at_lo & (r < 0)) | (at_hi & (r > 0))
    inside = (u > lo) & (u < hi)
    p = np.zeros(y.size)
    for _ in range(y.size + 1):
        free = ~fixed
        Cf = C[free][:, inside]
        H = (Cf / (2 * d[inside])) @ Cf.T
        H[np.diag_indices_from(H)] += 1e-12 * max(float(np.trace(H)), 1e-300) + 1e-300
        p = np.zeros(y.size)
        p[free] = np.linalg.solve(H, r[free])
        if r @ p <= 0:                     # singular H: the projected gradient instead
            p = np.where(free, r, 0.0)
        blocked = (at_lo & (p < 0)) | (at_hi & (p > 0))
        if not blocked.any():
            break
        fixed |= blocked
    return y, p / max(float(np.max(np.abs(p))), 1e-300)


def _exact_step(C, k, d, u, lo, hi, y, p, ylo, yhi) -> float:
    """The maximiser t of theta(y + t p) on [0, t_max] (the dual box): theta' along p is
    s(t) = w . clip(u - t v, lo, hi) + p . k with w = C^T p, v = w / (2 d), nonincreasing and piecewise linear
    between the breakpoints where an alpha reaches a bound; its zero is interpolated between breakpoints."""
    with np.errstate(divide="ignore", invalid="ignore"):
        to_box = np.where(p > 0, (yhi - y) / p, np.where(p < 0, (ylo - y) / p, np.inf))
        t_max = float(np.min(to_box))
        w = C.T @ p
        v = w / (2 * d)
        breaks = np.concatenate([(u - lo) / v, (u - hi) / v])
    breaks = np.unique(breaks[np.isfinite(breaks) & (breaks > 0) & (breaks < t_max)])
    pk = float(p @ k)
    t_lo, s_lo = 0.0, float(w @ np.clip(u, lo, hi)) + pk
    if breaks.size:
        s = np.clip(u[None, :] - breaks[:, None] * v[None, :], lo, hi) @ w + pk
        down = np.flatnonzero(s <= 0)
        if down.size:
            j = down[0]
            if j > 0:
                t_lo, s_lo = breaks[j - 1], s[j - 1]
            return float(t_lo + (breaks[j] - t_lo) * s_lo / (s_lo - s[j]))
        t_lo, s_lo = breaks[-1], s[-1]
    ut = u - t_lo * v
    inside = (ut > lo) & (ut < hi)
    curvature = float(w[inside] @ v[inside])
    return min(t_lo + s_lo / curvature, t_max) if curvature > 0 else t_max


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
    """V(q) and its envelope gradient (module docstring) for criterion weights ``weight`` (w) and objective
    unit ``scale`` (S), with the outer constraints' values and q-rows, cached for the last q."""

    def __init__(self, rest: RestModel, weight: np.ndarray, scale: float, target: np.ndarray,
                 gh_limit: float | None) -> None:
        self.rest, self.weight, self.scale, self.target, self.gh_limit = rest, weight, scale, target, gh_limit
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
        qp, gh = self._inner(r.J_eom[:, rest.layout.alpha].copy(), r.f_eom.copy(), r.force.copy(), r.span.copy())
        self.alpha, self.y, self.residual = qp.alpha, qp.y[:N_DOF], qp.residual[:N_DOF]
        self.gh_multiplier = float(qp.y[N_DOF]) if gh is not None else 0.0
        self._value_and_gradient(q, gh)
        self._key = key
        return self

    def _inner(self, C, k, Fp, span):
        """The muscle QP at the last posture (C, k: f_eom = C alpha + k), with GH stability added when the
        unconstrained optimum violates it. Returns (MuscleQP, the stability's value at alpha or None)."""
        ok = span > 1e-9 * max(float(np.max(span)), 1e-300)
        d = np.where(ok, (self.weight * span) ** 2 / self.scale, 1.0)
        c = np.where(ok, -Fp / np.where(ok, span, 1.0), 0.0)
        lo, hi, rows = np.zeros(N_MUS), np.where(ok, 1.0, 0.0), np.full(N_DOF, PENALTY)
        qp = solve_muscle_qp(C, k, d, c, lo, hi, -rows, rows, self.y)
        if self.gh_limit is None:
            return qp, None
        stab = gh_stability_of_alpha(self.rest, np.zeros(N_MUS))
        value, g = stab(qp.alpha)
        if value <= self.gh_limit:
            return qp, None
        y, alpha = np.append(qp.y, 0.0), qp.alpha
        for _ in range(GH_ITERATIONS):
            qp = solve_muscle_qp(np.vstack([C, g]), np.append(k, value - self.gh_limit - g @ alpha), d, c, lo, hi,
                                 np.append(-rows, 0.0), np.append(rows, PENALTY), y)
            step, alpha, y = float(np.max(np.abs(qp.alpha - alpha))), qp.alpha, qp.y
            value, g = stab(alpha)
            if value <= self.gh_limit + 1e-10 and step < 1e-10:
                break
        return qp, value

    def _value_and_gradient(self, q, gh_value) -> None:
        """V = sum (w F)^2 / S + y . f_eom (+ y_gh (stability - limit)) at (alpha*, y*) and its q-derivative at
        fixed (alpha*, y*): with GH binding from a full evaluation, else from RestModel.at_activation."""
        rest, n, alpha = self.rest, self.n_q, self.alpha
        if self.gh_multiplier:
            z = self.z_of(q, alpha)
            r = rest.at(z)
            F, f_eom, JF, JE = r.force, r.f_eom, r.J_force[:, :n], r.J_eom[:, :n]
        else:
            F, f_eom, JF, JE = rest.at_activation(alpha)
        wF = self.weight * F
        self.cost = float(wF @ wF)
        self.value = self.cost / self.scale + float(self.y @ f_eom)
        self.gradient = 2 * wF @ (self.weight[:, None] * JF) / self.scale + self.y @ JE
        if self.gh_multiplier:
            self.value += self.gh_multiplier * (gh_value - self.gh_limit)
            self.gradient = self.gradient + self.gh_multiplier * rest.output_jacobians(z).stability[:n]

    def balanced(self, tol: float) -> bool:
        """Inner rows met and the thoracohumeral angles on target (within ``tol``)."""
        return float(np.max(np.abs(self.residual))) <= tol and float(np.max(np.abs(self.th_error))) <= tol


@dataclass
class ReducedResult:
    z: np.ndarray                # [q* | alpha*]
    cost: float                  # sum (w F)^2, the criterion's value
    iterations: int              # outer SLSQP iterations
    stalled: bool                # ended by the stall stop


def solve_reduced(rest: RestModel, weight: np.ndarray, scale: float, target: np.ndarray, gh_limit: float | None,
                  q0: np.ndarray, settings: SolverSettings, eom_tol: float) -> ReducedResult:
    """min_q V(q) (module docstring) from the free angles ``q0`` by SLSQP (objective scaled by its start value,
    ftol :data:`OUTER_FTOL`, the stall stop), BLAS on one thread. Raises :class:`ReducedSolveError` when the
    inner rows are not met to ``eom_tol`` (N m) or a multiplier is at the penalty rho at the end."""
    problem = ReducedProblem(rest, weight, scale, target, gh_limit)
    ranges = dof_ranges(rest.model, rest.limits)[list(rest.layout.free_dofs)]
    q0 = np.clip(np.asarray(q0, float), ranges[:, 0], ranges[:, 1])
    history, stalled = [], [False]

    def on(q):
        return problem.evaluate(q)

    def stall_stop(q):
        p = on(q)
        history.append(p.value if p.balanced(STALL_BALANCE) else math.inf)
        if len(history) > STALL_WINDOW and math.isfinite(history[-1]) \
                and history[-1 - STALL_WINDOW] - history[-1] <= STALL_DROP * abs(history[-1]):
            stalled[0] = True
            raise StopIteration

    with one_blas_thread():
        s = max(abs(on(q0).value), 1.0)
        cons = [{"type": "eq", "fun": lambda q: on(q).th_error, "jac": lambda q: on(q).J_th},
                {"type": "ineq", "fun": lambda q: -on(q).contact_e, "jac": lambda q: -on(q).J_contact_e},
                {"type": "ineq", "fun": lambda q: on(q).path_margin, "jac": lambda q: on(q).J_path}]
        res = minimize(lambda q: on(q).value / s, q0, jac=lambda q: on(q).gradient / s, method="SLSQP",
                       bounds=list(map(tuple, ranges)), constraints=cons, callback=stall_stop,
                       options={"maxiter": settings.max_iterations, "ftol": OUTER_FTOL})
        q = np.clip(res.x, ranges[:, 0], ranges[:, 1])
        p = on(q)
    if not np.all(np.isfinite(p.alpha)) or float(np.max(np.abs(p.residual))) > eom_tol:
        raise ReducedSolveError(f"inner rows not met (|f_eom| {float(np.max(np.abs(p.residual))):.3g} N m)")
    if max(float(np.max(np.abs(p.y))), p.gh_multiplier) >= PENALTY * (1 - 1e-9):
        raise ReducedSolveError("a row multiplier at the penalty bound")
    return ReducedResult(p.z_of(q, p.alpha), p.cost, int(res.nit), stalled[0])
