"""MTG characteristic curves (sim/mtg/curves.py) against Millard et al. (2019), Eqs. (3)-(6) and Appendix A,
a Bernstein sum written out here, hand-computed control points and finite differences."""
import dataclasses
import math

import numpy as np
import pytest
from numpy.polynomial import Polynomial
from scipy.optimize import brentq

from sim.mtg import curves as mc

# Table A.2: tau_o (N m), theta_o^A, theta_w^A (deg), omega_max (deg/s), tV(omega_max^E), tV(omega_max^C/2),
# theta_0^PE, theta_1^PE (deg)
TABLE_A2 = {
    "hip ext": (176, -61, 61, 517, 1.10, 0.16, -45, -90),
    "hip flex": (157, -42, 70, 526, 1.12, 0.25, 5, 30),
    "knee ext": (286, -54, 29, 1101, 1.13, 0.12, -115, -155),
    "knee flex": (99, -59, 64, 953, 1.12, 0.20, 0, 10),
    "ankle p.flex": (128, -23, 38, 674, 1.16, 0.41, -2, -45),
    "ankle d.flex": (44, 11, 35, 990, 1.27, 0.11, 30, 60),
    "lumbar ext": (688, -89, 66, 458, 1.10, 0.15, -18, -78),
    "lumbar flex": (212, 0, 360, 1102, 1.10, 0.15, 0, 45),
    "shoulder ext": (127, -123, 105, 931, 1.10, 0.25, -162, -204),
    "shoulder flex": (91, -51, 74, 1093, 1.23, 0.25, 30, 60),
    "elbow ext": (101, -19, 207, 1037, 1.37, 0.19, -120, -150),
    "elbow flex": (70, -94, 75, 1057, 1.32, 0.19, 0, 10),
    "ulnar dev": (31, -25, 85, 1032, 1.35, 0.20, 0, 30),
    "radial dev": (24, 65, 147, 1247, 1.31, 0.21, -20, -50),
}
ROWS = sorted(TABLE_A2)
BETA = 0.2      # the paper gives no beta^PE; any non-negative value exercises the term


def mtg(row: str, beta: float = BETA) -> mc.MtgCurves:
    tau, to, tw, wm, te, th, p0, p1 = TABLE_A2[row]
    r = math.radians
    return mc.MtgCurves(float(tau), mc.ActiveTorqueAngle(r(to), r(tw)), mc.TorqueVelocity(r(wm), te, th),
                        mc.PassiveTorqueAngle(r(p0), r(p1)), beta)


# --- an independent evaluation: the Bernstein sum as a power-basis polynomial, u solved by brentq ---------------


def bernstein(p) -> Polynomial:
    """sum_i C(5, i) u^i (1 - u)^(5 - i) p_i."""
    u, v = Polynomial([0.0, 1.0]), Polynomial([1.0, -1.0])
    return sum(math.comb(5, i) * u ** i * v ** (5 - i) * float(p[i]) for i in range(6))


def seg_derivs(xs, ys, u):
    """(y, dy/dx, d2y/dx2) of one segment at parameter u, by the chain rule on the two polynomials."""
    px, py = bernstein(xs), bernstein(ys)
    dx, ddx = px.deriv(1)(u), px.deriv(2)(u)
    dy, ddy = py.deriv(1)(u), py.deriv(2)(u)
    return py(u), dy / dx, (ddy * dx - dy * ddx) / dx ** 3


def reference(curve: mc.BezierCurve, x: float):
    """The curve at x: linear beyond the ends, else the segment containing x with u from brentq."""
    xs, ys = curve.xs, curve.ys
    if x <= xs[0, 0]:
        y, d, _ = seg_derivs(xs[0], ys[0], 0.0)
        return y + d * (x - xs[0, 0]), d, 0.0
    if x >= xs[-1, 5]:
        y, d, _ = seg_derivs(xs[-1], ys[-1], 1.0)
        return y + d * (x - xs[-1, 5]), d, 0.0
    k = int(np.searchsorted(xs[:, 0], x, side="right") - 1)
    px = bernstein(xs[k])
    u = brentq(lambda t: px(t) - x, 0.0, 1.0, xtol=1e-15, rtol=4 * np.finfo(float).eps)
    return seg_derivs(xs[k], ys[k], u)


