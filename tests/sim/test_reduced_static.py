"""The reduced-space static optimisation (sim.analysis.reduced_static, issue 36 item 5): the dual muscle QP,
the envelope gradient, agreement with the full-space solve and the fallback to it."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import arm_posture
from scipy.optimize import minimize

from sim.analysis import reduced_static
from sim.analysis import static_opt as so
from sim.analysis.reduced_static import ReducedProblem, ReducedSolveError, solve_muscle_qp, solve_reduced
from sim.analysis.solver import OBJECTIVE_FLOOR, SolverSettings

FULL = SolverSettings(reduced=False)
REDUCED_PATH = ["reduced", f"full:{SolverSettings().polish_iterations}"]


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


@pytest.mark.parametrize("gh_limit", [0.0, -0.9])
def test_envelope_gradient_matches_central_differences(model, gh_limit):
    """At criterion (b)'s reduced optimum (a balanced point; with the limit -0.9 the GH row binds there)."""
    posture = arm_posture(model, 30.0)
    rest, z0, _ = so.rest_problem(model, posture, None, gh_limit, None, 0)
    args = (rest, 100.0 / rest.fmax, OBJECTIVE_FLOOR["b"], posture.th_target(), gh_limit)
    q = solve_reduced(*args, z0[:rest.layout.n_q], SolverSettings(), 1e-6).z[:rest.layout.n_q]
    problem = ReducedProblem(*args)
    grad = problem.evaluate(q).gradient.copy()
    assert np.max(np.abs(problem.residual)) < 1e-9
    assert (problem.gh_multiplier > 0) == (gh_limit < 0)
    h, fd = 1e-6, np.empty(q.size)
    for j in range(q.size):
        e = np.zeros(q.size)
        e[j] = h
        fd[j] = (problem.evaluate(q + e).value - problem.evaluate(q - e).value) / (2 * h)
    np.testing.assert_allclose(grad, fd, atol=1e-5 * np.max(np.abs(fd)))


def test_stall_stop_ends_at_a_balanced_point(model, monkeypatch):
    """With any drop counted as a stall and a loose balance, the outer loop stops after STALL_WINDOW iterations
    at such points (with the defaults it is a guard that the measured postures never reach)."""
    monkeypatch.setattr(reduced_static, "STALL_DROP", 1.0)
    monkeypatch.setattr(reduced_static, "STALL_BALANCE", 1e-2)
    posture = arm_posture(model, 60.0)
    rest, z0, _ = so.rest_problem(model, posture, None, 0.0, None, 0)
    result = solve_reduced(rest, 100.0 / rest.fmax, OBJECTIVE_FLOOR["b"], posture.th_target(), 0.0,
                           z0[:rest.layout.n_q], SolverSettings(), 1e-6)
    problem = ReducedProblem(rest, 100.0 / rest.fmax, OBJECTIVE_FLOOR["b"], posture.th_target(), 0.0)
    assert result.stalled and result.iterations <= 2 * reduced_static.STALL_WINDOW
    assert problem.evaluate(result.z[:rest.layout.n_q]).balanced(1e-2)


@pytest.mark.parametrize("criterion, elevation", [("b", 60.0), ("a", 90.0)])
def test_reduced_and_full_space_reach_the_same_optimum(model, criterion, elevation, monkeypatch):
    posture = arm_posture(model, elevation)
    full = so.solve_static(model, posture, criterion=criterion, settings=FULL)
    calls = _spy(monkeypatch)
    reduced = so.solve_static(model, posture, criterion=criterion, settings=SolverSettings(polish_iterations=0))
    assert calls == ["reduced"] and reduced.checks.passed           # the reduced solve alone, no polish
    assert reduced.cost == pytest.approx(full.cost, rel=1e-6)


def test_issue_case_b_at_90_deg_in_the_scapular_plane(model, monkeypatch):
    """Issue 36: criterion (b), plane 45 deg, elevation 90 deg, where the full-space cold start once stopped
    at 35 335; the reduced solve reaches 19 522.3 cold (as the full-space solve now does)."""
    calls = _spy(monkeypatch)
    sol = so.solve_static(model, arm_posture(model, 90.0, plane_deg=45.0), criterion="b")
    assert calls == REDUCED_PATH and sol.checks.passed
    assert sol.cost == pytest.approx(19522.3, abs=0.05)


