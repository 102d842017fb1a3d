"""The reduced-space static optimisation (sim.analysis.reduced_static, issue 36 item 5): the envelope gradient,
agreement with the full-space solve, criterion (c)'s two starts and the fallback to the full space."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import arm_posture

from sim.analysis import reduced_static
from sim.analysis import static_opt as so
from sim.analysis.muscle_problem import ActivationCost, ForceCost, force_weight
from sim.analysis.reduced_static import ReducedProblem, ReducedSolveError, solve_reduced
from sim.analysis.solver import OBJECTIVE_FLOOR, SolverSettings

FULL = SolverSettings(reduced=False)
REDUCED_PATH = ["reduced", f"full:{reduced_static.KINK_POLISH_ITERATIONS}"]


def _cost(rest, criterion):
    if criterion == "c":
        return ActivationCost(rest.model, OBJECTIVE_FLOOR["c"])
    return ForceCost(force_weight(rest.fmax, criterion), OBJECTIVE_FLOOR[criterion])


@pytest.mark.parametrize("criterion, gh_limit", [("b", 0.0), ("b", -0.9), ("c", 0.0), ("c", -0.9)])
def test_envelope_gradient_matches_central_differences(model, criterion, gh_limit):
    """At the criterion's reduced optimum (a balanced point; with the limit -0.9 the GH row binds there)."""
    posture = arm_posture(model, 30.0)
    rest, z0, _ = so.rest_problem(model, posture, None, gh_limit, None, 0)
    args = (rest, _cost(rest, criterion), posture.th_target(), gh_limit)
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
    result = solve_reduced(rest, _cost(rest, "b"), posture.th_target(), 0.0, z0[:rest.layout.n_q], SolverSettings(),
                           1e-6)
    problem = ReducedProblem(rest, _cost(rest, "b"), posture.th_target(), 0.0)
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


@pytest.mark.parametrize("elevation", [30.0, 60.0])
def test_criterion_d_starts_from_the_reduced_b_and_its_fixed_angle_optima(model, monkeypatch, elevation):
    """On the reduced path (d)'s first stage starts from the least-max-stress fractions at (b)'s angles and its
    second from the capped (b) optimum at the first stage's angles; the full-space path uses neither."""
    posture = arm_posture(model, elevation)
    starts = []
    for name in ("min_max_start", "capped_start"):
        real = getattr(so, name)
        monkeypatch.setattr(so, name, lambda *a, _real=real, _name=name, **k: starts.append(_name) or _real(*a, **k))
    full = so.solve_static(model, posture, criterion="d", settings=FULL)
    assert starts == []
    calls = _spy(monkeypatch)
    sol = so.solve_static(model, posture, criterion="d")
    assert calls[:2] == REDUCED_PATH and "reduced" not in calls[2:] and sol.checks.passed
    assert starts == ["min_max_start", "capped_start"]
    assert sol.cost == pytest.approx(full.cost, rel=1e-6)
    assert sol.iterations < full.iterations


def test_a_kink_of_the_reduced_value_is_left_by_solving_again(model, monkeypatch):
    """Criterion (a), plane 60, elevation 30 deg: the reduced solve stops at a kink of V (trapclav2 at full
    activation, where its full force turns into the force at the shortest fibre); the short polish does not
    converge there, so the reduced solve runs again from the polished angles and reaches the full-space optimum
    without the long polish."""
    posture = arm_posture(model, 30.0)
    full = so.solve_static(model, posture, criterion="a", settings=FULL)
    calls, solves, real = _spy(monkeypatch), [], reduced_static.solve_reduced
    monkeypatch.setattr(reduced_static, "solve_reduced", lambda *a, **k: solves.append(1) or real(*a, **k))
    sol = so.solve_static(model, posture, criterion="a")
    assert calls == ["reduced", "full:3", "full:3"] and len(solves) == 2 and sol.checks.passed
    assert sol.cost == pytest.approx(full.cost, rel=1e-6)


@pytest.mark.parametrize("failure", ["raise", "unbalanced"])
def test_fallback_to_the_full_space_when_the_reduced_solve_fails(model, monkeypatch, failure):
    posture = arm_posture(model, 60.0)
    full = so.solve_static(model, posture, criterion="b", settings=FULL)
    real = reduced_static.solve_criterion
    calls = []

    def broken(rest, *args, **kw):
        calls.append(failure)
        if failure == "raise":
            raise ReducedSolveError("made to fail")
        result = real(rest, *args, **kw)
        result.z[rest.layout.alpha] = 0.0                      # finish() must reject this
        return result

    monkeypatch.setattr(reduced_static, "solve_criterion", broken)
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
    in solve_static: the reduced path is ["reduced", "full:3"] (the first polish converged), a kink adds
    ["reduced", "full:3"] rounds, a fallback a "full:500"."""
    calls, reduced, full = [], reduced_static.solve_criterion, so.optimise

    def spy_reduced(*args, **kw):
        calls.append("reduced")
        return reduced(*args, **kw)

    def spy_full(rest, fun, jac, z, cons, settings, *args, **kw):
        calls.append(f"full:{settings.max_iterations}")
        return full(rest, fun, jac, z, cons, settings, *args, **kw)

    monkeypatch.setattr(reduced_static, "solve_criterion", spy_reduced)
    monkeypatch.setattr(so, "optimise", spy_full)
    return calls
