"""Characteristic curves of a muscle-torque-generator (MTG) of Millard, Emonds, Harant & Mombaur (2019), "A reduced
muscle model and planar musculoskeletal model fit for the simulation of whole-body movements", J. Biomech. 89,
11-20 (``shared/papers/millard2019-reduced-muscle-mtg-fitting.txt``).

Torque of one MTG, Eq. (3), along its own direction u (u = +1 or -1 in joint coordinates, Eq. (7)):

    tau = s_tau tau_o (a tA(theta; sA, lamA) tV(omega; sV, lamV) + tPE(theta; dP, lamP) (1 - beta omega/(sV omega_max)))

with the fitting transforms of the nominal curves tA, tV, tPE:

    Eq. (4)  tA(theta; sA, lamA) = lamA + (1 - lamA) tA((theta - theta_o)/sA + theta_o)
    Eq. (5)  tV(omega; sV, lamV) = lamV + (1 - lamV) tV(omega/sV)
    Eq. (6)  tPE(theta; dP, lamP) = (1 - lamP) tPE(theta - dP)

lam -> 1 flattens tA and tV to the line 1 and tPE to 0 (Fig. 1A-B); the paper sets lamA = lamV = eps^(1/4) so that
Eq. (3) can always be solved for a (Sect. 2.2), the default here.

Signs: theta is the joint angle in the joint's own convention (Table A.2 gives each MTG's angles in it; tPE rises
from theta_0^PE towards theta_1^PE, i.e. against the MTG's direction). omega is the concentric-positive angular
velocity, omega = u dtheta/dt: tV falls to 0 at +omega_max (shortening) and rises to tV(omega_max^E) on the
eccentric side, and the damping factor 1 - beta omega/(sV omega_max) then raises the passive torque while the MTG is
stretched and lowers it while it shortens, which is what a damper suppressing vibration must do. SI units: rad,
rad/s, N m; the curves are normalised (N m/N m).

The curves are C2 piecewise quintic Bezier curves (Sect. 2, Appendix A), linear beyond their ends. The paper
names what each curve follows (Appendix A) but not how its control points are placed (it refers to its RBDL
implementation); the construction here is this module's own, from two segment types:

- a Hermite segment: x control points equally spaced, y control points from value, slope and curvature at both
  ends (``hermite_segment``); adjacent Hermite segments sharing a knot's data join C2;
- a corner segment: two end points with slopes, P1, P2 on the start tangent and P3, P4 on the end tangent
  towards their intersection, so the curvature at both ends is zero (``corner_segment``); the curve stays
  inside the triangle of the end points and the tangent intersection.

Choices where the paper gives a shape but no construction (each documented at its builder): the tA tails are
brought to zero value, slope and curvature at 3.5 standard deviations; omega_max^E = -omega_max; the tV curve's
curvature at omega = 0 is zero (the eccentric side is a corner segment); the tPE curve's stiffness at theta_1^PE
and curviness.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.jit.kernel import kernel

LAMBDA_SOLVABLE = float(np.finfo(np.float64).eps) ** 0.25
"""lamA = lamV = eps^(1/4): Eq. (3) stays solvable for a without a numerical singularity (Sect. 2.2)."""

GAUSS_KNOT_STEP = 0.5
"""Spacing, in standard deviations, of the knots at which tA takes the Gaussian's value, slope and curvature."""
GAUSS_LAST_KNOT = 2.5
"""Last knot (standard deviations) on the Gaussian."""
GAUSS_ZERO_AT = 3.5
"""Standard deviations at which tA reaches zero value, slope and curvature (the paper's Gaussian never does)."""