def close(a, b, rel=1e-9, scale=1.0):
    return abs(a - b) <= rel * (abs(b) + scale)


# --- the Bezier evaluator ----------------------------------------------------------------------------------------


def test_bezier5_is_the_bernstein_sum_and_its_derivatives():
    rng = np.random.default_rng(1)
    p = rng.normal(size=(3, 6))
    for k in range(3):
        poly = bernstein(p[k])
        for u in (0.0, 0.13, 0.5, 0.77, 1.0):
            b, db, ddb = mc.bezier5(p, k, u)
            assert b == pytest.approx(poly(u), rel=1e-13, abs=1e-13)
            assert db == pytest.approx(poly.deriv(1)(u), rel=1e-12, abs=1e-12)
            assert ddb == pytest.approx(poly.deriv(2)(u), rel=1e-12, abs=1e-12)


def test_solve_u_on_segments_where_newton_alone_overshoots():
    """x(u) nearly flat at both ends and in the middle: the bracket keeps the iterates in [0, 1]."""
    xs = np.array([[0.0, 1e-7, 0.5, 0.5, 1.0 - 1e-7, 1.0],
                   [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]])
    for k in range(2):
        px = bernstein(xs[k])
        for x in np.concatenate([[1e-12, 1e-9, 0.5, 1.0 - 1e-12], np.linspace(0.001, 0.999, 37)]):
            u = mc.solve_u(xs, k, x)
            assert 0.0 <= u <= 1.0
            assert abs(px(u) - x) <= 1e-13
            assert u == pytest.approx(brentq(lambda t: px(t) - x, 0.0, 1.0, xtol=1e-15), abs=1e-6)


def test_curve_eval_against_the_independent_evaluation():
    segs = [mc.corner_segment(-1.0, 2.0, 0.5, 0.0, 1.0, -4.0, 0.9),
            mc.hermite_segment(0.0, 1.0, -4.0, 0.0, 0.3, 0.2, -1.0, 3.0)]
    curves = [mc.BezierCurve.from_segments(segs), mc.BezierCurve([0.0, 0.01, 0.02, 0.9, 0.95, 1.0],
                                                                 [0.0, 3.0, -2.0, 1.0, 0.5, 0.0])]
    m = mtg("knee ext")
    curves += [m.a_curve, m.v_curve, m.p_curve]
    for curve in curves:
        lo, hi = curve.domain
        span = hi - lo
        xs = np.concatenate([np.linspace(lo - 0.2 * span, hi + 0.2 * span, 97), curve.knots,
                             curve.knots + 1e-9 * span, curve.knots - 1e-9 * span])
        for x in xs:
            got, want = curve(x), reference(curve, x)
            assert close(got[0], want[0], 1e-10)
            assert close(got[1], want[1], 1e-8, abs(want[1]) + 1.0 / span)
            assert close(got[2], want[2], 1e-6, abs(want[2]) + 1.0 / span ** 2)


def test_nan_in_nan_out():
    assert all(math.isnan(v) for v in mtg("hip ext").a_curve(math.nan))


# --- the segment constructions, by hand --------------------------------------------------------------------------


def test_hermite_segment_control_points_by_hand():
    # h = 1: y1 = y0 + d0/5, y2 = y0 + 2 d0/5 + k0/20, y3 = y5 - 2 d1/5 + k1/20, y4 = y5 - d1/5
    xs, ys = mc.hermite_segment(0.0, 1.0, 2.0, 3.0, 1.0, 0.0, -1.0, 4.0)
    assert xs == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert ys == pytest.approx([1.0, 1.4, 1.95, 0.6, 0.2, 0.0])
    assert seg_derivs(xs, ys, 0.0) == pytest.approx((1.0, 2.0, 3.0))
    assert seg_derivs(xs, ys, 1.0) == pytest.approx((0.0, -1.0, 4.0))


