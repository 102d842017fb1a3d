"""The muscles' problem at fixed angles (sim.analysis.muscle_problem): the dual QP of criteria (a)/(b), and for
criterion (c) the rest activation curve a(F), the per-muscle 1-D minimisers and the separable dual."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import arm_posture
from scipy.optimize import minimize

from sim.analysis import static_opt as so
from sim.analysis.muscle_problem import ActivationCost, ForceCost, min_max_fractions, solve_muscle_qp, solve_separable
from sim.das3.kernels.muscles import rest_activation_curve, rest_state_from_force
from sim.das3.model import N_MUS

SCALE = 1e-2


def _random_qp(seed, m=4, n=30, inequality=False):
    """A feasible QP: rows met by a point inside the box; with ``inequality`` the last row is C_j alpha + k_j <= 0."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(m, n))
    k = -C @ rng.uniform(0.1, 0.9, n)
    if inequality:
        k[-1] -= 0.5
    d, c = rng.uniform(0.1, 10.0, n), rng.uniform(-0.5, 1.5, n)
    ylo = np.full(m, -1e6)
    if inequality:
        ylo[-1] = 0.0
    return C, k, d, c, np.zeros(n), np.ones(n), ylo, np.full(m, 1e6)


@pytest.mark.parametrize("seed", range(6))
def test_muscle_qp_meets_kkt_and_matches_slsqp(seed):
    inequality = seed % 2 == 1
    C, k, d, c, lo, hi, ylo, yhi = _random_qp(seed, inequality=inequality)
    qp = solve_muscle_qp(C, k, d, c, lo, hi, ylo, yhi)
    a, y, r = qp.alpha, qp.y, qp.residual
    assert np.all(a >= lo) and np.all(a <= hi)
    np.testing.assert_allclose(r, C @ a + k)
    eq = slice(None, -1) if inequality else slice(None)
    assert np.max(np.abs(r[eq])) < 1e-9                         # rows met
    if inequality:                                             # dual feasible, complementary
        assert r[-1] < 1e-9 and y[-1] >= 0 and abs(y[-1] * r[-1]) < 1e-9
    g = 2 * d * (a - c) + C.T @ y                              # stationarity with the bound multipliers
    inside = (a > lo + 1e-12) & (a < hi - 1e-12)
    assert np.max(np.abs(g[inside])) < 1e-8
    assert np.all(g[a <= lo + 1e-12] >= -1e-8) and np.all(g[a >= hi - 1e-12] <= 1e-8)
    cons = [{"type": "eq", "fun": lambda x: (C @ x + k)[eq], "jac": lambda x: C[eq]}]
    if inequality:
        cons.append({"type": "ineq", "fun": lambda x: -(C[-1] @ x + k[-1]), "jac": lambda x: -C[-1]})
    ref = minimize(lambda x: float(d @ (x - c) ** 2), np.full(c.size, 0.5), jac=lambda x: 2 * d * (x - c),
                   method="SLSQP", bounds=list(zip(lo, hi)), constraints=cons, options={"ftol": 1e-12, "maxiter": 500})
    assert np.max(np.abs((C @ ref.x + k)[eq])) < 1e-6
    assert float(d @ (a - c) ** 2) == pytest.approx(ref.fun, rel=1e-6)


def test_muscle_qp_multiplier_at_the_penalty_when_the_rows_cannot_be_met():
    C, k, d, c, lo, hi, _, _ = _random_qp(0)
    k = k + 1e3                                                # no alpha in the box meets the rows
    qp = solve_muscle_qp(C, k, d, c, lo, hi, np.full(4, -10.0), np.full(4, 10.0))
    assert np.max(np.abs(qp.residual)) > 1.0 and np.max(np.abs(qp.y)) == pytest.approx(10.0)


@pytest.fixture(scope="module")
def muscles_at_60(model):
    """(C, k, the muscles' problem prepared, lengths, Fp, span) at plane 60, elevation 60 deg, the girdle of
    criterion (b)'s optimum (where the rows can be met)."""
    posture = arm_posture(model, 60.0)
    rest, z0, _ = so.rest_problem(model, posture, None, 0.0, None, 0)
    z0[:rest.layout.n_q] = so.solve_static(model, posture, criterion="b").x[list(rest.layout.free_dofs)]
    r = rest.at(z0)
    span, Fp, L = r.span.copy(), r.force.copy(), rest.muscle_lengths().copy()
    cost = ActivationCost(model, SCALE)
    cost.prepare(L, Fp, span, span > 1e-9 * span.max())
    return r.J_eom[:, rest.layout.alpha].copy(), r.f_eom.copy(), cost, L, Fp, span


def _curve(model, L, F):
    return np.array([rest_activation_curve(model.arrays.mus[i], L[i], F[i]) for i in range(N_MUS)]).T


def test_rest_activation_curve_is_the_rest_inversion_with_its_derivatives(model, muscles_at_60):
    _, _, _, L, Fp, span = muscles_at_60
    F = Fp + np.random.default_rng(1).uniform(0.05, 0.95, N_MUS) * span
    a, da, dda = _curve(model, L, F)
    s, a_rest = np.empty(N_MUS), np.empty(N_MUS)
    rest_state_from_force(model.arrays, L, F, s, a_rest)
    assert np.array_equal(a, a_rest)
    h = 1e-4 * np.maximum(span, 1.0)
    up, down = _curve(model, L, F + h), _curve(model, L, F - h)
    np.testing.assert_allclose(da, (up[0] - down[0]) / (2 * h), rtol=1e-6, atol=1e-9 * np.max(np.abs(da)))
    np.testing.assert_allclose(dda, (up[1] - down[1]) / (2 * h), rtol=1e-5, atol=1e-7 * np.max(np.abs(dda)))


