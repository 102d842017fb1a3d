"""The muscles' problem of static optimisation at fixed angles (:mod:`sim.analysis.reduced_static` solves the
angles around it; :func:`sim.analysis.static_opt.solve_static` describes the full problem and its notation).

At fixed angles q each force is affine in its fraction alpha, F = Fp(q) + alpha span(q), span = Ff - Fp, and so
are the equations of motion, f_eom = C(q) alpha + k(q) (11 rows, elastic: |y| <= rho with an exact L1 penalty).

- Criteria (a) and (b), Σ (w F)² / S (:class:`ForceCost`): a convex quadratic programme with a diagonal cost,

      min_alpha  Σ_i d_i (alpha_i - c_i)²   s.t.  C alpha + k = 0,  0 <= alpha <= hi,
      d_i = (w_i span_i)² / S,  c_i = -Fp_i / span_i,

  solved exactly in its dual (:func:`solve_muscle_qp`).
- Criterion (c), Σ a² / S (:class:`ActivationCost`): each muscle's rest activation is a function of its own
  alpha alone, a_i(alpha_i) (the closed-form rest inversion, :func:`sim.das3.kernels.muscles.rest_activation_curve`),
  so the problem is separable and its dual theta(y) = y . k + Σ_i min_[0, hi_i] (a_i² / S + (C^T y)_i alpha_i)
  costs one 1-D minimisation per muscle (safeguarded Newton, :func:`minimise_each`). a_i² is convex in alpha_i
  except in narrow bands (a slack tendon turning taut, the force capped at the shortest fibre), where the 1-D
  minimiser returns a local minimum of its bracket. theta is maximised by projected Newton
  (:func:`ascent_direction`) with a line search on the directional derivative p . (C alpha(y + t p) + k),
  nonincreasing in t (:func:`solve_separable`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.das3.kernels.muscles import rest_activation_curve
from sim.das3.model import MUS_KIND, MUSCLE_THELEN2003, N_MUS
from sim.jit.kernel import kernel

SPECIFIC_TENSION_N_PER_CM2 = 100.0
"""Fmax = PCSA x 100 N/cm² in DAS3 (Chadwick et al. 2014, App. A)."""
QP_TOLERANCE = 1e-11
NEWTON_ITERATIONS = 40
"""Per-muscle Newton steps of criterion (c) (each halves the bracket at worst, 2^-40 of the span)."""
DUAL_TOLERANCE = 1e-11
LINE_SEARCH_ITERATIONS = 30


def active_range(span: np.ndarray) -> np.ndarray:
    """The muscles with an active range at a posture: span = Ff - Fp above 1e-9 of the largest (the rest model
    sets span 0 where full activation adds no force or the element is denervated)."""
    return span > 1e-9 * max(float(np.max(span)), 1e-300)


def force_weight(fmax: np.ndarray, key: str) -> np.ndarray:
    """w of criteria (a), Σ F², and (b), Σ (F/PCSA)², PCSA = Fmax / SPECIFIC_TENSION_N_PER_CM2."""
    return np.ones(np.size(fmax)) if key == "a" else SPECIFIC_TENSION_N_PER_CM2 / np.asarray(fmax, float)


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
        y, p = ascent_direction(C, 2 * d, (u > lo) & (u < hi), r, y, ylo, yhi)
        p = p / max(float(np.max(np.abs(p))), 1e-300)
        y = np.clip(y + _exact_step(C, k, d, u, lo, hi, y, p, ylo, yhi) * p, ylo, yhi)
    alpha = np.clip(c - (C.T @ y) / (2 * d), lo, hi)
    return MuscleQP(alpha, y, C @ alpha + k, max_iter)


def ascent_direction(C, curvature, inside, r, y, ylo, yhi):
    """(y snapped to its bounds, the projected Newton direction p of a dual with gradient r and generalised
    Hessian -C_F diag(1/curvature) C_F^T over the primal variables ``inside`` their bounds), the components at a
    bound whose gradient points out of the box held fixed."""
    width = np.asarray(yhi, float) - np.asarray(ylo, float)
    at_lo, at_hi = y <= ylo + 1e-12 * width, y >= yhi - 1e-12 * width
    y = np.where(at_lo, ylo, np.where(at_hi, yhi, y))
    fixed = (at_lo & (r < 0)) | (at_hi & (r > 0))
    p = np.zeros(y.size)
    for _ in range(y.size + 1):
        free = ~fixed
        Cf = C[free][:, inside]
        H = (Cf / curvature[inside]) @ Cf.T
        H[np.diag_indices_from(H)] += 1e-12 * max(float(np.trace(H)), 1e-300) + 1e-300
        p = np.zeros(y.size)
        p[free] = np.linalg.solve(H, r[free])
        if r @ p <= 0:                     # singular H: the projected gradient instead
            p = np.where(free, r, 0.0)
        blocked = (at_lo & (p < 0)) | (at_hi & (p > 0))
        if not blocked.any():
            break
        fixed |= blocked
    return y, p


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


class ForceCost:
    """Criteria (a) and (b), Σ (w F)² / S, for :class:`sim.analysis.reduced_static.ReducedProblem`: the muscles'
    QP at one posture (:meth:`prepare`, :meth:`solve`, module docstring) and the criterion's vector v = w F with
    its q-rows (:meth:`values`). ``cap`` (N, per muscle): F_i <= cap_i as the upper bound
    alpha_i <= (cap_i - Fp_i) / span_i (criterion (d)'s second stage)."""

    def __init__(self, weight: np.ndarray, scale: float, cap: np.ndarray | None = None) -> None:
        self.weight, self.scale, self.cap = np.asarray(weight, float), scale, cap

    def prepare(self, lengths, Fp, span, ok) -> None:
        """d_i, c_i and the bounds at a posture (passive rest forces Fp and spans in N; ``ok``: muscles with an
        active range)."""
        safe_span = np.where(ok, span, 1.0)
        self.d = np.where(ok, (self.weight * span) ** 2 / self.scale, 1.0)
        self.c = np.where(ok, -Fp / safe_span, 0.0)
        top = 1.0 if self.cap is None else np.clip((self.cap - Fp) / safe_span, 0.0, 1.0)
        self.hi = np.where(ok, top, 0.0)

    def solve(self, C, k, ylo, yhi, y0) -> MuscleQP:
        return solve_muscle_qp(C, k, self.d, self.c, np.zeros(self.d.size), self.hi, ylo, yhi, y0)

    def values(self, rows):
        """(v, dv/dq) of the criterion Σ v² from :class:`sim.analysis.rest_model.RestRows`."""
        return self.weight * rows.force, self.weight[:, None] * rows.J_force


@kernel
def _phi_slope(P, L, F, span, scale, g):
    """(phi', phi'', a) of phi(alpha) = a(alpha)² / S + g alpha at force F = Fp + alpha span."""
    a, da, dda = rest_activation_curve(P, L, F)
    return 2.0 * a * da * span / scale + g, 2.0 * (da * da + a * dda) * span * span / scale, a


@kernel
def _bracketed_root(P, L, Fp, span, scale, g, hi, x):
    """The root of phi' in (0, hi) where phi'(0) < 0 < phi'(hi), by Newton kept inside a shrinking bracket
    (bisection when a step leaves it), from x."""
    lo_b, hi_b = 0.0, hi
    for _ in range(NEWTON_ITERATIONS):
        slope, curve, _ = _phi_slope(P, L, Fp + x * span, span, scale, g)
        if slope < 0.0:
            lo_b = x
        elif slope > 0.0:
            hi_b = x
        else:
            return x
        step = x - slope / curve if curve > 0.0 else -1.0
        if not lo_b < step < hi_b:
            step = 0.5 * (lo_b + hi_b)
        if abs(step - x) <= 1e-15:
            return step
        x = step
    return x


@kernel
def minimise_each(A, L, Fp, span, hi, g, scale, x0, alpha, curvature, inside, act):
    """Per muscle: alpha_i = argmin over [0, hi_i] of a_i(alpha)² / S + g_i alpha (at the end whose slope points
    outward, else the bracketed root of the slope from x0_i), with phi_i'' (``curvature``), whether alpha_i is
    strictly inside (``inside``) and a_i (``act``), all in place."""
    for i in range(g.shape[0]):
        P = A.mus[i]
        x = 0.0
        inside[i] = False
        if hi[i] > 0.0 and _phi_slope(P, L[i], Fp[i], span[i], scale, g[i])[0] < 0.0:
            if _phi_slope(P, L[i], Fp[i] + hi[i] * span[i], span[i], scale, g[i])[0] <= 0.0:
                x = hi[i]
            else:
                inside[i] = True
                x = _bracketed_root(P, L[i], Fp[i], span[i], scale, g[i], hi[i], min(max(x0[i], 0.0), hi[i]))
        _, curvature[i], act[i] = _phi_slope(P, L[i], Fp[i] + x * span[i], span[i], scale, g[i])
        alpha[i] = x


def min_max_fractions(C, k, Fp, span, weight, hi, extra_row=None) -> np.ndarray | None:
    """alpha minimising max_i w_i F_i (F = Fp + alpha span) subject to C alpha + k = 0, 0 <= alpha <= hi and, if
    given, ``extra_row`` = (g, b): g . alpha <= b; one linear programme in (alpha, t) (HiGHS). None when it has no
    solution."""
    n = np.size(span)
    A_ub = np.hstack([np.diag(weight * span), -np.ones((n, 1))])
    b_ub = -weight * Fp
    if extra_row is not None:
        A_ub, b_ub = np.vstack([A_ub, np.append(extra_row[0], 0.0)]), np.append(b_ub, extra_row[1])
    cost = np.zeros(n + 1)
    cost[n] = 1.0
    from scipy.optimize import linprog  # imported where it is used: scipy.optimize is slow to import
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=np.hstack([C, np.zeros((C.shape[0], 1))]), b_eq=-k,
                  bounds=[(0.0, h) for h in hi] + [(None, None)], method="highs")
    return np.clip(res.x[:n], 0.0, hi) if res.status == 0 else None