def test_gh_limit_binds_and_both_paths_agree(model, monkeypatch):
    posture = arm_posture(model, 30.0)
    full = so.solve_static(model, posture, criterion="b", gh_limit=-0.9, settings=FULL)
    calls = _spy(monkeypatch)
    reduced = so.solve_static(model, posture, criterion="b", gh_limit=-0.9)
    assert calls == REDUCED_PATH
    assert "gh_stability" in reduced.active and reduced.gh_stability == pytest.approx(-0.9, abs=1e-6)
    assert reduced.cost == pytest.approx(full.cost, rel=1e-6)
    free = so.solve_static(model, posture, criterion="b", gh_limit=0.0)
    assert free.gh_stability < -0.9 + 0.2 and free.cost < reduced.cost   # the limit costs effort


def test_criterion_d_starts_from_the_reduced_b(model, monkeypatch):
    posture = arm_posture(model, 60.0)
    full = so.solve_static(model, posture, criterion="d", settings=FULL)
    calls = _spy(monkeypatch)
    sol = so.solve_static(model, posture, criterion="d")
    assert calls[:2] == REDUCED_PATH and "reduced" not in calls[2:] and sol.checks.passed
    assert sol.cost == pytest.approx(full.cost, rel=1e-6)


@pytest.mark.parametrize("failure", ["raise", "unbalanced"])
def test_fallback_to_the_full_space_when_the_reduced_solve_fails(model, monkeypatch, failure):
    posture = arm_posture(model, 60.0)
    full = so.solve_static(model, posture, criterion="b", settings=FULL)
    real = so.solve_reduced
    calls = []

    def broken(rest, *args, **kw):
        calls.append(failure)
        if failure == "raise":
            raise ReducedSolveError("made to fail")
        result = real(rest, *args, **kw)
        result.z[rest.layout.alpha] = 0.0                      # finish() must reject this
        return result

    monkeypatch.setattr(so, "solve_reduced", broken)
    sol = so.solve_static(model, posture, criterion="b", settings=SolverSettings(polish_iterations=0))
    assert calls == [failure] and sol.checks.passed
    assert sol.cost == pytest.approx(full.cost, rel=1e-6)


def test_forced_full_space_and_given_girdle_do_not_use_the_reduced_solver(model, monkeypatch):
    """A given girdle leaves no angle to choose: the inner QP alone would do, but the full-space solve of
    138 alphas is already fast there, so it keeps the full path."""
    calls = _spy(monkeypatch)
    posture = arm_posture(model, 60.0)
    sol = so.solve_static(model, posture, criterion="b", settings=FULL)
    girdle = tuple(float(v) for v in sol.x[list(so.GIRDLE_DOFS)])
    held = so.solve_static(model, so.Posture(*[getattr(posture, f) for f in ("plane_of_elevation", "elevation",
                           "axial_rotation", "elbow_flexion", "pronation")], girdle=girdle), criterion="b")
    assert calls == ["full:500", "full:500"] and held.checks.passed
    assert held.cost == pytest.approx(sol.cost, rel=1e-4)


def _spy(monkeypatch) -> list:
    """Record each call of the reduced solver ("reduced") and of the full-space SLSQP ("full:<max iterations>")
    in solve_static: the reduced path is ["reduced", "full:200"] (the polish), a fallback adds a "full:500"."""
    calls, reduced, full = [], so.solve_reduced, so.optimise

    def spy_reduced(*args, **kw):
        calls.append("reduced")
        return reduced(*args, **kw)

    def spy_full(rest, fun, jac, z, cons, settings, *args, **kw):
        calls.append(f"full:{settings.max_iterations}")
        return full(rest, fun, jac, z, cons, settings, *args, **kw)

    monkeypatch.setattr(so, "solve_reduced", spy_reduced)
    monkeypatch.setattr(so, "optimise", spy_full)
    return calls