HILL_FIT_END = 0.9
"""tV follows Hill's hyperbola on 0 <= omega <= 0.9 omega_max and reaches zero value and slope at omega_max
(Appendix A)."""
HILL_KNOTS = 6
"""Hermite segments on the hyperbola; knots geometric in (v + c), the hyperbola's own scale."""
HILL_FIRST_KNOT = 0.25
"""An extra knot at this fraction of the first geometric step confines the departure from the hyperbola that the
zero curvature at v = 0 causes."""
ECCENTRIC_CURVINESS = 0.9
"""Corner-segment curviness of the eccentric side of tV (0: straight line, 1: sharp corner). Hill's slope at
omega = 0 is steep and the rise to tV(omega_max^E) small, so the eccentric side must bend sharply near omega = 0
whatever the construction; a high curviness places the bend where the isometric tangent meets tV(omega_max^E)
instead of crowding it against omega = 0, which lowers the peak curvature."""
PASSIVE_STIFFNESS = 3.0
"""Slope of tPE at theta_1^PE, per (theta_1^PE - theta_0^PE); the paper gives no value (Appendix A only names an
exponential shape through (theta_0, 0) and (theta_1, 1)): this module's choice."""
PASSIVE_CURVINESS = 0.67
"""Corner-segment curviness of tPE: the one that best follows (exp(k x) - 1 - k x)/(exp(k) - 1 - k), x from 0 at
theta_0^PE to 1 at theta_1^PE, the flat-started exponential with the same slope at x = 1."""


# --- Bezier kernels --------------------------------------------------------------------------------------------


@kernel
def bezier5(p, k, u):
    """(B, dB/du, d2B/du2) of the quintic Bezier with control points p[k, 0:6] at u in [0, 1] (Bernstein form)."""
    v = 1.0 - u
    p0, p1, p2, p3, p4, p5 = p[k, 0], p[k, 1], p[k, 2], p[k, 3], p[k, 4], p[k, 5]
    uu, vv = u * u, v * v
    b = vv * vv * v * p0 + 5.0 * u * vv * vv * p1 + 10.0 * uu * vv * v * p2 + 10.0 * uu * u * vv * p3 \
        + 5.0 * uu * uu * v * p4 + uu * uu * u * p5
    db = 5.0 * (vv * vv * (p1 - p0) + 4.0 * u * vv * v * (p2 - p1) + 6.0 * uu * vv * (p3 - p2)
                + 4.0 * uu * u * v * (p4 - p3) + uu * uu * (p5 - p4))
    ddb = 20.0 * (vv * v * (p2 - 2.0 * p1 + p0) + 3.0 * u * vv * (p3 - 2.0 * p2 + p1)
                  + 3.0 * uu * v * (p4 - 2.0 * p3 + p2) + uu * u * (p5 - 2.0 * p4 + p3))
    return b, db, ddb


@kernel
def solve_u(xs, k, x):
    """u in [0, 1] with x(u) = x on segment k, x(u) increasing: Newton, falling back to bisection whenever the
    Newton step leaves the bracket that every iterate narrows."""
    x0, x5 = xs[k, 0], xs[k, 5]
    tol = 1e-14 * (x5 - x0) + 4e-16 * max(abs(x0), abs(x5))
    lo, hi = 0.0, 1.0
    u = (x - x0) / (x5 - x0)
    if u <= 0.0 or u >= 1.0:
        u = 0.5
    for _ in range(100):
        f, df, _ = bezier5(xs, k, u)
        f -= x
        if abs(f) <= tol:
            return u
        if f < 0.0:
            lo = u
        else:
            hi = u
        if hi - lo <= 1e-16:
            return u
        step_ok = False
        if df > 0.0:
            un = u - f / df
            step_ok = lo < un < hi
        u = un if step_ok else 0.5 * (lo + hi)
    return u


