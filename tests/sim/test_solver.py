"""The shared optimiser: BLAS pinned to one thread inside a solve; the acceptance test of a point."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from sim.analysis.solver import MOMENT_SCALE_NM, SolverSettings, optimise, run_slsqp, satisfied, variable_scale

TOL = SimpleNamespace(eom_nm=1e-6, constraint=1e-6)


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_blas_runs_on_one_thread_inside_a_solve():
    seen = []

    def fun(z):
        seen.extend(_blas_threads())
        return float(z @ z)

    with threadpool_limits(limits=2, user_api="blas"):
        outside = _blas_threads()
        z, _ = run_slsqp(fun, lambda z: 2 * z, np.ones(3), [], [(None, None)] * 3, SolverSettings())
        assert _blas_threads() == outside                        # restored afterwards
    assert seen and set(seen) == {1}
    np.testing.assert_allclose(z, 0.0, atol=1e-6)


def test_optimise_meets_the_constraints_it_is_given():
    """min (z0 - 2)^2 + z1^2 with z0 + z1 = 1 and z1 >= 0.8: the answer lies on both constraints."""
    cons = [{"type": "eq", "fun": lambda z: np.array([z[0] + z[1] - 1.0]), "jac": lambda z: np.array([[1.0, 1.0]])},
            {"type": "ineq", "fun": lambda z: np.array([z[1] - 0.8]), "jac": lambda z: np.array([[0.0, 1.0]])}]
    z, iterations = optimise(lambda z: (z[0] - 2) ** 2 + z[1] ** 2, lambda z: np.array([2 * (z[0] - 2), 2 * z[1]]),
                             np.zeros(2), cons, [(None, None)] * 2, SolverSettings(), TOL, floor=1.0)
    np.testing.assert_allclose(z, [0.2, 0.8], atol=1e-6)
    assert iterations > 0 and satisfied(z, cons, TOL)
    assert not satisfied(np.array([0.3, 0.7]), cons, TOL)       # on the equality, below the inequality
    assert not satisfied(np.array([0.3, 0.8]), cons, TOL)       # on the inequality, off the equality


def test_scaled_unknowns_give_the_same_optimum():
    """min (z0 - 2)^2 + ((z1 - 300) / 100)^2 with z0 + z1 / 100 = 4, 0 <= z1 <= 1000: z = (1.5, 250), with
    SLSQP working in z or in y = z / (1, 100)."""
    cons = [{"type": "eq", "fun": lambda z: np.array([z[0] + z[1] / 100 - 4.0]),
             "jac": lambda z: np.array([[1.0, 0.01]])}]

    def fun(z):
        return (z[0] - 2) ** 2 + ((z[1] - 300) / 100) ** 2

    def jac(z):
        return np.array([2 * (z[0] - 2), 2 * (z[1] - 300) / 1e4])

    for scale in (None, np.array([1.0, 100.0])):
        z, _ = run_slsqp(fun, jac, np.array([0.0, 10.0]), cons, [(None, None), (0.0, 1000.0)], SolverSettings(),
                         scale=scale)
        np.testing.assert_allclose(z, [1.5, 250.0], rtol=1e-6)


def test_moments_are_scaled_and_nothing_else():
    from sim.analysis.rest_model import Layout

    layout = Layout(free_dofs=(0, 1, 2), n_moments=5, n_extra=1)
    d = variable_scale(layout)
    assert d.shape == (layout.size,)
    assert np.all(d[layout.moments] == MOMENT_SCALE_NM)
    assert np.count_nonzero(d != 1.0) == 5
