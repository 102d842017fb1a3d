"""Static equilibrium of the DAS3 model: f(x, 0, u) = 0 for constant excitation u and loads.

At steady state the activation equals the excitation (h = 0 => a = u) and qdot = 0, leaving
f_eom(q, s) = 0 (11) and g(q, s) = 0 (138). Newton's method with the exact Jacobian, eliminating each
muscle's s (dg_i/ds_i is a scalar), so only an 11x11 system is solved per iteration, with a backtracking
line search on the residual norm. A rough posture is first completed by solving every muscle's
contraction equation for s at that posture; if Newton stalls far from the solution (the passive model has
stiff contacts and soft joints), the posture is relaxed by simulating the dynamics for a while with the
same u and loads (dynamic relaxation) and Newton is restarted. Offline tool (allocates).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.das3.layout import N_DOF, N_LOADS, N_MUS, N_STATES, Das3Model
from sim.das3.plant import Plant, PlantDivergedError


class EquilibriumError(RuntimeError):
    """Newton's method did not converge to a static equilibrium."""


@dataclass(frozen=True)
class EquilibriumResult:
    x: np.ndarray            # (298,) equilibrium state
    residual_rms: float      # RMS of f(x, 0, u) over all 298 equations
    iterations: int
    gh_force: np.ndarray     # (3,) N, on the scapula, scapula frame
    gh_theta: float          # rad, superior (+) / inferior
    gh_phi: float            # rad, anterior-posterior
    gh_stability: float      # paper eq. 9
    st_contact_force: np.ndarray  # (2, 3) N at TS, AI, thorax frame
    th_angles: np.ndarray    # (3,) rad, thoracohumeral YZY


def contraction_states(A, W, x, xd, u, loads, iterations: int = 50) -> None:
    """Solve g_i(q, s_i, 0, a_i) = 0 for every s_i at fixed q (vectorised scalar Newton, kept > 0)."""
    s = x[IS:IA]
    for _ in range(iterations):
        evaluate(A, x, xd, u, loads, W)
        g, g_s = W.mu.g, W.mu.g_s
        if np.max(np.abs(g)) < 1e-12:
            return
        step = g / np.where(g_s != 0.0, g_s, -1.0)
        s[:] = np.maximum(s - step, 0.5 * s)


def solve_equilibrium(model: Das3Model, u=None, loads=None, x_guess=None, *, tol: float = 1e-10,
                      newton_iterations: int = 30, relaxations: int = 8,
                      relax_time_s: float = 0.5) -> EquilibriumResult:
    """Find x with f(x, 0, u) = 0 starting from ``x_guess`` (default: the published equilibrium).

    ``x_guess`` may be a rough posture: only its q (first 11 values) is used; s is re-solved from it.
    Converged when the RMS residual is below ``tol``. Raises :class:`EquilibriumError` otherwise.
    """
    A = model.arrays
    W = new_plant_work(A)
    u = np.zeros(N_MUS) if u is None else np.asarray(u, np.float64)
    if u.shape != (N_MUS,) or not np.all(np.isfinite(u)):
        raise ValueError(f"u must be {N_MUS} finite excitations")
    u = np.clip(u, 0.0, 1.0)
    loads = np.zeros(N_LOADS) if loads is None else np.asarray(loads, np.float64)
    if loads.shape != (N_LOADS,) or not np.all(np.isfinite(loads)):
        raise ValueError(f"loads must be {N_LOADS} finite values (sim.das3.layout.LOAD_NAMES)")
    x = np.array(model.equilibrium_state if x_guess is None else x_guess, dtype=np.float64)
    if x.shape == (N_DOF,):
        q = x
        x = np.array(model.equilibrium_state)
        x[IQ:IQD] = q
    if x.shape != (N_STATES,) or not np.all(np.isfinite(x)):
        raise ValueError("x_guess must be 298 (or 11 joint angles) finite values")
    x[IQD:IS] = 0.0
    x[IA:] = u
    xd = np.zeros(N_STATES)
    contraction_states(A, W, x, xd, u, loads)

    def merit(state) -> float:
        evaluate(A, state, xd, u, loads, W)
        return float(np.sqrt(np.mean(W.st.f ** 2)))

    total = 0
    for attempt in range(relaxations + 1):
        x, rms, its = _newton(A, W, x, xd, u, loads, merit, tol, newton_iterations)
        total += its
        if rms <= tol:
            break
        if attempt == relaxations:
            raise EquilibriumError(f"no equilibrium after {total} Newton iterations and {relaxations} "
                                   f"relaxations of {relax_time_s} s (residual RMS {rms:.3g})")
        x = _relax(model, x, u, loads, relax_time_s)
        contraction_states(A, W, x, xd, u, loads)
    evaluate(A, x, xd, u, loads, W)
    compute_outputs(A, W)
    out = W.out
    return EquilibriumResult(
        x=x, residual_rms=rms, iterations=total, gh_force=out.gh_force.copy(),
        gh_theta=float(out.gh_angles[0]), gh_phi=float(out.gh_angles[1]),
        gh_stability=float(out.gh_stability[0]), st_contact_force=out.contact_force.copy(),
        th_angles=out.th_angles.copy(),
    )