@kernel
def curve_eval(xs, ys, x):
    """(y, dy/dx, d2y/dx2) of the piecewise quintic Bezier curve with control points xs, ys (segments in
    increasing x, one row each); linear beyond its ends with the end value and slope (end curvature is zero)."""
    if x != x:
        return math.nan, math.nan, math.nan
    n = xs.shape[0]
    if x <= xs[0, 0] or x >= xs[n - 1, 5]:
        k, u = (0, 0.0) if x <= xs[0, 0] else (n - 1, 1.0)
        xe, dx, _ = bezier5(xs, k, u)
        ye, dy, _ = bezier5(ys, k, u)
        slope = dy / dx
        return ye + slope * (x - xe), slope, 0.0
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if xs[mid, 0] <= x:
            lo = mid
        else:
            hi = mid - 1
    u = solve_u(xs, lo, x)
    _, dx, ddx = bezier5(xs, lo, u)
    y, dy, ddy = bezier5(ys, lo, u)
    slope = dy / dx
    return y, slope, (ddy - slope * ddx) / (dx * dx)


# --- Eqs. (3)-(6) ------------------------------------------------------------------------------------------------


@kernel
def scaled_active(f, df, ddf, s_a, lambda_a):
    """Eq. (4) from the nominal tA's (value, slope, curvature) at (theta - theta_o)/sA + theta_o."""
    g = 1.0 - lambda_a
    return lambda_a + g * f, g * df / s_a, g * ddf / (s_a * s_a)


@kernel
def scaled_velocity(f, df, ddf, s_v, lambda_v):
    """Eq. (5) from the nominal tV's (value, slope, curvature) at omega/sV."""
    g = 1.0 - lambda_v
    return lambda_v + g * f, g * df / s_v, g * ddf / (s_v * s_v)


@kernel
def scaled_passive(f, df, ddf, lambda_p):
    """Eq. (6) from the nominal tPE's (value, slope, curvature) at theta - dP."""
    g = 1.0 - lambda_p
    return g * f, g * df, g * ddf


@kernel
def active_torque_angle(xs, ys, theta, theta_opt, s_a, lambda_a):
    """Eq. (4): (tA, dtA/dtheta, d2tA/dtheta2) = lamA + (1 - lamA) tA((theta - theta_o)/sA + theta_o)."""
    f, df, ddf = curve_eval(xs, ys, (theta - theta_opt) / s_a + theta_opt)
    return scaled_active(f, df, ddf, s_a, lambda_a)


@kernel
def torque_velocity(xs, ys, omega, s_v, lambda_v):
    """Eq. (5): (tV, dtV/domega, d2tV/domega2) = lamV + (1 - lamV) tV(omega/sV)."""
    f, df, ddf = curve_eval(xs, ys, omega / s_v)
    return scaled_velocity(f, df, ddf, s_v, lambda_v)


@kernel
def passive_torque_angle(xs, ys, theta, delta_p, lambda_p):
    """Eq. (6): (tPE, dtPE/dtheta, d2tPE/dtheta2) = (1 - lamP) tPE(theta - dP)."""
    f, df, ddf = curve_eval(xs, ys, theta - delta_p)
    return scaled_passive(f, df, ddf, lambda_p)


@kernel
def combined_torque(a, omega, ta, dta, tv, dtv, tp, dtp, omega_max, tau_max, beta, s_v, s_tau):
    """Eq. (3) from the scaled curves' values and slopes: (tau, dtau/dtheta, dtau/domega, dtau/da)."""
    rate = beta / (s_v * omega_max)
    damp = 1.0 - rate * omega
    scale = s_tau * tau_max
    return (scale * (a * ta * tv + tp * damp), scale * (a * dta * tv + dtp * damp),
            scale * (a * ta * dtv - tp * rate), scale * ta * tv)


@kernel
def mtg_torque(a, theta, omega, a_xs, a_ys, v_xs, v_ys, p_xs, p_ys, theta_opt, omega_max, tau_max, beta,
               s_a, s_v, delta_p, lambda_a, lambda_v, lambda_p, s_tau):
    """Eq. (3): (tau, dtau/dtheta, dtau/domega, dtau/da), tau along the MTG's direction (N m)."""
    ta, dta, _ = active_torque_angle(a_xs, a_ys, theta, theta_opt, s_a, lambda_a)
    tv, dtv, _ = torque_velocity(v_xs, v_ys, omega, s_v, lambda_v)
    tp, dtp, _ = passive_torque_angle(p_xs, p_ys, theta, delta_p, lambda_p)
    return combined_torque(a, omega, ta, dta, tv, dtv, tp, dtp, omega_max, tau_max, beta, s_v, s_tau)


