"""The fitting program of Millard et al. (2019), Eqs. (7)-(12) and the Sect. 2.3 check (sim/fitting/mtg_fit.py), on the
elbow MTG pair of Table A.2."""
import dataclasses
import math

import numpy as np
import pytest

from sim.fitting import mtg_fit as mf
from sim.mtg import curves as mc

r = math.radians


def mtg(tau, to, tw, wm, te, th, p0, p1, beta=0.2) -> mc.MtgCurves:
    return mc.MtgCurves(float(tau), mc.ActiveTorqueAngle(r(to), r(tw)), mc.TorqueVelocity(r(wm), te, th),
                        mc.PassiveTorqueAngle(r(p0), r(p1)), beta)


# Table A.2 rows; the flexor's tPE rises towards +theta, so u = -1, the extensor's towards -theta, so u = +1
FLEX = mtg(70, -94, 75, 1057, 1.32, 0.19, 0, 10)
EXT = mtg(101, -19, 207, 1037, 1.37, 0.19, -120, -150)
T = np.linspace(0.0, 2.0, 81)


def swing(lo_deg, hi_deg):
    """theta (rad) and dtheta (rad/s) of one slow cosine swing between two angles."""
    mid, amp = r(0.5 * (lo_deg + hi_deg)), r(0.5 * (hi_deg - lo_deg))
    return mid - amp * np.cos(np.pi * T), amp * np.pi * np.sin(np.pi * T)


def mtg_torque(curves, fit, a, theta, dtheta, u):
    """Eq. (3) along the MTG at every sample, omega = u dtheta."""
    return np.array([curves.torque(ai, th, u * w, fit)[0] for ai, th, w in zip(a, theta, dtheta)])


def test_directions_follow_the_passive_curves():
    assert mf.mtg_direction(FLEX) == -1 and mf.mtg_direction(EXT) == 1


def test_feasible_motion_leaves_the_parameters_at_x_o():
    theta, dtheta = swing(-100, -20)
    tau = 25.0 * np.sin(2.0 * np.pi * T)                 # both signs: each MTG carries part of it, Eq. (7)
    jf = mf.fit_joint((FLEX, EXT), theta, dtheta, tau, a_max=1.0, t_max_pe=1.4)
    assert jf.feasible
    for m in jf.mtgs:
        assert m.check_before.feasible and m.check_after.feasible
        np.testing.assert_allclose(mf.x_of(m.fitted), (1, 1, 0, 0, 1), atol=1e-9)
        assert m.objective <= 1e-16
        np.testing.assert_allclose(m.activation_after, m.activation_before, atol=1e-12)
        assert m.active["eq10"].size == 0
    assert max(jf.mtgs[0].activation_before) > 0.1 and max(jf.mtgs[1].activation_before) > 0.1


def test_hand_checked_single_sample_case():
    """One isometric sample at the flexor's optimal angle, -94 deg, where tA = tV = 1 for every sA and sV
    (Eqs. (4)-(5)) and tPE = 0: demanding 1.3 tau_o at a_max = 1 leaves Eq. (10) as s_tau >= 1.3 and
    nothing else to change, so Eq. (9)'s minimum is x = (1, 1, 0, 0, 1.3) exactly, with Eq. (10) active."""
    u = mf.mtg_direction(FLEX)
    m = mf.fit_mtg(FLEX, [r(-94)], [0.0], [u * 1.3 * 70.0], a_max=1.0, t_max_pe=1.0)
    np.testing.assert_allclose(mf.x_of(m.fitted), (1.0, 1.0, 0.0, 0.0, 1.3), rtol=0, atol=1e-9)
    assert m.objective == pytest.approx(0.09, abs=1e-9)
    assert list(m.active["eq10"]) == [0] and m.active["eq11"].size == 0
    assert not m.check_before.feasible and m.check_before.worst_violation == pytest.approx(0.3, abs=1e-9)
    assert m.feasible and m.activation_after[0] == pytest.approx(1.0, abs=1e-9)


def test_stronger_subject_is_fitted_minimally():
    """Data from a flexor with s_tau = 1.5 at a = 0.9 a_max: the default is too weak; the fit is feasible on the
    nonlinear model and its Eq. (9) objective is no larger than the known change's."""
    a_max = 0.8
    theta, dtheta = swing(-110, -40)
    known = mc.FitParameters(s_tau=1.5)
    u = mf.mtg_direction(FLEX)
    tau = u * mtg_torque(FLEX, known, np.full(T.size, 0.9 * a_max), theta, dtheta, u)
    m = mf.fit_mtg(FLEX, theta, dtheta, tau, a_max=a_max, t_max_pe=1.4)
    assert not m.check_before.feasible and m.check_before.worst_kind == "a>a_max"
    assert m.feasible
    assert np.all(m.activation_after <= a_max + 1e-6) and np.all(m.activation_after >= -1e-6)
    x_known = mf.x_of(known)
    obj_known = mf.objective(x_known, mf.x_of(mc.FitParameters()), np.eye(5))
    assert 0.0 < m.objective <= obj_known + 1e-9
    assert m.active["eq10"].size >= 1                     # just strong enough somewhere
    # the known parameters reproduce a = 0.9 a_max exactly (Eq. (3) solved for a)
    a, _ = mf.required_activation(FLEX, known, theta, dtheta, tau, u)
    np.testing.assert_allclose(a, 0.9 * a_max, rtol=1e-12)
    # the antagonist carries nothing and has no passive torque here: untouched
    ext = mf.fit_mtg(EXT, theta, dtheta, tau, a_max=a_max, t_max_pe=1.4)
    assert ext.feasible and ext.objective <= 1e-16


