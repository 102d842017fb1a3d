"""Tightly toleranced reference solution of the same implicit equations (offline, for accuracy checks).

The implicit model f(x, xdot, u) = 0 is turned into xdot = F(x, t) for scipy's stiff solvers:
dq/dt = qdot; da/dt from the activation equation; each dsdot_i from its scalar contraction equation
g_i(sdot_i) = 0 (Newton, exact dg/dsdot); qdd = M^-1 f_eom(qdd = 0) (f_eom is affine in qdd with slope -M).
The Jacobian handed to the solver is exact: dF/dx = -(df/dxdot)^-1 df/dx (implicit function theorem).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.integrate import solve_ivp

from sim._step import IA, IQD, IS, evaluate, new_plant_work
from sim.dynamics import jacobians
from sim.model import N_LOADS, N_STATES, Das3Model


class ReferenceModel:
    """xdot = F(x, t) of the DAS3 model for a given excitation function u(t)."""

    def __init__(self, model: Das3Model, excitation: Callable[[float], np.ndarray], loads=None) -> None:
        self.model = model
        self.excitation = excitation
        self.loads = np.zeros(N_LOADS) if loads is None else np.asarray(loads, np.float64)
        self._work = new_plant_work(model.arrays)
        self._xd = np.zeros(N_STATES)
        self.n_rhs = 0
        self.n_jac = 0

    def rhs(self, t: float, x: np.ndarray) -> np.ndarray:
        self.n_rhs += 1
        A, W = self.model.arrays, self._work
        u = np.asarray(self.excitation(t), np.float64)
        xd = self._xd  # previous solution: a good Newton start for sdot
        xd[IQD:IS] = 0.0
        for _ in range(50):
            evaluate(A, x, xd, u, self.loads, W)
            g = W.mu.g
            if np.max(np.abs(g)) < 1e-14:
                break
            xd[IS:IA] -= g / W.mu.g_sd
        else:
            raise RuntimeError(f"contraction velocities did not converge at t = {t}")
        out = np.empty(N_STATES)
        out[:IQD] = x[IQD:IS]
        out[IQD:IS] = np.linalg.solve(W.mb.M, W.st.f[IQD:IS])
        out[IS:IA] = xd[IS:IA]
        out[IA:] = W.st.rate
        return out

    def jac(self, t: float, x: np.ndarray) -> np.ndarray:
        self.n_jac += 1
        u = np.asarray(self.excitation(t), np.float64)
        xd = self.rhs(t, x)
        _, dfdx, dfdxd, _ = jacobians(self.model, x, xd, u, self.loads, work=self._work)
        return -np.linalg.solve(dfdxd, dfdx)


def simulate_reference(model: Das3Model, x0, excitation: Callable[[float], np.ndarray], t_eval,
                       loads=None, method: str = "Radau", rtol: float = 1e-9, atol: float = 1e-10):
    """Integrate from x0 over [0, t_eval[-1]] with a stiff variable-step solver; returns (t, X, solver info)."""
    ref = ReferenceModel(model, excitation, loads)
    t_eval = np.asarray(t_eval, np.float64)
    sol = solve_ivp(ref.rhs, (0.0, float(t_eval[-1])), np.asarray(x0, np.float64), method=method,
                    t_eval=t_eval, rtol=rtol, atol=atol, jac=ref.jac)
    if not sol.success:
        raise RuntimeError(f"reference solver failed: {sol.message}")
    return sol.t, sol.y.T, {"nfev": sol.nfev, "njev": sol.njev, "nlu": sol.nlu, "rhs_calls": ref.n_rhs}
