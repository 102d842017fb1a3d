"""Functional access to the implicit DAS3 dynamics f(x, xdot, u) = 0 and its exact Jacobians.

For tests, the reference solver and analysis (allocates; not for the real-time path, which uses
:class:`sim.das3.plant.Plant`). State layout: x = [q (11) | qdot (11) | s (138) | a (138)].
"""
from __future__ import annotations

import numpy as np

from sim.das3.kernels.step import IA, IQ, IQD, IS, PlantWork, evaluate, new_plant_work
from sim.das3.model import N_DOF, N_LOADS, N_MUS, N_STATES, Das3Model
from sim.jit.kernel import writable


def _work_for(model: Das3Model) -> PlantWork:
    return new_plant_work(model.arrays)


def _vector(values, n: int, name: str) -> np.ndarray:
    arr = writable(values)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    return arr


def _inputs(x, xdot, u, loads):
    return (_vector(x, N_STATES, "x"), _vector(xdot, N_STATES, "xdot"), _vector(u, N_MUS, "u"),
            np.zeros(N_LOADS) if loads is None else _vector(loads, N_LOADS, "loads"))


def residual(model: Das3Model, x, xdot, u, loads=None, work: PlantWork | None = None) -> np.ndarray:
    """f(x, xdot, u) (298,): [qdot - dq/dt | f_eom | g (contraction) | h (activation)]."""
    W = work or _work_for(model)
    evaluate(model.arrays, *_inputs(x, xdot, u, loads), W)
    return W.st.f.copy()


def jacobians(model: Das3Model, x, xdot, u, loads=None, work: PlantWork | None = None):
    """(f, df/dx (298x298), df/dxdot (298x298), df/du (298x138)), dense, from the exact structured pieces."""
    W = work or _work_for(model)
    A = model.arrays
    evaluate(A, *_inputs(x, xdot, u, loads), W)
    mb, mu, st = W.mb, W.mu, W.st
    dfdx = np.zeros((N_STATES, N_STATES))
    dfdxd = np.zeros((N_STATES, N_STATES))
    dfdu = np.zeros((N_STATES, N_MUS))
    eye = np.eye(N_DOF)
    dfdx[IQ:IQD, IQD:IS] = eye
    dfdxd[IQ:IQD, IQ:IQD] = -eye
    dfdx[IQD:IS, IQ:IQD] = st.Aq
    dfdx[IQD:IS, IQD:IS] = st.Av
    dfdxd[IQD:IS, IQD:IS] = -mb.M
    for i in range(N_MUS):
        dofs = A.mus_dofs[i, : A.mus_ndof[i]]
        dfdx[IQD + dofs, IS + i] = mu.C[i, : len(dofs)]
        dfdx[IS + i, IQ + dofs] = mu.dF4[i] * mu.G[i, : len(dofs)]
        dfdx[IS + i, IS + i] = mu.g_s[i]
        dfdx[IS + i, IA + i] = mu.g_a[i]
        dfdxd[IS + i, IS + i] = mu.g_sd[i]
        dfdx[IA + i, IA + i] = -st.rate_da[i]
        dfdxd[IA + i, IA + i] = 1.0
        dfdu[IA + i, i] = -st.rate_du[i]
    return st.f.copy(), dfdx, dfdxd, dfdu