# --- Segment construction (offline) ------------------------------------------------------------------------------


def hermite_segment(x0: float, y0: float, d0: float, k0: float, x1: float, y1: float, d1: float, k1: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Control points (x, y) of the quintic with value y, slope d and curvature k at x0 and x1: x equally spaced
    makes x(u) = x0 + h u, so y'(0) = 5 (y1 - y0) = h d0 and y''(0) = 20 (y2 - 2 y1 + y0) = h^2 k0 (and the mirror
    at u = 1) fix the inner points."""
    if not x1 > x0:
        raise ValueError("a segment needs x1 > x0")
    h = x1 - x0
    xs = x0 + h * np.arange(6) / 5.0
    xs[0], xs[5] = x0, x1
    ys = np.array([y0, y0 + h * d0 / 5.0, y0 + 2.0 * h * d0 / 5.0 + h * h * k0 / 20.0,
                   y1 - 2.0 * h * d1 / 5.0 + h * h * k1 / 20.0, y1 - h * d1 / 5.0, y1])
    return xs, ys


def corner_segment(x0: float, y0: float, d0: float, x1: float, y1: float, d1: float, curviness: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Control points of the quintic from (x0, y0) with slope d0 to (x1, y1) with slope d1 and zero curvature at
    both ends: with C the intersection of the end tangents, P2 = P0 + c (C - P0), P1 = (P0 + P2)/2,
    P3 = P5 + c (C - P5), P4 = (P3 + P5)/2. P0, P1, P2 collinear make B''(0) parallel to B'(0), so
    d2y/dx2 = (x' y'' - y' x'')/x'^3 = 0 there (the midpoint even makes B''(0) = 0); likewise at u = 1.
    0 < c < 1 keeps x(u) strictly increasing."""
    if not 0.0 < curviness < 1.0:
        raise ValueError("curviness must lie in (0, 1)")
    if not x1 > x0 or d0 == d1:
        raise ValueError("a corner segment needs x1 > x0 and two different end slopes")
    xc = (y1 - y0 - d1 * x1 + d0 * x0) / (d0 - d1)
    if not x0 < xc < x1:
        raise ValueError("the end tangents of a corner segment must meet between its ends")
    yc = y0 + d0 * (xc - x0) if abs(d0) <= abs(d1) else y1 + d1 * (xc - x1)   # exact on a flat tangent
    p0, p5, c = np.array([x0, y0]), np.array([x1, y1]), np.array([xc, yc])
    p2 = p0 + curviness * (c - p0)
    p3 = p5 + curviness * (c - p5)
    pts = np.array([p0, 0.5 * (p0 + p2), p2, p3, 0.5 * (p3 + p5), p5])
    return pts[:, 0].copy(), pts[:, 1].copy()


