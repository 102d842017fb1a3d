"""Thelen 2003 muscle curves and contraction residual (sim/das3/kernels/thelen.py) against the document's equations
(C. T. John, "Complete Description of the Thelen2003Muscle Model") and finite differences."""
import math

import numpy as np
import pytest

from sim.das3.kernels import thelen as th
from sim.das3.model import MUS_FMAX, MUS_LCEOPT, MUS_PENN_B, MUS_SEESLACK, load_model


def _doc_inverse_fv(f):
    """(F_V)^-1 of the document's 'Muscle Model' section (before its numerical adjustments)."""
    af, flen = 0.3, 1.8
    if f < 0:
        return (1 + 1 / af) * f - 1
    if f < 1:
        return (f - 1) / (1 + f / af)
    if f < 0.95 * flen:
        return (f - 1) * (flen - 1) / ((2 + 2 / af) * (flen - f))
    return 10 * (flen - 1) / ((1 + 1 / af) * flen) * (-18.05 * flen + 18 + 20 * f * (flen - 1) / flen)


@pytest.mark.parametrize("f", [-0.2, 0.05, 0.3, 0.7, 0.99, 1.01, 1.3, 1.69, 1.72, 1.9])
def test_force_velocity_inverts_to_the_documents_inverse(f):
    v = _doc_inverse_fv(f)
    assert th.force_velocity(v)[0] == pytest.approx(f, rel=1e-12, abs=1e-12)


def test_curves_at_hand_computed_points():
    # tendon: 0.001 (1 + eps) + toe / linear branches, eps_toe = 0.609 * 0.033
    eps_toe = 0.609 * 0.033
    assert th.tendon_force(-0.01)[0] == pytest.approx(0.001 * 0.99)
    assert th.tendon_force(0.01)[0] == pytest.approx(0.001 * 1.01 + 0.333333 * (math.exp(3 * 0.01 / eps_toe) - 1) / (math.exp(3) - 1))
    assert th.tendon_force(0.033)[0] == pytest.approx(0.001 * 1.033 + 1.712 / 0.033 * (0.033 - eps_toe) + 0.333333)
    # tendon force at eps0_T is about F_0^M (the definition of eps0_T)
    assert th.tendon_force(0.033)[0] == pytest.approx(1.0, abs=0.02)
    # passive: exp(k_PE (l - 1)/eps0)/exp(k_PE) below 1.6, affine above
    assert th.passive_force(1.0)[0] == pytest.approx(math.exp(-4.0))
    assert th.passive_force(1.6)[0] == pytest.approx(1.0)
    assert th.passive_force(1.8)[0] == pytest.approx(1 + 4 / 0.6 * 0.2)
    # active: Gaussian with gamma = 0.5
    assert th.active_force_length(1.0)[0] == 1.0
    assert th.active_force_length(1.5)[0] == pytest.approx(math.exp(-0.5))
    # force-velocity: isometric 1, -Vmax gives 0, far lengthening tends towards F_len and beyond
    assert th.force_velocity(0.0)[0] == pytest.approx(1.0)
    assert th.force_velocity(-1.0)[0] == pytest.approx(0.0, abs=1e-15)
    assert th.force_velocity(-0.5)[0] == pytest.approx(0.5 / (1 + 0.5 / 0.3))
    assert th.force_velocity(th.V_LIN)[0] == pytest.approx(0.95 * 1.8)


@pytest.mark.parametrize("curve, x, slope_rel", [
    (th.tendon_force, 0.0, None),            # the toe starts with a positive slope: a kink
    (th.tendon_force, th.EPS_TOE, 0.01),     # the document's k_lin = 1.712/eps0_T is 1 % below the toe's slope
    (th.passive_force, 1.0 + th.EPS0_M, 1e-5),
    (th.force_velocity, -1.0, 1e-5),
    (th.force_velocity, th.V_LIN, 1e-5),
])
def test_curves_are_continuous_at_their_breakpoints(curve, x, slope_rel):
    h = 1e-10
    below, above = curve(x - h), curve(x + h)
    assert below[0] == pytest.approx(above[0], abs=1e-7)
    if slope_rel is not None:
        assert below[1] == pytest.approx(above[1], rel=slope_rel)


