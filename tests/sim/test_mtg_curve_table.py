"""The MTG curves as the step evaluates them (sim.mtg.curve_table): each tabled curve against its Bezier curve, and
the tabled Eq. (3) torque against the one of sim.mtg.curves."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.das3.model import load_model
from sim.mtg.curve_table import table_eval, tabled_torque, tabulate
from sim.mtg.curves import curve_eval, mtg_torque
from sim.mtg.model import load_mtg_model

VALUE_RTOL, SLOPE_RTOL = 1e-11, 2e-8
"""Stated bounds of a tabled curve's value and slope against the Bezier curve's, relative to their largest
(docs/concepts/mtg.md)."""


@pytest.fixture(scope="module")
def model():
    return load_mtg_model(load_model())


def _curves(model):
    for spec in model.params.mtgs:
        for curve in (spec.curves.a_curve, spec.curves.v_curve, spec.curves.p_curve):
            yield spec.name, curve


def test_tables_follow_the_bezier_curves_inside_and_beyond_their_ends(model):
    for name, c in _curves(model):
        t = tabulate(c.xs, c.ys)
        lo, hi = c.xs[0, 0], c.xs[-1, 5]
        x = np.concatenate([np.linspace(lo - 0.2 * (hi - lo), hi + 0.2 * (hi - lo), 4001), np.linspace(-0.3, 0.3, 4001),
                            c.xs[:, 0], c.xs[:, 5]])
        exact = np.array([curve_eval(c.xs, c.ys, v)[:2] for v in x])
        tabled = np.array([table_eval(t.start, t.width, t.coef, t.start.size, v) for v in x])
        err = np.abs(tabled - exact) / np.max(np.abs(exact), axis=0)
        assert err[:, 0].max() < VALUE_RTOL and err[:, 1].max() < SLOPE_RTOL, name


def test_a_segment_with_x_linear_in_its_parameter_is_one_exact_interval(model):
    c = model.params.mtgs[0].curves.a_curve          # Hermite segments only
    t = tabulate(c.xs, c.ys)
    assert t.start.size == c.xs.shape[0]
    x = np.linspace(c.xs[0, 0], c.xs[-1, 5], 2001)
    exact = np.array([curve_eval(c.xs, c.ys, v)[0] for v in x])
    assert np.max(np.abs([table_eval(t.start, t.width, t.coef, t.start.size, v)[0] for v in x] - exact)) < 1e-14


def test_tabled_torque_is_eq3(model):
    A, rng = model.arrays, np.random.default_rng(3)
    for m, spec in enumerate(model.params.mtgs):
        cv = spec.curves
        for a, theta, omega in zip(rng.uniform(0, 1, 40), rng.uniform(-1.0, 3.5, 40), rng.uniform(-15, 15, 40)):
            k, f = A.mtg_const[m], A.mtg_fit[m]
            want = mtg_torque(a, theta, omega, cv.a_curve.xs, cv.a_curve.ys, cv.v_curve.xs, cv.v_curve.ys,
                              cv.p_curve.xs, cv.p_curve.ys, *k, *f)
            got = tabled_torque(A.curve_start, A.curve_width, A.curve_coef, A.curve_count, m, a, theta, omega, k, f)
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8 * k[2])


def test_nan_in_is_nan_out(model):
    c = model.params.mtgs[0].curves.v_curve
    t = tabulate(c.xs, c.ys)
    assert all(math.isnan(v) for v in table_eval(t.start, t.width, t.coef, t.start.size, math.nan))