@dataclass(frozen=True, eq=False)
class BezierCurve:
    """A C2 piecewise quintic Bezier curve y(x): one row of six control points per segment, segments contiguous
    and increasing in x; read-only."""

    xs: np.ndarray
    ys: np.ndarray

    def __post_init__(self):
        xs = np.array(self.xs, dtype=np.float64, order="C", ndmin=2)
        ys = np.array(self.ys, dtype=np.float64, order="C", ndmin=2)
        if xs.shape != ys.shape or xs.shape[1] != 6 or xs.shape[0] < 1:
            raise ValueError("control points must be two (n, 6) arrays")
        if not (np.all(np.isfinite(xs)) and np.all(np.isfinite(ys))):
            raise ValueError("control points must be finite")
        if np.any(np.diff(xs, axis=1) < 0.0) or np.any(xs[:, 5] <= xs[:, 0]) or np.any(xs[:, 1] <= xs[:, 0]) \
                or np.any(xs[:, 5] <= xs[:, 4]):
            raise ValueError("x control points must increase within each segment (x(u) strictly increasing)")
        if xs.shape[0] > 1 and not (np.array_equal(xs[1:, 0], xs[:-1, 5]) and np.array_equal(ys[1:, 0], ys[:-1, 5])):
            raise ValueError("segments must be contiguous")
        xs.flags.writeable = False
        ys.flags.writeable = False
        object.__setattr__(self, "xs", xs)
        object.__setattr__(self, "ys", ys)

    @classmethod
    def from_segments(cls, segments: list[tuple[np.ndarray, np.ndarray]]) -> BezierCurve:
        return cls(np.array([s[0] for s in segments]), np.array([s[1] for s in segments]))

    @property
    def domain(self) -> tuple[float, float]:
        return float(self.xs[0, 0]), float(self.xs[-1, 5])

    @property
    def knots(self) -> np.ndarray:
        """The segment joins, ends included."""
        return np.append(self.xs[:, 0], self.xs[-1, 5])

    def __call__(self, x: float) -> tuple[float, float, float]:
        """(y, dy/dx, d2y/dx2)."""
        return curve_eval(self.xs, self.ys, float(x))


def _finite_positive(name: str, value: float):
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be finite and > 0, got {value}")


# --- The paper's three curves (Appendix A) -----------------------------------------------------------------------


@dataclass(frozen=True)
class ActiveTorqueAngle:
    """tA: a Gaussian centred on theta_o^A with standard deviation theta_w^A (Appendix A, after Jackson 2010),
    peak 1 at theta_o^A. Table A.2 columns theta_o^A, theta_w^A, in rad."""

    theta_opt: float
    theta_width: float

    def __post_init__(self):
        if not math.isfinite(self.theta_opt):
            raise ValueError("theta_opt must be finite")
        _finite_positive("theta_width", self.theta_width)

    def gaussian(self, theta: float) -> tuple[float, float, float]:
        """exp(-z^2/2), z = (theta - theta_o)/theta_w, with its first and second derivatives."""
        w = self.theta_width
        z = (theta - self.theta_opt) / w
        g = math.exp(-0.5 * z * z)
        return g, -z * g / w, (z * z - 1.0) * g / (w * w)

    def curve(self) -> BezierCurve:
        """Hermite segments on the Gaussian's value, slope and curvature at knots every 0.5 theta_w out to
        2.5 theta_w, then one Hermite segment each side to zero value, slope and curvature at 3.5 theta_w
        (convex-hull: no control point below zero, so tA >= 0); zero beyond."""
        w, t0 = self.theta_width, self.theta_opt
        n = round(GAUSS_LAST_KNOT / GAUSS_KNOT_STEP)
        z = GAUSS_KNOT_STEP * np.arange(-n, n + 1)
        knots = [(t0 - GAUSS_ZERO_AT * w, 0.0, 0.0, 0.0)]
        knots += [(t0 + zk * w, *self.gaussian(t0 + zk * w)) for zk in z]
        knots.append((t0 + GAUSS_ZERO_AT * w, 0.0, 0.0, 0.0))
        return BezierCurve.from_segments([hermite_segment(*a, *b) for a, b in zip(knots[:-1], knots[1:])])