def test_motion_beyond_the_passive_range_shifts_the_passive_curve():
    """The elbow hyperextends to +15 deg with a small flexor torque: the default flexor's tPE (0 at 0 deg, 1 at
    10 deg) would need a < 0 (Eq. (11)); dP must move towards theta_1^PE (> 0 here)."""
    theta, dtheta = swing(-60, 15)
    tau = np.full(T.size, -5.0)                           # flexor direction (u = -1)
    m = mf.fit_mtg(FLEX, theta, dtheta, tau, a_max=1.0, t_max_pe=1.0)
    assert not m.check_before.feasible and m.check_before.worst_kind == "a<0"
    assert m.feasible
    assert m.fitted.delta_p > r(1.0)
    assert m.fitted.lambda_p < m.fitted.delta_p           # the cheaper change is the shift
    assert m.active["eq11"].size >= 1
    a, tp = mf.required_activation(FLEX, m.fitted, theta, dtheta, tau, -1)
    assert np.all(a >= -1e-6) and np.all(tp <= 1.0 + 1e-6)


def test_passive_limit_eq12_shifts_the_passive_curve():
    """A large flexor torque at a stretched angle meets Eqs. (10)-(11) but tPE > t_max^PE (Eq. (12))."""
    theta, dtheta = swing(-30, 8)
    tau = -mtg_torque(FLEX, mc.FitParameters(), np.full(T.size, 0.5), theta, dtheta, -1)   # a = 0.5 by default
    m = mf.fit_mtg(FLEX, theta, dtheta, tau, a_max=1.0, t_max_pe=0.3)
    assert m.check_before.worst_kind == "tPE>t_max" and not m.check_before.feasible
    assert m.check_before.a_min >= 0.5 - 1e-9 and m.check_before.a_max <= 0.5 + 1e-9
    assert m.feasible and m.fitted.delta_p > 0.0 and m.active["eq12"].size >= 1
    assert m.check_after.t_pe_max <= 0.3 + 1e-6


def test_infeasible_request_is_reported_infeasible():
    theta, dtheta = swing(-110, -40)
    tau = np.full(T.size, -60.0)
    m = mf.fit_mtg(FLEX, theta, dtheta, tau, a_max=0.01, t_max_pe=1.4,
                   upper={"s_tau": 1.2, "s_a": 1.2, "s_v": 1.2})
    assert not m.feasible
    assert m.check_after.worst_kind == "a>a_max" and m.check_after.worst_violation > 0.1
    jf = mf.fit_joint((FLEX, EXT), theta, dtheta, tau, 0.01, 1.4, upper={"s_tau": 1.2, "s_a": 1.2, "s_v": 1.2})
    assert not jf.feasible


def test_check_detects_perturbed_parameters():
    a_max = 0.8
    theta, dtheta = swing(-110, -40)
    u = -1
    tau = u * mtg_torque(FLEX, mc.FitParameters(s_tau=1.5), np.full(T.size, 0.9 * a_max), theta, dtheta, u)
    m = mf.fit_mtg(FLEX, theta, dtheta, tau, a_max=a_max, t_max_pe=1.4)
    ok = mf.check_feasibility(FLEX, m.fitted, theta, dtheta, tau, u, a_max, 1.4)
    assert ok.feasible
    weaker = dataclasses.replace(m.fitted, s_tau=0.97 * m.fitted.s_tau)
    bad = mf.check_feasibility(FLEX, weaker, theta, dtheta, tau, u, a_max, 1.4)
    assert not bad.feasible and bad.worst_kind == "a>a_max" and bad.worst_violation > 1e-3
    # passive side: undo the fitted shift of the hyperextension case
    theta, dtheta = swing(-60, 15)
    tau = np.full(T.size, -5.0)
    m = mf.fit_mtg(FLEX, theta, dtheta, tau, a_max=1.0, t_max_pe=1.0)
    stiff = dataclasses.replace(m.fitted, delta_p=0.5 * m.fitted.delta_p)
    bad = mf.check_feasibility(FLEX, stiff, theta, dtheta, tau, u, 1.0, 1.0)
    assert not bad.feasible and bad.worst_kind in ("a<0", "tPE>t_max")


def test_constraint_jacobian_against_central_differences():
    theta, dtheta = swing(-100, 12)
    tau = 40.0 * np.sin(2.0 * np.pi * T) - 10.0
    start = mc.FitParameters(s_a=1.1, s_v=1.2, delta_p=0.05, lambda_p=0.1, s_tau=1.3)
    u = -1
    e = mf.demanded_torque(tau, u) / FLEX.tau_max
    f = mf._constraints(FLEX, start, theta, u * dtheta, e, 0.9, 1.2)
    x = mf.x_of(start)
    _, jac = f(x)
    for k in range(5):
        h = 1e-6
        xp, xm = x.copy(), x.copy()
        xp[k] += h
        xm[k] -= h
        fd = (f(xp)[0] - f(xm)[0]) / (2.0 * h)
        np.testing.assert_allclose(jac[:, k], fd, rtol=1e-5, atol=1e-7)


def test_bad_input_is_refused():
    theta, dtheta = swing(-100, -20)
    tau = np.zeros(T.size)
    with pytest.raises(ValueError):
        mf.fit_mtg(FLEX, theta, dtheta[:-1], tau, 1.0, 1.4)
    with pytest.raises(ValueError):
        mf.fit_mtg(FLEX, theta, dtheta, tau, 1.5, 1.4)
    with pytest.raises(ValueError):
        mf.fit_mtg(FLEX, theta, dtheta, np.full(T.size, np.nan), 1.0, 1.4)
    with pytest.raises(ValueError):
        mf.fit_joint((FLEX, EXT), theta, dtheta, tau, 1.0, 1.4, directions=(1, 1))