@pytest.mark.parametrize("curve", [th.tendon_force, th.passive_force, th.active_force_length, th.force_velocity])
def test_curve_derivatives_match_finite_differences(curve):
    rng = np.random.default_rng(1)
    for x in rng.uniform(-1.5, 2.0, 40):
        h = 1e-6
        fd = (curve(x + h)[0] - curve(x - h)[0]) / (2 * h)
        assert curve(x)[1] == pytest.approx(fd, rel=1e-5, abs=1e-6)
    if curve is th.force_velocity:
        for x in rng.uniform(-1.5, 2.0, 40):
            fd = (curve(x + 1e-6)[1] - curve(x - 1e-6)[1]) / 2e-6
            assert curve(x)[2] == pytest.approx(fd, rel=1e-4, abs=1e-5)


def _states():
    """Muscle rows and (L, s, sdot, a) in every branch: shortening, lengthening, slack and stretched."""
    model = load_model()
    rng = np.random.default_rng(7)
    for i in rng.choice(model.arrays.mus.shape[0], 12, replace=False):
        P = model.arrays.mus[i]
        for s, sd, eps in ((0.9, -2.0, 0.01), (1.1, 1.5, 0.03), (0.7, -6.0, -0.01), (1.5, 0.3, 0.02),
                           (1.0, -12.0, 0.005), (0.95, 9.0, 0.04)):
            L = s * P[MUS_LCEOPT] + P[MUS_SEESLACK] * (1 + eps)
            yield P, L, s, sd, rng.uniform(0.05, 0.95)


def test_contraction_derivatives_match_finite_differences():
    for P, L, s, sd, a in _states():
        g, g_s, g_sd, g_a, f4, df4, g_s_a, g_sd_a = th.thelen_contraction(P, L, s, sd, a)

        def at(ds=0.0, dsd=0.0, da=0.0, dL=0.0):
            return th.thelen_contraction(P, L + dL, s + ds, sd + dsd, a + da)

        h = 1e-6
        assert g_s == pytest.approx((at(ds=h)[0] - at(ds=-h)[0]) / (2 * h), rel=1e-5, abs=1e-6)
        assert g_sd == pytest.approx((at(dsd=h)[0] - at(dsd=-h)[0]) / (2 * h), rel=1e-5, abs=1e-8)
        assert g_a == pytest.approx((at(da=h)[0] - at(da=-h)[0]) / (2 * h), rel=1e-5, abs=1e-8)
        hL = 1e-8
        assert df4 == pytest.approx((at(dL=hL)[4] - at(dL=-hL)[4]) / (2 * hL), rel=1e-5)
        assert g_s_a == pytest.approx((at(da=h)[1] - at(da=-h)[1]) / (2 * h), rel=1e-4, abs=1e-5)
        assert g_sd_a == pytest.approx((at(da=h)[2] - at(da=-h)[2]) / (2 * h), rel=1e-4, abs=1e-7)


def test_contraction_residual_is_the_documents_force_balance():
    """g = 0 exactly when tendon force = (a fl fv + FPE) cos(alpha) + damping, with Thelen's
    Vmax = (5 + 5 a) l_0 in the velocity and constant thickness b = sin(alpha_0)."""
    for P, L, s, sd, a in _states():
        b = P[MUS_PENN_B]
        lce = math.hypot(s, b)
        cosp = s / lce
        eps = (L - s * P[MUS_LCEOPT] - P[MUS_SEESLACK]) / P[MUS_SEESLACK]
        v = sd * cosp / (5 + 5 * a)
        expected = (th.tendon_force(eps)[0]
                    - (a * math.exp(-(lce - 1) ** 2 / 0.5) * th.force_velocity(v)[0] + th.passive_force(lce)[0]) * cosp
                    - 0.001 * sd)
        assert th.thelen_contraction(P, L, s, sd, a)[0] == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_published_equilibrium_fibres_are_resolved_for_the_variant(model, thelen_model):
    """The published equilibrium's s belong to the DAS3 muscle; the variant re-solves every fibre at
    rest (g = 0, sdot = 0) at the same joint angles and activations."""
    from sim.das3.dynamics import residual
    from sim.das3.model import N_DOF, N_MUS, N_STATES

    x = thelen_model.equilibrium_state
    f = residual(thelen_model, x, np.zeros(N_STATES), x[2 * N_DOF + N_MUS:], np.zeros(10))
    assert np.max(np.abs(f[2 * N_DOF:2 * N_DOF + N_MUS])) < 1e-10
    np.testing.assert_array_equal(x[:N_DOF], model.equilibrium_state[:N_DOF])
    np.testing.assert_array_equal(x[2 * N_DOF + N_MUS:], model.equilibrium_state[2 * N_DOF + N_MUS:])
    assert np.max(np.abs(x[2 * N_DOF:2 * N_DOF + N_MUS] - model.equilibrium_state[2 * N_DOF:2 * N_DOF + N_MUS])) > 0.05


