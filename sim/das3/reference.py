"""Tightly toleranced reference solution of the same implicit equations (offline, for accuracy checks).

The implicit model f(x, xdot, u) = 0 is turned into xdot = F(x, t) for scipy's stiff solvers:
dq/dt = qdot; da/dt from the activation equation; each dsdot_i from its scalar contraction equation
g_i(sdot_i) = 0 (Newton, exact dg/dsdot); qdd = M^-1 f_eom(qdd = 0) (f_eom is affine in qdd with slope -M).
The Jacobian handed to the solver is exact: dF/dx = -(df/dxdot)^-1 df/dx (implicit function theorem).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit
from scipy.integrate import solve_ivp

from sim.das3.dynamics import jacobians
from sim.das3.kernels.multibody import multibody_eval
from sim.das3.kernels.muscles import activation_rates, muscle_eval, solve_contraction
from sim.das3.kernels.step import IA, IQD, IS, new_plant_work
from sim.das3.model import N_LOADS, N_STATES, Das3Model
from sim.jit.kernel import writable


@njit(cache=True)
def _explicit_rates(A, x, u, loads, W, xd):
    """xd <- F(x): sdot by a per-muscle safeguarded Newton on g_i(sdot_i) = 0 (g decreases strictly in
    sdot; warm-started from xd), qdd = M^-1 f_eom(qdd = 0).

    Returns False if a contraction velocity does not converge."""
    q, qd, s, a = x[:IQD], x[IQD:IS], x[IS:IA], x[IA:]
    mu = W.mu
    muscle_eval(A, q, s, xd[IS:IA], a, mu)  # lengths, forces and muscle moments (independent of sdot)
    ok = True
    for i in range(s.shape[0]):
        sd, converged = solve_contraction(A.mus[i], mu.L[i], a[i], s[i], 0.0, 0.0, 1.0, xd[IS + i],
                                          1e-14, 200)
        ok = ok and converged
        xd[IS + i] = sd
    activation_rates(A, u, a, xd[IA:], W.st.rate_da, W.st.rate_du)
    for j in range(IQD):
        xd[j] = qd[j]
        W.st.kb[j] = 0.0
    multibody_eval(A, q, qd, W.st.kb, loads, W.mb)  # qdd = 0
    rhs = np.empty(IQD)
    for j in range(IQD):
        rhs[j] = W.mb.Q[j, 0] + mu.tau[j]
    xd[IQD:IS] = np.linalg.solve(W.mb.M, rhs)
    return ok


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
        u = writable(self.excitation(t))
        # the previous solution's sdot is a good Newton start
        if not _explicit_rates(self.model.arrays, writable(x), u, self.loads, self._work, self._xd):
            raise RuntimeError(f"contraction velocities did not converge at t = {t}")
        return self._xd.copy()

    def jac(self, t: float, x: np.ndarray) -> np.ndarray:
        """-(df/dxdot)^-1 df/dx; df/dxdot = blockdiag(-I, -M, diag(dg/dsdot), I) is inverted by blocks."""
        self.n_jac += 1
        u = np.asarray(self.excitation(t), np.float64)
        xd = self.rhs(t, x)
        _, dfdx, dfdxd, _ = jacobians(self.model, x, xd, u, self.loads, work=self._work)
        out = np.empty_like(dfdx)
        out[:IQD] = dfdx[:IQD]
        out[IQD:IS] = np.linalg.solve(-dfdxd[IQD:IS, IQD:IS], dfdx[IQD:IS])  # M^-1 df_eom/dx
        out[IS:IA] = -dfdx[IS:IA] / np.diag(dfdxd)[IS:IA, None]
        out[IA:] = -dfdx[IA:]
        return out


def simulate_reference(model: Das3Model, x0, excitation: Callable[[float], np.ndarray], t_eval,
                       loads=None, method: str = "BDF", rtol: float = 1e-8, atol: float = 1e-9):
    """Integrate from x0 over [0, t_eval[-1]] with a stiff variable-step solver (scipy ``BDF`` or
    ``Radau``); returns (t, X, solver info). At rtol 1e-8 the two methods agree far below the accuracy bar
    they check (README "Accuracy")."""
    ref = ReferenceModel(model, excitation, loads)
    t_eval = np.asarray(t_eval, np.float64)
    sol = solve_ivp(ref.rhs, (0.0, float(t_eval[-1])), np.asarray(x0, np.float64), method=method,
                    t_eval=t_eval, rtol=rtol, atol=atol, jac=ref.jac)
    if not sol.success:
        raise RuntimeError(f"reference solver failed: {sol.message}")
    return sol.t, sol.y.T, {"nfev": sol.nfev, "njev": sol.njev, "nlu": sol.nlu, "rhs_calls": ref.n_rhs}