@dataclass(frozen=True)
class TorqueVelocity:
    """tV(omega), omega concentric-positive (rad/s). Table A.2 columns omega_max^M, tV(omega_max^E) and
    tV(omega_max^C/2) (Appendix A)."""

    omega_max: float
    tv_eccentric: float
    tv_half_concentric: float
    eccentric_curviness: float = ECCENTRIC_CURVINESS

    def __post_init__(self):
        _finite_positive("omega_max", self.omega_max)
        if not (math.isfinite(self.tv_eccentric) and self.tv_eccentric > 1.0):
            raise ValueError("tv_eccentric must exceed 1 (eccentric torque above isometric)")
        if not 0.0 < self.tv_half_concentric < 0.5:
            raise ValueError("a Hill hyperbola through (1/2, tV) needs 0 < tV < 1/2")
        if not 0.0 < self.eccentric_curviness < 1.0:
            raise ValueError("eccentric_curviness must lie in (0, 1)")

    @property
    def hill_c(self) -> float:
        """c of Hill's hyperbola (f + c)(v + c) = c (1 + c), v = omega/omega_max, i.e. f = (1 - v)/(1 + v/c),
        f(0) = 1, f(1) = 0, through (1/2, tV(omega_max^C/2)) (Appendix A): c = t/2 / (1/2 - t)."""
        t = self.tv_half_concentric
        return 0.5 * t / (0.5 - t)

    def hill(self, v: float) -> tuple[float, float, float]:
        """Hill's hyperbola in v = omega/omega_max and its first two derivatives w.r.t. v."""
        c = self.hill_c
        q = 1.0 + v / c
        return (1.0 - v) / q, -(1.0 + 1.0 / c) / (q * q), 2.0 * (1.0 + 1.0 / c) / (c * q ** 3)

    def curve(self) -> BezierCurve:
        """Built in v = omega/omega_max, then x scaled by omega_max (y(x) scales affinely with its control points):

        - eccentric, v in [-1, 0]: a corner segment from (-1, tV(omega_max^E)) with slope 0 (Appendix A; the
          paper's eccentric maximum is taken as -omega_max) to (0, 1) with the hyperbola's slope;
        - concentric, v in [0, 0.9]: Hermite segments on the hyperbola's value, slope and curvature at knots
          geometric in v + c (one more at a quarter of the first step), except zero curvature at v = 0 to join
          the corner segment C2;
        - v in [0.9, 1]: a Hermite segment to zero value, slope and curvature at v = 1; zero beyond.
        """
        c = self.hill_c
        f0, d0, _ = self.hill(0.0)
        segs = [corner_segment(-1.0, self.tv_eccentric, 0.0, 0.0, f0, d0, self.eccentric_curviness)]
        v = c * ((HILL_FIT_END + c) / c) ** (np.arange(HILL_KNOTS + 1) / HILL_KNOTS) - c
        v[0], v[-1] = 0.0, HILL_FIT_END
        v = np.insert(v, 1, HILL_FIRST_KNOT * v[1])
        knots = [(0.0, f0, d0, 0.0)] + [(vk, *self.hill(vk)) for vk in v[1:]] + [(1.0, 0.0, 0.0, 0.0)]
        segs += [hermite_segment(*a, *b) for a, b in zip(knots[:-1], knots[1:])]
        return BezierCurve.from_segments([(xs * self.omega_max, ys) for xs, ys in segs])


@dataclass(frozen=True)
class PassiveTorqueAngle:
    """tPE: zero up to theta_0^PE, 1 at theta_1^PE (Appendix A: through (theta_0^PE, 0) and (theta_1^PE, tau_o),
    normalised), exponential-like in between, linear beyond theta_1^PE; rises towards theta_1^PE, which may lie
    on either side of theta_0^PE. Table A.2 columns theta_0^PE, theta_1^PE, in rad."""

    theta_zero: float
    theta_one: float
    stiffness: float = PASSIVE_STIFFNESS
    curviness: float = PASSIVE_CURVINESS

    def __post_init__(self):
        if not (math.isfinite(self.theta_zero) and math.isfinite(self.theta_one)) or self.theta_zero == self.theta_one:
            raise ValueError("theta_zero and theta_one must be finite and different")
        if not (math.isfinite(self.stiffness) and self.stiffness > 1.0):
            raise ValueError("stiffness must exceed 1 (the end tangent must meet the zero line between the angles)")
        if not 0.0 < self.curviness < 1.0:
            raise ValueError("curviness must lie in (0, 1)")

    def curve(self) -> BezierCurve:
        """One corner segment from (theta_0, 0) with slope 0 to (theta_1, 1) with slope
        stiffness/(theta_1 - theta_0); its zero end curvatures join the zero and linear extensions C2."""
        t0, t1 = self.theta_zero, self.theta_one
        slope = self.stiffness / (t1 - t0)
        if t1 > t0:
            seg = corner_segment(t0, 0.0, 0.0, t1, 1.0, slope, self.curviness)
        else:
            seg = corner_segment(t1, 1.0, slope, t0, 0.0, 0.0, self.curviness)
        return BezierCurve.from_segments([seg])


