"""The MTG curves as the step evaluates them: each piecewise quintic Bezier curve (:mod:`sim.mtg.curves`) as a table
of quintic polynomials in x, so an evaluation is a search among the intervals' starts and one polynomial instead of
a Newton solve for the Bezier parameter.

On interval i (from x_i, width h_i), t = (x - x_i) / h_i in [0, 1] and

    y = c0 + c1 t + c2 t^2 + c3 t^3 + c4 t^4 + c5 t^5,

the quintic Hermite interpolant of the curve's value, slope and curvature at both ends of the interval (taken from
the Bezier segment itself). Where a segment's x control points are equally spaced (every Hermite segment of
:mod:`sim.mtg.curves`) x is linear in the Bezier parameter, y is a quintic in x, and one interval reproduces the
segment exactly. A corner segment (x not linear in the parameter) is cut at :data:`CORNER_INTERVALS` equal steps of
its parameter, which crowd the intervals where it bends; the interpolation error falls as h^6 (value) and h^5
(slope), and tests/sim/test_mtg_curve_table.py bounds it against the Bezier curve. Beyond its ends the curve is
linear with the end value and slope, as the Bezier curve is.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from sim.jit.kernel import kernel
from sim.mtg.curves import bezier5, combined_torque, scaled_active, scaled_passive, scaled_velocity

CORNER_INTERVALS = 128
"""Intervals of a corner segment, at equal steps of its Bezier parameter (tests/sim/test_mtg_curve_table.py bounds
the error against the Bezier curve; it falls as h^6 for the value and h^5 for the slope)."""
LINEAR_X_RTOL = 1e-12
"""A segment whose x control points are equally spaced to this relative tolerance has x linear in its parameter."""
HERMITE_TAIL = np.linalg.inv(np.array([[1.0, 1.0, 1.0], [3.0, 4.0, 5.0], [6.0, 12.0, 20.0]]))
"""(c3, c4, c5) from the end conditions y(1), y'(1), y''(1) left after c0..c2 (the quintic Hermite interpolant)."""


class CurveTable(NamedTuple):
    """One curve as intervals: their start x, their width h and the c0..c5 of each."""

    start: np.ndarray   # (N,)
    width: np.ndarray   # (N,)
    coef: np.ndarray    # (N, 6)


def _segment_point(xs, ys, k: int, u: float) -> tuple[float, tuple[float, float, float]]:
    """(x, (y, dy/dx, d2y/dx2)) of Bezier segment k at its parameter u."""
    x, dx, ddx = bezier5(xs, k, u)
    y, dy, ddy = bezier5(ys, k, u)
    slope = dy / dx
    return x, (y, slope, (ddy - slope * ddx) / (dx * dx))


def _hermite(left, right, h: float) -> np.ndarray:
    """c0..c5 in t = (x - x_left) / h of the quintic with the (value, slope, curvature) ``left`` and ``right``."""
    (y0, d0, k0), (y1, d1, k1) = left, right
    c0, c1, c2 = y0, d0 * h, 0.5 * k0 * h * h
    tail = HERMITE_TAIL @ np.array([y1 - c0 - c1 - c2, d1 * h - c1 - 2.0 * c2, k1 * h * h - 2.0 * c2])
    return np.array([c0, c1, c2, *tail])


def tabulate(xs: np.ndarray, ys: np.ndarray, corner_intervals: int = CORNER_INTERVALS) -> CurveTable:
    """The table of the curve with control points ``xs``, ``ys`` (segments in increasing x, one row each): one
    interval per segment with x linear in its parameter, ``corner_intervals`` at equal steps of the parameter on any
    other (they crowd where the curve bends)."""
    start, width, coef = [], [], []
    for k in range(xs.shape[0]):
        x0, x1 = float(xs[k, 0]), float(xs[k, 5])
        linear = np.allclose(np.diff(xs[k]), (x1 - x0) / 5.0, rtol=LINEAR_X_RTOL, atol=0.0)
        n = 1 if linear else corner_intervals
        points = [_segment_point(xs, ys, k, i / n) for i in range(n + 1)]
        knots = [x0] + [x for x, _ in points[1:-1]] + [x1]
        for i in range(n):
            h = knots[i + 1] - knots[i]
            start.append(knots[i])
            width.append(h)
            coef.append(_hermite(points[i][1], points[i + 1][1], h))
    return CurveTable(np.array(start), np.array(width), np.array(coef))