def _relax(model: Das3Model, x, u, loads, duration: float) -> np.ndarray:
    """Simulate the dynamics from x (qdot = 0) for ``duration`` s at constant u and loads."""
    plant = Plant(model, step_s=0.002, initial_state=x)
    plant.set_load_vector(loads)
    plant.reset(x, excitation=u)
    try:
        for _ in range(int(round(duration / plant.step_s))):
            plant.step(u)
    except PlantDivergedError as exc:
        raise EquilibriumError(f"dynamic relaxation diverged: {exc}") from exc
    out = plant.x.copy()
    out[IQD:IS] = 0.0
    out[IA:] = u  # the steady-state activation is u exactly
    return out


def _newton(A, W, x, xd, u, loads, merit, tol, max_iterations):
    """Damped Newton on (q, s). Returns (x, rms, iterations); stops early when the line search stalls."""
    rms = merit(x)
    it = 0
    while rms > tol and it < max_iterations:
        it += 1
        # (Aq - sum_i C_i gq_i^T / g_s_i) dq = -f_eom + sum_i C_i g_i / g_s_i ; ds_i = -(g_i + gq_i.dq)/g_s_i
        mu, st = W.mu, W.st
        K = st.Aq.copy()
        rhs = -st.f[IQD:IS].copy()
        for i in range(N_MUS):
            dofs = A.mus_dofs[i, : A.mus_ndof[i]]
            c = mu.C[i, : len(dofs)]
            gq = mu.dF4[i] * mu.G[i, : len(dofs)]
            K[np.ix_(dofs, dofs)] -= np.outer(c, gq) / mu.g_s[i]
            rhs[dofs] += c * mu.g[i] / mu.g_s[i]
        try:
            dq = np.linalg.solve(K, rhs)
        except np.linalg.LinAlgError as exc:
            raise EquilibriumError(f"singular Jacobian at iteration {it}") from exc
        ds = np.empty(N_MUS)
        for i in range(N_MUS):
            dofs = A.mus_dofs[i, : A.mus_ndof[i]]
            ds[i] = -(mu.g[i] + mu.dF4[i] * (mu.G[i, : len(dofs)] @ dq[dofs])) / mu.g_s[i]
        lam = 1.0
        while True:
            trial = x.copy()
            trial[IQ:IQD] += lam * dq
            trial[IS:IA] += lam * ds
            new_rms = merit(trial) if np.all(trial[IS:IA] > 0) else math.inf
            if new_rms < rms or lam < 1e-6:
                break
            lam *= 0.5
        if not new_rms < rms:
            break
        x, rms = trial, new_rms
    return x, rms, it