def test_corner_segment_control_points_by_hand():
    # tangents y = 0 and y = 1 + 3 (x - 1) meet at C = (2/3, 0); c = 1/2
    xs, ys = mc.corner_segment(0.0, 0.0, 0.0, 1.0, 1.0, 3.0, 0.5)
    assert xs == pytest.approx([0.0, 1 / 6, 1 / 3, 5 / 6, 11 / 12, 1.0])
    assert ys == pytest.approx([0.0, 0.0, 0.0, 0.5, 0.75, 1.0])
    assert seg_derivs(xs, ys, 0.0) == pytest.approx((0.0, 0.0, 0.0), abs=1e-12)
    assert seg_derivs(xs, ys, 1.0) == pytest.approx((1.0, 3.0, 0.0), abs=1e-12)


# --- C2 continuity -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("which", ["a_curve", "v_curve", "p_curve"])
def test_curves_are_c2_at_every_join_and_at_their_ends(row, which):
    curve = getattr(mtg(row), which)
    xs, ys = curve.xs, curve.ys
    lo, hi = curve.domain
    span = hi - lo
    for k in range(len(xs) - 1):
        left, right = seg_derivs(xs[k], ys[k], 1.0), seg_derivs(xs[k + 1], ys[k + 1], 0.0)
        assert close(left[0], right[0], 1e-12)
        assert close(left[1], right[1], 1e-9, 1.0 / span)
        assert close(left[2], right[2], 1e-7, abs(right[2]) + 1.0 / span ** 2)
    # the linear extensions have zero curvature: so must the curve's ends
    assert abs(seg_derivs(xs[0], ys[0], 0.0)[2]) <= 1e-9 / span ** 2
    assert abs(seg_derivs(xs[-1], ys[-1], 1.0)[2]) <= 1e-9 / span ** 2
    # the evaluator, from both sides of every join: no step larger than the variation next to it
    d = 1e-9 * span
    scales = (1.0, 1.0 / span, 1.0 / span ** 2)
    for x in curve.knots:
        f = [curve(x + j * d) for j in (-2, -1, 1, 2)]
        for i in range(3):
            step = abs(f[2][i] - f[1][i])
            local = abs(f[3][i] - f[2][i]) + abs(f[1][i] - f[0][i])
            assert step <= 1.5 * local + 1e-7 * (abs(f[1][i]) + scales[i])


# --- the values the paper prescribes (Appendix A) ----------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS)
def test_active_torque_angle_is_the_gaussian(row):
    m = mtg(row)
    t0, w = m.active.theta_opt, m.active.theta_width
    assert m.a_curve(t0) == pytest.approx((1.0, 0.0, -1.0 / w ** 2), abs=1e-12)             # peak 1 at theta_o
    for z in np.linspace(-2.5, 2.5, 51):
        y, d, dd = m.a_curve(t0 + z * w)
        g = math.exp(-z * z / 2)
        assert y == pytest.approx(g, abs=1e-5)
        assert d == pytest.approx(-z * g / w, abs=1e-3 / w)
    for z in np.linspace(-5.0, 5.0, 201):
        y, d, _ = m.a_curve(t0 + z * w)
        assert 0.0 <= y <= 1.0 + 1e-15 and d * z <= 0.0
    assert m.a_curve(t0 + 3.5 * w) == (0.0, 0.0, 0.0) and m.a_curve(t0 - 4.0 * w) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("row", ROWS)