def stack_tables(tables: list[list[CurveTable]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start (n, C, N), width (n, C, N), coef (n, C, N, 6), intervals (n, C)) of the C curves of n MTGs, padded to
    the most intervals N."""
    n, n_curves = len(tables), len(tables[0])
    N = max(t.start.shape[0] for row in tables for t in row)
    start = np.full((n, n_curves, N), math.inf)
    width = np.ones((n, n_curves, N))
    coef = np.zeros((n, n_curves, N, 6))
    count = np.zeros((n, n_curves), dtype=np.int64)
    for m, row in enumerate(tables):
        for c, t in enumerate(row):
            k = t.start.shape[0]
            start[m, c, :k], width[m, c, :k], coef[m, c, :k], count[m, c] = t.start, t.width, t.coef, k
    return start, width, coef, count


@kernel
def _poly(c, t):
    """(y, dy/dt) of c0 + c1 t + ... + c5 t^5 (Horner)."""
    y = c[0] + t * (c[1] + t * (c[2] + t * (c[3] + t * (c[4] + t * c[5]))))
    dy = c[1] + t * (2.0 * c[2] + t * (3.0 * c[3] + t * (4.0 * c[4] + t * 5.0 * c[5])))
    return y, dy


@kernel
def table_eval(start, width, coef, n, x):
    """(y, dy/dx) of a tabled curve of ``n`` intervals at x; linear beyond its ends."""
    if x != x:
        return math.nan, math.nan
    if x <= start[0]:
        y, dy = _poly(coef[0], 0.0)
        slope = dy / width[0]
        return y + slope * (x - start[0]), slope
    lo, hi = 0, n - 1                  # the last interval starting at or below x
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if start[mid] <= x:
            lo = mid
        else:
            hi = mid - 1
    t = (x - start[lo]) / width[lo]
    if t > 1.0:                        # beyond the last interval's end
        y, dy = _poly(coef[lo], 1.0)
        slope = dy / width[lo]
        return y + slope * (x - start[lo] - width[lo]), slope
    y, dy = _poly(coef[lo], t)
    return y, dy / width[lo]


ACTIVE, VELOCITY, PASSIVE = range(3)
"""The curve rows of an MTG's tables (:func:`stack_tables` of [tA, tV, tPE])."""


@kernel
def tabled_torque(start, width, coef, count, m, a, theta, omega, const, fit):
    """Eq. (3) of MTG m (:func:`sim.mtg.curves.mtg_torque`) with its tabled curves: (tau, dtau/dtheta,
    dtau/domega, dtau/da); ``const`` = (theta_o, omega_max, tau_max, beta), ``fit`` = (sA, sV, dP, lamA, lamV, lamP,
    s_tau)."""
    s_a, s_v = fit[0], fit[1]
    f, df = table_eval(start[m, ACTIVE], width[m, ACTIVE], coef[m, ACTIVE], count[m, ACTIVE],
                       (theta - const[0]) / s_a + const[0])
    ta, dta, _ = scaled_active(f, df, 0.0, s_a, fit[3])
    f, df = table_eval(start[m, VELOCITY], width[m, VELOCITY], coef[m, VELOCITY], count[m, VELOCITY], omega / s_v)
    tv, dtv, _ = scaled_velocity(f, df, 0.0, s_v, fit[4])
    f, df = table_eval(start[m, PASSIVE], width[m, PASSIVE], coef[m, PASSIVE], count[m, PASSIVE], theta - fit[2])
    tp, dtp, _ = scaled_passive(f, df, 0.0, fit[5])
    return combined_torque(a, omega, ta, dta, tv, dtv, tp, dtp, const[1], const[2], const[3], s_v, fit[6])