def _slope(model, L, Fp, span, alpha, g):
    a, da, _ = _curve(model, L, Fp + alpha * span)
    return 2 * a * da * span / SCALE + g


def test_each_muscles_minimiser_meets_its_1d_optimality_conditions(model, muscles_at_60):
    """phi_i(alpha) = a_i² / S + g_i alpha on [0, hi_i]: slope 0 inside, >= 0 at 0, <= 0 at hi."""
    C, _, cost, L, Fp, span = muscles_at_60
    for seed in range(3):
        g = C.T @ np.random.default_rng(seed).normal(0.0, 3.0, C.shape[0])
        alpha, _, inside = cost.minimisers(g, np.full(N_MUS, 0.5))
        slope = _slope(model, L, Fp, span, alpha, g)
        active = cost.hi > 0
        assert inside.any() and (active & ~inside).any()
        assert np.max(np.abs(slope[inside])) < 1e-8 * np.max(np.abs(g))
        assert np.all(slope[active & (alpha == 0.0)] >= 0) and np.all(slope[active & (alpha == 1.0)] <= 0)
        assert np.array_equal(inside, active & (alpha > 0) & (alpha < 1))


def test_separable_dual_meets_kkt_and_is_as_low_as_slsqp(model, muscles_at_60):
    C, k, cost, L, Fp, span = muscles_at_60
    rows = np.full(k.size, 1e3)
    result = solve_separable(cost, C, k, -rows, rows)
    alpha, y = result.alpha, result.y
    assert np.max(np.abs(C @ alpha + k)) < 1e-9 and np.max(np.abs(y)) < 1e3
    slope = _slope(model, L, Fp, span, alpha, C.T @ y)               # stationarity of the Lagrangian
    inside = (alpha > 0) & (alpha < cost.hi)
    assert np.max(np.abs(slope[inside])) < 1e-7 * np.max(np.abs(C.T @ y))

    def primal(x):
        a, da, _ = _curve(model, L, Fp + x * span)
        return float(a @ a) / SCALE, 2 * a * da * span / SCALE

    ref = minimize(primal, alpha * 0.5 + 0.25 * cost.hi, jac=True, method="SLSQP", bounds=list(zip(0 * alpha, cost.hi)),
                   constraints=[{"type": "eq", "fun": lambda x: C @ x + k, "jac": lambda x: C}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    assert np.max(np.abs(C @ ref.x + k)) < 1e-6
    assert primal(alpha)[0] <= ref.fun * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_min_max_fractions_is_the_least_max_stress(seed):
    """Against SLSQP on the epigraph form min t s.t. w (Fp + alpha span) <= t."""
    C, k, _, _, lo, hi, _, _ = _random_qp(seed)
    rng = np.random.default_rng(seed + 10)
    Fp, span, w = rng.uniform(0, 5, hi.size), rng.uniform(1, 20, hi.size), rng.uniform(0.5, 2, hi.size)
    alpha = min_max_fractions(C, k, Fp, span, w, hi)
    assert np.max(np.abs(C @ alpha + k)) < 1e-7 and np.all((alpha >= lo) & (alpha <= hi))
    n = hi.size
    cons = [{"type": "eq", "fun": lambda x: C @ x[:n] + k, "jac": lambda x: np.hstack([C, np.zeros((C.shape[0], 1))])},
            {"type": "ineq", "fun": lambda x: x[n] - w * (Fp + x[:n] * span),
             "jac": lambda x: np.hstack([-np.diag(w * span), np.ones((n, 1))])}]
    x0 = np.append(np.full(n, 0.5), 100.0)
    ref = minimize(lambda x: x[n], x0, jac=lambda x: np.eye(n + 1)[n], method="SLSQP", constraints=cons,
                   bounds=list(zip(lo, hi)) + [(None, None)], options={"ftol": 1e-12, "maxiter": 500})
    assert np.max(w * (Fp + alpha * span)) == pytest.approx(ref.fun, rel=1e-6)


def test_min_max_fractions_reports_an_infeasible_problem():
    C, k, _, _, _, hi, _, _ = _random_qp(0)
    assert min_max_fractions(C, k + 1e3, np.zeros(hi.size), np.ones(hi.size), np.ones(hi.size), hi) is None


def test_force_cost_cap_bounds_every_force():
    """ForceCost with a cap (F_i <= cap_i as alpha_i <= (cap_i - Fp_i) / span_i): the QP meets the rows, no force
    exceeds its cap, the muscles the uncapped optimum takes above a cap sit at it, and the cost rises."""
    C, k, _, _, _, _, ylo, yhi = _random_qp(3)
    n = C.shape[1]
    rng = np.random.default_rng(4)
    Fp, span, w = rng.uniform(0, 1, n), rng.uniform(5, 10, n), np.ones(n)

    def solve(cap):
        cost = ForceCost(w, 1.0, cap)
        cost.prepare(None, Fp, span, np.ones(n, bool))
        qp = cost.solve(C, k, ylo, yhi, None)
        return qp, Fp + qp.alpha * span

    _, free = solve(None)
    cap = np.full(n, 0.95 * np.max(free))                     # the largest force above it
    qp, capped = solve(cap)
    assert np.max(np.abs(qp.residual)) < 1e-9
    assert np.all(capped <= cap * (1 + 1e-12))
    assert np.allclose(capped[free > cap], cap[free > cap], rtol=1e-12)
    assert float(capped @ capped) > float(free @ free)
