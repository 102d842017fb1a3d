"""Stimulation-channel optimisation: which channel levels hold a posture with the GH joint stable, and
whether any can with these electrodes.

The unknowns are the free girdle and GH angles and one level per channel, l_c in [0, 1] (recruitment x
frequency factor of the stimulation map, ``hil.stimulation``); the excitation of element k is
u_k = min(1, max_c G_ck l_c) (the map's rule) and at rest a = u. Elements under no electrode stay at
a = 0: the paralysed arm's muscles act only passively. Each element's rest state solves g = 0 at its a
(bracketed Newton, :func:`sim._muscles.solve_rest_lengths`), and F(q, a) with its implicit-function
derivatives gives the constraints of :mod:`sim.static_opt` (equations of motion, thoracohumeral
angles, GH stability, TS/AI on the thorax).

Two stages: (1) the smallest violation: min |f_eom|² + |thoracohumeral error|² (N m and rad, 1 N m per
rad) within the bounds, by bounded Gauss-Newton (scipy ``least_squares``, trust-region reflective, exact
Jacobian; SLSQP stalls on this badly scaled sum of squares: the contact makes the girdle columns
~100 times stiffer than the channel columns); if it is not zero the posture cannot be held and the
unbalanced equations are reported; (2) otherwise the least stimulation, min sum l², holding the posture
with GH stability and TS/AI contact constrained (SLSQP, as in :mod:`sim.static_opt`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from sim import static_opt as so
from sim._muscles import solve_rest_lengths
from sim._step import FIBRE_MIN, IA, IS
from sim.model import N_MUS, Das3Model


class ChannelRestModel(so.RestModel):
    """:class:`sim.static_opt.RestModel` with channel levels instead of per-muscle force fractions."""

    def __init__(self, model: Das3Model, loads, q_template, layout: so.Layout, gains: np.ndarray) -> None:
        super().__init__(model, loads, q_template, layout)
        self.gains = np.asarray(gains, float)
        self._s = np.array(model.equilibrium_state[IS:IA])

    def excitation(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(u (138,), du/dl (138, n_ch)) of the map's max rule."""
        drive = self.gains * np.asarray(levels)[:, None]
        best = np.argmax(drive + 1e-12 * self.gains, axis=0)      # ties at level 0: the muscle's own channel
        u = drive[best, np.arange(N_MUS)]
        du = np.zeros((N_MUS, len(levels)))
        inside = u < 1.0
        du[np.arange(N_MUS)[inside], best[inside]] = self.gains[best[inside], np.arange(N_MUS)[inside]]
        return np.minimum(u, 1.0), du

    def _state_of(self, q, levels, loads):
        a, du = self.excitation(levels)
        self._evaluate(q, self._s, a, loads)
        solve_rest_lengths(self.A, self.W.mu.L, a, self._s, FIBRE_MIN, 1e-13, 200)
        x = self._evaluate(q, self._s, a, loads)
        mu = self.W.mu
        free = np.abs(mu.g) <= 1e-9                    # not held at the fibre floor
        dF4 = mu.dF4
        dF_dL = self.fmax * dF4 * np.where(free, 1.0 + self.lceopt * dF4 / mu.g_s, 1.0)
        dF_da = np.where(free, self.fmax * dF4 * self.lceopt * mu.g_a / mu.g_s, 0.0)
        return mu.force.copy(), dF_dL, dF_da[:, None] * du, x


def _least_violation(rest: ChannelRestModel, eq: dict, z0: np.ndarray) -> np.ndarray:
    """Stage 1: z within the bounds at the smallest equality residual."""
    from scipy.optimize import least_squares

    lo, hi = np.array(so.bounds(rest.model, rest.layout, rest.q_template), float).T
    res = least_squares(eq["fun"], np.clip(z0, lo, hi), jac=eq["jac"], bounds=(lo, hi), method="trf",
                        xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=400)
    return res.x


@dataclass
class ChannelSolution:
    levels: np.ndarray                 # (n_ch,) recruitment x frequency factor
    feasible: bool
    smallest_violation_nm: float       # max |f_eom| of stage 1 (0 when feasible)
    unbalanced: list[tuple[str, float]]   # DOF, residual N m of stage 1 (largest first)
    solution: so.StaticSolution | None   # the checked stage-2 solution (None when infeasible)
    message: str
    time_s: float


def solve_channels(model: Das3Model, posture: so.Posture, gains: np.ndarray, loads=None, gh_limit: float = 0.0,
                   settings: so.SolverSettings = so.SolverSettings(),
                   tolerances: so.Tolerances = so.Tolerances()) -> ChannelSolution:
    """Channel levels that hold ``posture`` (girdle free unless given) at least stimulation."""
    t_start = time.perf_counter()
    loads = so.checked_loads(loads)
    gains = np.asarray(gains, float)
    q0 = so.start_posture(model, posture, None)
    layout = so.Layout(so.layout_for(posture, 0).free_dofs, n_alpha=gains.shape[0])
    rest = ChannelRestModel(model, loads, q0, layout, gains)
    z = np.concatenate([q0[list(layout.free_dofs)], np.zeros(gains.shape[0])])
    eq = so.equalities(rest, posture)
    ineq = so.inequalities(rest, gh_limit)
    z = _least_violation(rest, eq, z)
    r = rest.at(z)
    worst = float(np.max(np.abs(r.f_eom)))
    order = np.argsort(-np.abs(r.f_eom))
    unbalanced = [(model.dof_names[j], float(r.f_eom[j])) for j in order if abs(r.f_eom[j]) > tolerances.eom_nm]
    if unbalanced or np.max(np.abs(eq["fun"](z))) > tolerances.posture_rad:
        listing = ", ".join(f"{n} {v:+.3g} N m" for n, v in unbalanced[:4])
        return ChannelSolution(z[layout.alpha].copy(), False, worst, unbalanced, None,
                               f"infeasible: no channel levels hold this posture; smallest violation "
                               f"max |f_eom| = {worst:.3g} N m ({listing})", time.perf_counter() - t_start)
    levels_sq = (lambda z: float(z[layout.alpha] @ z[layout.alpha]),
                 lambda z: np.concatenate([np.zeros(layout.n_q), 2 * z[layout.alpha]]))
    z, its = so.optimise(rest, *levels_sq, z, [eq, *ineq], settings, tolerances, floor=1e-2)
    try:
        sol = so.finish(rest, z, posture, "channels", levels_sq[0](z), gh_limit, its, t_start, tolerances)
    except so.StaticOptError as exc:
        return ChannelSolution(z[layout.alpha].copy(), False, worst, [], exc.args[1],
                               f"infeasible: the least-stimulation solution fails its checks: {exc.args[0]}",
                               time.perf_counter() - t_start)
    return ChannelSolution(z[layout.alpha].copy(), True, 0.0, [], sol, "feasible", time.perf_counter() - t_start)