def test_torque_velocity_end_values_and_hill_hyperbola(row):
    m = mtg(row)
    wm, te, th = m.velocity.omega_max, m.velocity.tv_eccentric, m.velocity.tv_half_concentric
    c = 0.5 * th / (0.5 - th)
    assert m.velocity.hill_c == pytest.approx(c)
    assert m.v_curve(0.0)[0] == pytest.approx(1.0, abs=1e-15)
    assert m.v_curve(0.0)[1] == pytest.approx(-(1 + 1 / c) / wm)              # Hill's slope at v = 0
    assert m.v_curve(wm) == pytest.approx((0.0, 0.0, 0.0), abs=1e-12)           # zero value and slope at omega_max
    assert m.v_curve(2 * wm) == pytest.approx((0.0, 0.0, 0.0), abs=1e-12)
    assert m.v_curve(-wm) == pytest.approx((te, 0.0, 0.0), abs=1e-12)           # tV(omega_max^E), slope zero
    assert m.v_curve(-3 * wm) == pytest.approx((te, 0.0, 0.0), abs=1e-12)
    assert m.v_curve(0.5 * wm)[0] == pytest.approx(th, abs=1e-4)
    for v in np.linspace(0.0, 0.9, 181):                                        # fitted to (1 - v)/(1 + v/c)
        assert m.v_curve(v * wm)[0] == pytest.approx((1 - v) / (1 + v / c), abs=1e-3)
    for v in np.linspace(-1.5, 1.5, 301):
        y, d, _ = m.v_curve(v * wm)
        assert d <= 1e-15 and (1.0 - 1e-15 <= y <= te + 1e-15 if v <= 0 else 0.0 <= y <= 1.0 + 1e-15)


@pytest.mark.parametrize("row", ROWS)
def test_passive_torque_angle_onset_and_unit_point(row):
    m = mtg(row)
    p = m.passive
    t0, t1, k = p.theta_zero, p.theta_one, p.stiffness
    side = math.copysign(1.0, t1 - t0)
    assert m.p_curve(t1) == pytest.approx((1.0, k / (t1 - t0), 0.0), abs=1e-12)
    for f in np.linspace(0.0, 2.0, 41):                                        # zero on the far side of theta_0
        assert m.p_curve(t0 - side * f * abs(t1 - t0)) == (0.0, 0.0, 0.0)
    for f in np.linspace(0.0, 1.0, 101):
        y, d, _ = m.p_curve(t0 + f * (t1 - t0))
        assert 0.0 <= y <= 1.0 + 1e-15 and d * side >= 0.0
    for f in (1.5, 2.0):                                                        # linear beyond theta_1
        assert m.p_curve(t0 + f * (t1 - t0))[0] == pytest.approx(1.0 + k * (f - 1.0))


# --- Eqs. (4)-(6): blending, scaling, shift ----------------------------------------------------------------------


def test_blending_limits():
    m = mtg("hip ext")
    raw = mc.FitParameters(lambda_a=0.0, lambda_v=0.0, lambda_p=0.0)
    flat = mc.FitParameters(lambda_a=1.0, lambda_v=1.0, lambda_p=1.0)
    half = mc.FitParameters(lambda_a=0.3, lambda_v=0.6, lambda_p=0.25)
    for theta in np.radians(np.linspace(-200.0, 80.0, 57)):
        assert m.t_a(theta, raw) == pytest.approx(m.a_curve(theta), rel=1e-12, abs=1e-12)
        assert m.t_pe(theta, raw) == m.p_curve(theta)
        assert m.t_a(theta, flat) == (1.0, 0.0, 0.0)                           # lamA = 1: the line 1
        assert m.t_pe(theta, flat) == (0.0, 0.0, 0.0)                          # lamP = 1: no passive torque
        ya, yp = m.a_curve(theta), m.p_curve(theta)
        assert m.t_a(theta, half) == pytest.approx((0.3 + 0.7 * ya[0], 0.7 * ya[1], 0.7 * ya[2]))
        assert m.t_pe(theta, half) == pytest.approx((0.75 * yp[0], 0.75 * yp[1], 0.75 * yp[2]))
    for omega in np.linspace(-20.0, 20.0, 41):
        assert m.t_v(omega, raw) == m.v_curve(omega)
        assert m.t_v(omega, flat) == (1.0, 0.0, 0.0)                           # lamV = 1: the line 1
        yv = m.v_curve(omega)
        assert m.t_v(omega, half) == pytest.approx((0.6 + 0.4 * yv[0], 0.4 * yv[1], 0.4 * yv[2]))
    assert mc.FitParameters().lambda_a == mc.FitParameters().lambda_v == pytest.approx(2.22e-16 ** 0.25, rel=1e-3)