def test_thelen_activation_rises_with_tau_act_and_falls_with_tau_deact(thelen_model):
    from sim.das3.kernels.muscles import activation_rates
    from sim.das3.model import N_MUS

    A = thelen_model.arrays
    a = np.full(N_MUS, 0.4)
    rate, da, du = np.zeros(N_MUS), np.zeros(N_MUS), np.zeros(N_MUS)
    activation_rates(A, np.full(N_MUS, 0.9), a, rate, da, du)
    np.testing.assert_allclose(rate, 0.5 / 0.010)
    activation_rates(A, np.full(N_MUS, 0.1), a, rate, da, du)
    np.testing.assert_allclose(rate, -0.3 / 0.040)


def test_rest_state_from_force_inverts_the_contraction(thelen_model):
    """s and a recovered from the tendon force of a muscle at rest (sdot = 0)."""
    from sim.das3.kernels.muscles import rest_state_from_force

    A = thelen_model.arrays
    rng = np.random.default_rng(3)
    n = A.mus.shape[0]
    s_true, a_true = rng.uniform(0.7, 1.3, n), rng.uniform(0.0, 1.0, n)
    eps = rng.uniform(-0.005, 0.05, n)             # slack, toe and linear tendon
    L = s_true * A.mus[:, MUS_LCEOPT] + A.mus[:, MUS_SEESLACK] * (1 + eps)
    F = np.array([A.mus[i, MUS_FMAX] * th.thelen_contraction(A.mus[i], L[i], s_true[i], 0.0, a_true[i])[4]
                  for i in range(n)])
    s, a = np.zeros(n), np.zeros(n)
    rest_state_from_force(A, L, F, s, a)
    for i in range(n):
        g = th.thelen_contraction(A.mus[i], L[i], s[i], 0.0, a[i])[0]
        assert abs(g) < 1e-9
    np.testing.assert_allclose(s, s_true, rtol=1e-9)


def test_activation_step_response_has_thelens_time_constants(thelen_model):
    from sim.das3.muscle_curves import activation_step_response

    i = thelen_model.muscle_index("bicl")
    t, a = activation_step_response(thelen_model, i, 0.0, 0.1, 0.3, h=1e-4)
    on = np.searchsorted(t, 0.010 - 1e-9)
    assert a[on] == pytest.approx(1 - math.exp(-1), rel=1e-9)
    off, later = np.searchsorted(t, 0.1 - 1e-9), np.searchsorted(t, 0.140 - 1e-9)
    assert a[later] == pytest.approx(a[off] * math.exp(-1), rel=1e-9)


def test_cli_muscle_curves_writes_both_models(tmp_path, model):
    import csv

    from typer.testing import CliRunner

    from hil.cli import app

    res = CliRunner().invoke(app, ["model", "muscle-curves", "--muscle", "bicl", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(open(tmp_path / "muscle_curves_bicl.csv")))
    assert {"das3_N", "thelen2003_N"} <= set(rows[0])
    iso = [r for r in rows if r["curve"] == "velocity_a1" and float(r["x"]) == 0.0][0]
    fast = [r for r in rows if r["curve"] == "velocity_a1" and float(r["x"]) == -10.0][0]
    fmax = model.arrays.mus[model.muscle_index("bicl"), MUS_FMAX]
    for name in ("das3_N", "thelen2003_N"):        # isometric force near Fmax, none at -Vmax
        assert 0.8 * fmax < float(iso[name]) < 1.2 * fmax and abs(float(fast[name])) < 0.1 * fmax
    assert (tmp_path / "muscle_curves_bicl.png").stat().st_size > 10_000
    bad = CliRunner().invoke(app, ["model", "muscle-curves", "--muscle", "nope", "--out", str(tmp_path)])
    assert bad.exit_code == 2