def load_kernels(model) -> None:
    """Load (or compile) the kernels of criterion (c) once, e.g. before a benchmark times a solve."""
    ones, flags = np.ones(N_MUS), np.zeros(N_MUS, np.bool_)
    minimise_each(model.arrays, ones, ones, ones, 0 * ones, ones, 1.0, ones, ones.copy(), ones.copy(), flags,
                  ones.copy())


def das3_muscles_only(model) -> bool:
    """Whether every muscle is a DAS3 Hill element (the closed form of a(F) above is theirs)."""
    return not bool(np.any(np.asarray(model.arrays.mus)[:, MUS_KIND] == MUSCLE_THELEN2003))


@dataclass
class SeparableResult:
    alpha: np.ndarray
    y: np.ndarray                # row multipliers
    residual: np.ndarray         # C alpha + k
    iterations: int


class ActivationCost:
    """Criterion (c), Σ a² / S, for :class:`sim.analysis.reduced_static.ReducedProblem`: the muscles' problem at one posture
    (:meth:`prepare`, :meth:`solve`) and the criterion's vector, v = a, with its q-rows (:meth:`values`)."""

    def __init__(self, model, scale: float) -> None:
        self.A, self.scale = model.arrays, scale
        self.alpha = np.zeros(N_MUS)
        self._work = (np.empty(N_MUS), np.empty(N_MUS), np.empty(N_MUS, np.bool_), np.empty(N_MUS))

    def prepare(self, lengths, Fp, span, ok) -> None:
        """The posture's muscle lengths (m), passive rest forces and spans (N); ``ok``: muscles with an active range."""
        self.L, self.Fp, self.span = (np.ascontiguousarray(v, float) for v in (lengths, Fp, span))
        self.hi = np.where(ok, 1.0, 0.0)

    def minimisers(self, g: np.ndarray, x0: np.ndarray):
        """(alpha, phi'', inside) for the muscles' linear terms g = C^T y, Newton from x0 (:func:`minimise_each`)."""
        alpha, curvature, inside, act = (np.empty_like(w) for w in self._work)
        minimise_each(self.A, self.L, self.Fp, self.span, self.hi, np.ascontiguousarray(g, float), self.scale,
                      np.ascontiguousarray(x0, float), alpha, curvature, inside, act)
        return alpha, curvature, inside

    def solve(self, C, k, ylo, yhi, y0) -> SeparableResult:
        result = solve_separable(self, C, k, ylo, yhi, y0)
        self.alpha = result.alpha
        return result

    @staticmethod
    def values(rows):
        """(v, dv/dq) of the criterion Σ v² from :class:`sim.analysis.rest_model.RestRows`."""
        return rows.activation, rows.J_act


