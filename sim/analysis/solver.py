"""The optimiser the rest-state analyses share (:mod:`sim.analysis.static_opt`, :mod:`sim.analysis.max_moment`):
SLSQP with exact first derivatives, restarts while a constraint is not met, and BLAS pinned to one thread.

SLSQP (Kraft 1988, scipy's ``method="SLSQP"``) solves a dense least-squares QP per iteration: it suits ~150
unknowns with a few dozen nonlinear constraints, and its matrices are small, so more BLAS threads only
contend for the cores.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits


@dataclass(frozen=True)
class SolverSettings:
    max_iterations: int = 500
    ftol: float = 1e-10
    restarts: int = 2        # SLSQP runs again from its last point (a fresh quasi-Newton matrix) if the
                             # constraints are not met there
    reduced: bool = True     # static optimisation (a), (b) and (d)'s first stage over the angles alone
                             # (sim.analysis.reduced_static); False: the full-space SLSQP
    polish_iterations: int = 200  # at most this many full-space SLSQP iterations after a reduced solve (0: none)


MAX_MOMENT_SETTINGS = SolverSettings(ftol=1e-6)
"""For the max-moment solves: SLSQP stops when a step changes the objective (the moment / 10 N m) by < 1e-6,
i.e. the moment by < 1e-5 N m, the same order as the equality tolerance (1e-6 N m) it must also meet. With
1e-10 the forearm tasks spend hundreds of iterations on changes below 1e-4 N m."""

MOMENT_SCALE_NM = 10.0
"""Unit of the free external moments inside SLSQP (:func:`variable_scale`): with moments in N m and
activations in [0, 1] SLSQP's first quasi-Newton steps move the moments ~1 N m and the max-moment solves
take 3-5x more iterations to the same optimum (docs: the speed notes)."""

OBJECTIVE_FLOOR = {"a": 1e4, "b": 1e2, "c": 1e-2}
"""Objective scales when the start value is smaller (e.g. criterion (c) from a = 0)."""


def variable_scale(layout) -> np.ndarray:
    """(layout.size,) units of z inside SLSQP: 1 (rad, activation) except the moments, MOMENT_SCALE_NM."""
    d = np.ones(layout.size)
    d[layout.moments] = MOMENT_SCALE_NM
    return d


@contextmanager
def one_blas_thread():
    """BLAS thread pools limited to one thread inside (restored on exit); also usable as a decorator.
    The solves are many products of ~150-wide matrices: on a shared machine extra threads oversubscribe
    the cores instead of helping."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def run_slsqp(fun, jac, z0, constraints, bounds, settings: SolverSettings, floor: float = 1.0, scale=None):
    """SLSQP from z0 with the objective scaled by its start value (at least ``floor``), BLAS on one thread.
    ``scale`` (n,) > 0: SLSQP works in y = z / scale (e.g. moments in units of :data:`MOMENT_SCALE_NM`), so
    that one step weighs the unknowns alike; None: y = z. Returns (z, iterations)."""
    d = np.ones(np.size(z0)) if scale is None else np.asarray(scale, float)
    with one_blas_thread():
        s = max(abs(fun(z0)), floor)
        from scipy.optimize import minimize  # imported where it is used: scipy.optimize is slow to import
        res = minimize(lambda y: fun(d * y) / s, np.asarray(z0) / d, jac=lambda y: jac(d * y) * d / s,
                       method="SLSQP", bounds=scaled_bounds(bounds, d),
                       constraints=[scaled_constraint(c, d) for c in constraints],
                       options={"maxiter": settings.max_iterations, "ftol": settings.ftol})
    return d * res.x, int(res.nit)


def scaled_bounds(bounds: list, d: np.ndarray) -> list:
    """Bounds on z as bounds on y = z / d (None stays unbounded)."""
    return [(None if lo is None else lo / di, None if hi is None else hi / di) for (lo, hi), di in zip(bounds, d)]


def scaled_constraint(c: dict, d: np.ndarray) -> dict:
    """A scipy constraint on z as one on y = z / d: same values, Jacobian columns times d."""
    return {"type": c["type"], "fun": lambda y: c["fun"](d * y), "jac": lambda y: np.atleast_2d(c["jac"](d * y)) * d}


def optimise(fun, jac, z: np.ndarray, cons: list, bounds: list, settings: SolverSettings, tol,
             floor: float, scale=None) -> tuple[np.ndarray, int]:
    """SLSQP within ``bounds`` (in y = z / ``scale``, :func:`run_slsqp`), run again from its last point (up to ``settings.restarts`` times) while a
    constraint is not met there (:func:`satisfied`). Returns (z, total iterations)."""
    total = 0
    for _ in range(1 + settings.restarts):
        z, its = run_slsqp(fun, jac, z, cons, bounds, settings, floor, scale)
        total += its
        if satisfied(z, cons, tol):
            break
    return z, total


def satisfied(z: np.ndarray, cons: list, tol) -> bool:
    """Every constraint within the acceptance tolerances ``tol`` (equalities to ``tol.eom_nm``, inequalities
    to ``tol.constraint``; :class:`sim.analysis.static_opt.Tolerances`) at z."""
    for c in cons:
        v = np.atleast_1d(c["fun"](z))
        if (c["type"] == "eq" and np.max(np.abs(v)) > tol.eom_nm) or (c["type"] == "ineq" and v.min() < -tol.constraint):
            return False
    return True