def test_domain_scaling_and_passive_shift():
    m = mtg("knee ext")
    t0 = m.active.theta_opt
    for s in (0.7, 1.0, 1.6):
        fit = mc.FitParameters(s_a=s, s_v=s, lambda_a=0.0, lambda_v=0.0)
        for theta in np.radians(np.linspace(-140.0, 30.0, 35)):
            y, d, dd = m.a_curve(theta)                                        # tA stretched about theta_o
            assert m.t_a(t0 + s * (theta - t0), fit) == pytest.approx((y, d / s, dd / s ** 2), rel=1e-12, abs=1e-12)
        for omega in np.linspace(-25.0, 25.0, 51):
            y, d, dd = m.v_curve(omega)                                        # tV stretched about omega = 0
            assert m.t_v(s * omega, fit) == pytest.approx((y, d / s, dd / s ** 2), rel=1e-10, abs=1e-12)
    for shift in np.radians([-10.0, 0.0, 7.0]):
        fit = mc.FitParameters(delta_p=shift)
        for theta in np.radians(np.linspace(-200.0, -90.0, 45)):
            assert m.t_pe(theta + shift, fit) == pytest.approx(m.p_curve(theta), rel=1e-12, abs=1e-14)


# --- Eq. (3) -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ["hip ext", "elbow flex", "ankle d.flex"])
def test_torque_by_hand_from_the_paper_equations(row):
    m = mtg(row)
    tau_o, t_opt, wm = m.tau_max, m.active.theta_opt, m.velocity.omega_max
    t0, t1 = m.passive.theta_zero, m.passive.theta_one
    fits = [mc.FitParameters(), mc.FitParameters(s_a=1.2, s_v=0.8, delta_p=math.radians(-4.0), lambda_p=0.3,
                                                 s_tau=1.1, lambda_a=0.05, lambda_v=0.1)]
    for fit in fits:
        for a, theta, omega in [(0.7, t_opt, 0.0), (0.3, t0 + 0.6 * (t1 - t0), 0.2 * wm),
                                (1.0, t1, -0.4 * wm), (0.0, t1 + 0.1 * (t1 - t0), -0.05 * wm)]:
            ta = fit.lambda_a + (1 - fit.lambda_a) * reference(m.a_curve, (theta - t_opt) / fit.s_a + t_opt)[0]
            tv = fit.lambda_v + (1 - fit.lambda_v) * reference(m.v_curve, omega / fit.s_v)[0]
            tp = (1 - fit.lambda_p) * reference(m.p_curve, theta - fit.delta_p)[0]
            tau = fit.s_tau * tau_o * (a * ta * tv + tp * (1 - BETA * omega / (fit.s_v * wm)))
            got = m.torque(a, theta, omega, fit)
            assert got[0] == pytest.approx(tau, rel=1e-10, abs=1e-10)
            assert got[3] == pytest.approx(fit.s_tau * tau_o * ta * tv, rel=1e-10, abs=1e-12)


def test_damping_raises_passive_torque_while_stretched():
    """omega < 0 is eccentric (the MTG lengthens): the damping factor 1 - beta omega/(sV omega_max) exceeds 1."""
    m = mtg("hip ext", beta=0.5)
    theta = m.passive.theta_one
    wm = m.velocity.omega_max
    stretch, still, shorten = (m.torque(0.0, theta, w)[0] for w in (-0.2 * wm, 0.0, 0.2 * wm))
    assert still == pytest.approx(m.tau_max * m.p_curve(theta)[0]) and still > 0.0
    assert stretch == pytest.approx(1.1 * still) and shorten == pytest.approx(0.9 * still)