def solve_separable(cost: ActivationCost, C, k, ylo, yhi, y0=None, tol: float = DUAL_TOLERANCE,
                    max_iter: int = 100) -> SeparableResult:
    """max theta(y) over ylo <= y <= yhi (module docstring); stops when the projected gradient is below
    ``tol`` max(1, |k|)."""
    y = np.zeros(k.size) if y0 is None else np.clip(np.asarray(y0, float), ylo, yhi)
    limit = tol * max(1.0, float(np.max(np.abs(k))))
    alpha, curvature, inside = cost.minimisers(C.T @ y, cost.alpha)
    r = C @ alpha + k
    for it in range(max_iter):
        if np.max(np.abs(y - np.clip(y + r, ylo, yhi))) <= limit:
            return SeparableResult(alpha, y, r, it)
        y, p = ascent_direction(C, curvature, inside, r, y, ylo, yhi)
        t, (alpha, curvature, inside, r) = _line_search(cost, C, k, y, p, r, alpha, ylo, yhi)
        y = np.clip(y + t * p, ylo, yhi)
    return SeparableResult(alpha, y, r, max_iter)


def _line_search(cost: ActivationCost, C, k, y, p, r, alpha, ylo, yhi):
    """(t, (alpha, phi'', inside, residual) at y + t p): t = min(1, the dual box) if the directional derivative
    s(t) = p . (C alpha(y + t p) + k) is still >= 0 there, else its root by Illinois regula falsi."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t_box = float(np.min(np.where(p > 0, (yhi - y) / p, np.where(p < 0, (ylo - y) / p, np.inf))))

    def at(t):
        alpha_t, curvature, inside = cost.minimisers(C.T @ (y + t * p), alpha)
        r_t = C @ alpha_t + k
        return float(p @ r_t), (alpha_t, curvature, inside, r_t)

    t_b = min(1.0, t_box)
    s_b, state = at(t_b)
    if s_b >= 0:
        return t_b, state
    t_a, s_a, s0, side = 0.0, float(p @ r), float(p @ r), 0
    for _ in range(LINE_SEARCH_ITERATIONS):
        t = (t_a * s_b - t_b * s_a) / (s_b - s_a)
        s_t, state = at(t)
        if abs(s_t) <= 1e-3 * s0 or t_b - t_a < 1e-14:
            return t, state
        if s_t > 0:
            t_a, s_a, s_b, side = t, s_t, s_b * (0.5 if side == 1 else 1.0), 1
        else:
            t_b, s_b, s_a, side = t, s_t, s_a * (0.5 if side == -1 else 1.0), -1
    return t, state