@dataclass(frozen=True)
class FitParameters:
    """p of Eq. (3): the QP's x = (sA, sV, dP, lamP, s_tau), default x_o = (1, 1, 0, 0, 1) (Sect. 2.2), and
    lamA, lamV (default eps^(1/4), Sect. 2.2). dP in rad."""

    s_a: float = 1.0
    s_v: float = 1.0
    delta_p: float = 0.0
    lambda_p: float = 0.0
    s_tau: float = 1.0
    lambda_a: float = LAMBDA_SOLVABLE
    lambda_v: float = LAMBDA_SOLVABLE

    def __post_init__(self):
        for name in ("s_a", "s_v", "s_tau"):
            _finite_positive(name, getattr(self, name))
        if not math.isfinite(self.delta_p):
            raise ValueError("delta_p must be finite")
        for name in ("lambda_a", "lambda_v", "lambda_p"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1]")


@dataclass(frozen=True, eq=False)
class MtgCurves:
    """One MTG's curves and Eq. (3). tau_max = tau_o^M (N m), beta = beta^PE (the paper gives no value)."""

    tau_max: float
    active: ActiveTorqueAngle
    velocity: TorqueVelocity
    passive: PassiveTorqueAngle
    beta: float
    a_curve: BezierCurve = field(init=False, repr=False)
    v_curve: BezierCurve = field(init=False, repr=False)
    p_curve: BezierCurve = field(init=False, repr=False)

    def __post_init__(self):
        _finite_positive("tau_max", self.tau_max)
        if not (math.isfinite(self.beta) and self.beta >= 0.0):
            raise ValueError("beta must be finite and >= 0")
        object.__setattr__(self, "a_curve", self.active.curve())
        object.__setattr__(self, "v_curve", self.velocity.curve())
        object.__setattr__(self, "p_curve", self.passive.curve())

    def t_a(self, theta: float, fit: FitParameters = FitParameters()) -> tuple[float, float, float]:
        return active_torque_angle(self.a_curve.xs, self.a_curve.ys, float(theta), self.active.theta_opt,
                                   fit.s_a, fit.lambda_a)

    def t_v(self, omega: float, fit: FitParameters = FitParameters()) -> tuple[float, float, float]:
        return torque_velocity(self.v_curve.xs, self.v_curve.ys, float(omega), fit.s_v, fit.lambda_v)

    def t_pe(self, theta: float, fit: FitParameters = FitParameters()) -> tuple[float, float, float]:
        return passive_torque_angle(self.p_curve.xs, self.p_curve.ys, float(theta), fit.delta_p, fit.lambda_p)

    def torque(self, a: float, theta: float, omega: float, fit: FitParameters = FitParameters()
               ) -> tuple[float, float, float, float]:
        """Eq. (3): (tau, dtau/dtheta, dtau/domega, dtau/da)."""
        return mtg_torque(float(a), float(theta), float(omega), self.a_curve.xs, self.a_curve.ys,
                          self.v_curve.xs, self.v_curve.ys, self.p_curve.xs, self.p_curve.ys,
                          self.active.theta_opt, self.velocity.omega_max, self.tau_max, self.beta,
                          fit.s_a, fit.s_v, fit.delta_p, fit.lambda_a, fit.lambda_v, fit.lambda_p, fit.s_tau)