# --- derivatives -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ["hip ext", "knee ext", "lumbar flex", "radial dev"])
def test_derivatives_against_central_differences(row):
    m = mtg(row)
    fit = mc.FitParameters(s_a=1.1, s_v=0.9, delta_p=math.radians(3.0), lambda_p=0.2, s_tau=1.3, lambda_a=0.01,
                           lambda_v=0.02)
    wm = m.velocity.omega_max
    t0, t1 = m.passive.theta_zero, m.passive.theta_one
    rng = np.random.default_rng(7)
    thetas = np.concatenate([rng.uniform(-math.pi, math.pi, 40), t0 + rng.uniform(0.0, 1.2, 20) * (t1 - t0)])
    omegas = rng.uniform(-1.2 * wm, 1.2 * wm, 60)

    def check(f, x, h):
        y, d, dd = f(x)
        ym, dm, _ = f(x - h)
        yp, dp, _ = f(x + h)
        assert d == pytest.approx((yp - ym) / (2 * h), rel=1e-5, abs=1e-7)
        assert dd == pytest.approx((dp - dm) / (2 * h), rel=1e-4, abs=1e-5)

    for theta in thetas:
        check(lambda x: m.t_a(x, fit), theta, 1e-6)
        check(lambda x: m.t_pe(x, fit), theta, 1e-6)
    for omega in omegas:
        check(lambda x: m.t_v(x, fit), omega, 1e-6 * wm)
    for theta, omega in zip(thetas, omegas):
        a, h = 0.6, 1e-6
        tau, d_theta, d_omega, d_a = m.torque(a, theta, omega, fit)
        fd_theta = (m.torque(a, theta + h, omega, fit)[0] - m.torque(a, theta - h, omega, fit)[0]) / (2 * h)
        fd_omega = (m.torque(a, theta, omega + h * wm, fit)[0] - m.torque(a, theta, omega - h * wm, fit)[0]) / (2 * h * wm)
        assert d_theta == pytest.approx(fd_theta, rel=1e-5, abs=1e-6 * m.tau_max)
        assert d_omega == pytest.approx(fd_omega, rel=1e-5, abs=1e-6 * m.tau_max / wm)
        fd_a = (m.torque(a + 1e-3, theta, omega, fit)[0] - m.torque(a - 1e-3, theta, omega, fit)[0]) / 2e-3
        assert d_a == pytest.approx(fd_a, rel=1e-9)


# --- parameters --------------------------------------------------------------------------------------------------


def test_bad_parameters_are_refused():
    bad = [lambda: mc.ActiveTorqueAngle(0.0, 0.0), lambda: mc.ActiveTorqueAngle(math.nan, 1.0),
           lambda: mc.TorqueVelocity(0.0, 1.2, 0.2), lambda: mc.TorqueVelocity(10.0, 1.0, 0.2),
           lambda: mc.TorqueVelocity(10.0, 1.2, 0.5), lambda: mc.TorqueVelocity(10.0, 1.2, 0.0),
           lambda: mc.TorqueVelocity(10.0, 1.2, 0.2, eccentric_curviness=1.0),
           lambda: mc.PassiveTorqueAngle(0.3, 0.3), lambda: mc.PassiveTorqueAngle(0.0, 1.0, stiffness=1.0),
           lambda: mc.PassiveTorqueAngle(0.0, 1.0, curviness=0.0),
           lambda: mc.FitParameters(s_a=0.0), lambda: mc.FitParameters(s_v=-1.0), lambda: mc.FitParameters(s_tau=0.0),
           lambda: mc.FitParameters(lambda_p=1.5), lambda: mc.FitParameters(lambda_a=-0.1),
           lambda: mc.FitParameters(delta_p=math.inf),
           lambda: mc.BezierCurve([0.0, 0.2, 0.1, 0.6, 0.8, 1.0], np.zeros(6)),
           lambda: mc.BezierCurve(np.zeros((2, 6)), np.zeros((2, 5))),
           lambda: mc.BezierCurve([[0, .2, .4, .6, .8, 1.0], [1.1, 1.2, 1.3, 1.4, 1.5, 1.6]], np.zeros((2, 6))),
           lambda: mc.corner_segment(0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.5),      # tangents meet beyond x1
           lambda: mtg("hip ext", beta=-0.1)]
    for make in bad:
        with pytest.raises(ValueError):
            make()


def test_parameters_and_curves_are_immutable():
    m = mtg("elbow flex")
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.tau_max = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        mc.FitParameters().s_a = 2.0
    with pytest.raises(ValueError):
        m.a_curve.xs[0, 0] = 0.0
